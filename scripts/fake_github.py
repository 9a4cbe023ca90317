"""A local stand-in for the part of GitHub's REST API that ``ragbench verdict`` and
``ragbench accept`` use: a pull request's comments (paged, 100 a page; each with its author),
commit statuses, a user's permission, labels; and the part ``ragbench record`` uses: the pull
requests associated with a commit (``gh.pulls[sha]``, objects made by ``pull``). For the tests
and the workflow rehearsal (scripts/rehearse.py), which have no GitHub. It can also misbehave
as a real server might: answer 5xx, trickle its answer a byte at a time, or redirect to
another host.

    with FakeGitHub(token="t0ken") as gh:   # gh.url -> http://127.0.0.1:PORT
        ...                                  # GITHUB_API_URL=gh.url ragbench verdict ...
        gh.comments[7]                       # [{"id": 1, "body": "...", "user": {...}}] on PR 7
        gh.statuses[sha]                     # [{"state": "failure", ...}, ...], oldest first
        gh.pulls[sq] = [pull(9, head=h9, merge_commit_sha=sq)]  # commit sq: PR 9 merged it
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

BOT = "github-actions[bot]"


def pull(number: int, *, head: str, merge_commit_sha: str | None, base: str = "main",
         merged: bool = True) -> dict:  # fmt: skip
    """A pull request object as GitHub's REST API gives it (the fields ragbench reads, and a
    few it does not): merged into ``base`` as ``merge_commit_sha`` (a merge commit, the squash
    commit, or the last rebased commit), or open (``merged=False``)."""
    return {
        "number": number, "state": "closed" if merged else "open",
        "title": f"pull request {number}", "user": {"login": "author"},
        "merged_at": "2026-11-30T12:00:00Z" if merged else None,
        "merge_commit_sha": merge_commit_sha,
        "head": {"ref": f"feature-{number}", "sha": head},
        "base": {"ref": base, "sha": "0" * 40},
    }  # fmt: skip


class FakeGitHub:
    def __init__(self, token: str, *, bot: str = BOT, host: str = "127.0.0.1"):
        self.token, self.bot, self.host = token, bot, host
        self.comments: dict[int, list[dict]] = {}  # PR number -> its comments, oldest first
        self.statuses: dict[str, list[dict]] = {}  # commit -> statuses posted, oldest first
        self.labels: dict[int, set[str]] = {}  # PR number -> its labels
        self.permissions: dict[str, str] = {}  # user -> admin | write | read (default read)
        self.pulls: dict[str, list[dict]] = {}  # commit -> its associated pull requests
        self.requests: list[str] = []  # "METHOD path", in order
        self.authorized: list[bool] = []  # per request: did it carry a token at all
        # misbehaviour: the next `server_errors` requests get 502; every answer is sent a
        # byte each `trickle` seconds; every request is redirected (307) to `redirect` + path
        self.server_errors = 0
        self.trickle: float | None = None
        self.redirect: str | None = None
        self._ids = 0
        self._server: ThreadingHTTPServer | None = None

    def add(self, pr: int, body: str, user: str = "someone") -> dict:
        self._ids += 1
        comment = {"id": self._ids, "body": body, "user": {"login": user}}
        self.comments.setdefault(pr, []).append(comment)
        return comment

    def _find(self, cid: int) -> dict | None:
        return next((c for cs in self.comments.values() for c in cs if c["id"] == cid), None)

    def _handle(self, method: str, path: str, body: dict | None) -> tuple[int, object]:
        parts = [unquote(p) for p in path.split("?")[0].strip("/").split("/")]
        if len(parts) < 3 or parts[0] != "repos":
            return 404, {"message": "Not Found"}
        rest = parts[3:]  # after /repos/{owner}/{repo}
        if len(rest) == 3 and rest[0] == "issues" and rest[2] == "comments":
            pr = int(rest[1])
            if method == "GET":
                page = int(path.rsplit("page=", 1)[1]) if "page=" in path else 1
                return 200, self.comments.get(pr, [])[(page - 1) * 100 : page * 100]
            if method == "POST":
                return 201, self.add(pr, body["body"], self.bot)
        if rest[:2] == ["issues", "comments"] and len(rest) == 3 and method == "PATCH":
            comment = self._find(int(rest[2]))
            if comment is None:
                return 404, {"message": "Not Found"}
            comment["body"] = body["body"]
            return 200, comment
        if len(rest) == 2 and rest[0] == "statuses" and method == "POST":
            self.statuses.setdefault(rest[1], []).append(body)
            return 201, {"id": len(self.statuses[rest[1]]), **body}
        if len(rest) == 3 and rest[0] == "commits" and rest[2] == "pulls" and method == "GET":
            page = int(path.rsplit("page=", 1)[1]) if "page=" in path else 1
            return 200, self.pulls.get(rest[1], [])[(page - 1) * 100 : page * 100]
        if len(rest) == 3 and rest[0] == "collaborators" and rest[2] == "permission":
            return 200, {"permission": self.permissions.get(rest[1], "read")}
        if len(rest) == 4 and rest[0] == "issues" and rest[2] == "labels" and method == "DELETE":
            labels = self.labels.setdefault(int(rest[1]), set())
            if rest[3] not in labels:
                return 404, {"message": "Label does not exist"}
            labels.discard(rest[3])
            return 200, [{"name": n} for n in sorted(labels)]
        return 404, {"message": "Not Found"}

    def __enter__(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                fake.requests.append(f"{self.command} {self.path}")
                auth = self.headers.get("Authorization")
                fake.authorized.append(auth is not None)
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if fake.redirect:
                    self.send_response(307)
                    self.send_header("Location", fake.redirect + self.path)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if fake.server_errors:
                    fake.server_errors -= 1
                    code, reply = 502, {"message": "Bad Gateway"}
                elif auth != f"Bearer {fake.token}":
                    code, reply = 401, {"message": "Bad credentials"}
                else:
                    code, reply = fake._handle(self.command, self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                trickle = fake.trickle
                if trickle is None:
                    self.wfile.write(data)
                    return
                try:
                    for i in range(len(data)):
                        self.wfile.write(data[i : i + 1])
                        self.wfile.flush()
                        time.sleep(trickle)
                except OSError:  # the client gave up: what a trickle is for
                    pass

            do_GET = do_POST = do_PATCH = do_DELETE = _serve

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer((self.host, 0), Handler)
        self._server.daemon_threads = True
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self._server.server_port}"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
