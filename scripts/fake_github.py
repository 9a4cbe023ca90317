"""A local stand-in for the part of GitHub's REST API that ``ragbench comment`` uses: list a
pull request's comments (paged, 100 a page), post one, edit one. For the tests and the
workflow rehearsal (scripts/rehearse.py), which have no GitHub.

    with FakeGitHub(token="t0ken") as gh:   # gh.url -> http://127.0.0.1:PORT
        ...                                  # GITHUB_API_URL=gh.url ragbench comment ...
        gh.comments[7]                       # [{"id": 1, "body": "..."}, ...] on PR 7
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class FakeGitHub:
    def __init__(self, token: str):
        self.token = token
        self.comments: dict[int, list[dict]] = {}  # PR number -> its comments, oldest first
        self.requests: list[str] = []  # "METHOD path", in order
        self._ids = 0
        self._server: ThreadingHTTPServer | None = None

    def add(self, pr: int, body: str) -> dict:
        self._ids += 1
        comment = {"id": self._ids, "body": body}
        self.comments.setdefault(pr, []).append(comment)
        return comment

    def _find(self, cid: int) -> dict | None:
        return next((c for cs in self.comments.values() for c in cs if c["id"] == cid), None)

    def _handle(self, method: str, path: str, body: dict | None) -> tuple[int, object]:
        # /repos/{owner}/{repo}/issues/{pr}/comments?per_page=100&page=N
        # /repos/{owner}/{repo}/issues/comments/{id}
        parts = path.split("?")[0].strip("/").split("/")
        if len(parts) == 6 and parts[3] == "issues" and parts[5] == "comments":
            pr = int(parts[4])
            if method == "GET":
                page = int(path.rsplit("page=", 1)[1]) if "page=" in path else 1
                return 200, self.comments.get(pr, [])[(page - 1) * 100 : page * 100]
            if method == "POST":
                return 201, self.add(pr, body["body"])
        if len(parts) == 6 and parts[3:5] == ["issues", "comments"] and method == "PATCH":
            comment = self._find(int(parts[5]))
            if comment is None:
                return 404, {"message": "Not Found"}
            comment["body"] = body["body"]
            return 200, comment
        return 404, {"message": "Not Found"}

    def __enter__(self) -> FakeGitHub:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                fake.requests.append(f"{self.command} {self.path}")
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                if self.headers.get("Authorization") != f"Bearer {fake.token}":
                    code, reply = 401, {"message": "Bad credentials"}
                else:
                    code, reply = fake._handle(self.command, self.path, body)
                data = json.dumps(reply).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PATCH = _serve

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_port}"

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
