"""GitHub's REST API, the part the trusted jobs use: the gate's one comment, the
``ragbench/gate`` commit status, a user's permission, a label, and the pull requests GitHub
associates with a main commit (whose acceptances ``ragbench record`` carries to it).

The client never waits for ever and never hands the token to a stranger:
- every attempt has one deadline for the whole answer (``timeout``, 30 s, or
  ``$RAGBENCH_GITHUB_TIMEOUT``), so a server that trickles a byte at a time is cut off like
  one that never answers;
- 5xx answers, timeouts and broken connections are tried ``attempts`` times in all (4, or
  ``$RAGBENCH_GITHUB_ATTEMPTS``) with exponential backoff (1, 2, 4 s), then ``GitHubError``
  says what happened (the CLI exits 2);
- a redirect to another host (or from https to http) is followed without the token;
- the gate's comment is found by its marker AND its author: only the bot's own comment is
  edited (``bot``: ``github-actions[bot]``, or ``$RAGBENCH_BOT_LOGIN``).
"""

from __future__ import annotations

import json
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

MARKER = "<!-- ragbench-gate -->"  # the first line of the gate's one PR comment
STATUS_CONTEXT = "ragbench/gate"
BOT = "github-actions[bot]"
MAX_ANSWER = 16 * 2**20  # bytes; a page of 100 comments is well under this
COMMENT_LIMIT = 65536  # GitHub refuses longer comment bodies


class GitHubError(RuntimeError):
    """The API refused, or could not be reached after the retries."""


class _Retry(Exception):
    """An attempt that may succeed if made again (5xx, timeout, connection)."""


class _SameHostAuth(urllib.request.HTTPRedirectHandler):
    """Follow redirects, dropping the token when the target is another host or scheme."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        if new is not None:
            old, to = urllib.parse.urlsplit(req.full_url), urllib.parse.urlsplit(newurl)
            if (old.scheme, old.netloc) != (to.scheme, to.netloc):
                new.remove_header("Authorization")
        return new


class Client:
    """``repo`` (owner/name) through ``api`` (default ``$GITHUB_API_URL`` or api.github.com)."""

    def __init__(self, repo: str, token: str, api: str | None = None, *,
                 timeout: float | None = None, attempts: int | None = None,
                 backoff: float = 1.0, bot: str | None = None):  # fmt: skip
        if not token:
            raise GitHubError("no token: set $GITHUB_TOKEN")
        if not repo or repo.count("/") != 1:
            raise GitHubError(
                f"repository {repo!r} is not owner/name: pass --repo or set $GITHUB_REPOSITORY"
            )
        self.repo, self.token = repo, token
        self.api = (api or os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
        env = os.environ
        self.timeout = timeout or float(env.get("RAGBENCH_GITHUB_TIMEOUT") or 30)
        self.attempts = attempts or int(env.get("RAGBENCH_GITHUB_ATTEMPTS") or 4)
        self.backoff = backoff
        self.bot = bot or os.environ.get("RAGBENCH_BOT_LOGIN") or BOT
        self._opener = urllib.request.build_opener(_SameHostAuth)

    # --- transport --------------------------------------------------------------------------

    def call(self, method: str, path: str, body: dict | None = None, *, missing_ok=False):
        """The parsed JSON answer to ``method path``; None for a 404 when ``missing_ok``."""
        url = f"{self.api}{path}"
        last = ""
        for attempt in range(self.attempts):
            if attempt:
                time.sleep(self.backoff * 2 ** (attempt - 1))
            try:
                status, data = self._once(method, url, body)
            except _Retry as exc:
                last = str(exc)
                continue
            if status == 404 and missing_ok:
                return None
            if not 200 <= status < 300:  # 3xx here: a redirect urllib would not follow
                raise GitHubError(f"{method} {url}: HTTP {status}: {_message(data)}")
            try:
                return json.loads(data or b"null")
            except json.JSONDecodeError:
                raise GitHubError(f"{method} {url}: the answer is not JSON") from None
        raise GitHubError(f"{method} {url}: {last}, {self.attempts} attempt(s); giving up")

    def _once(self, method: str, url: str, body: dict | None) -> tuple[int, bytes]:
        req = urllib.request.Request(url, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": "2022-11-28", "Content-Type": "application/json",
        }, data=json.dumps(body).encode() if body is not None else None)  # fmt: skip
        box: dict = {}

        def attempt():
            try:
                with self._opener.open(req, timeout=self.timeout) as resp:
                    box["answer"] = (resp.status, resp.read(MAX_ANSWER))
            except urllib.error.HTTPError as exc:
                box["answer"] = (exc.code, exc.read(MAX_ANSWER))
            except Exception as exc:  # connection refused, reset, timed out, bad URL ...
                box["error"] = exc

        # One deadline for the whole answer: the socket's timeout is per read, so a trickling
        # server would hold a plain urlopen for ever. The thread is a daemon: left behind, it
        # ends with the process.
        worker = threading.Thread(target=attempt, daemon=True)
        worker.start()
        worker.join(self.timeout)
        if worker.is_alive():
            raise _Retry(f"no complete answer within {self.timeout:.0f} s")
        if "error" in box:
            exc = box["error"]
            if isinstance(exc, urllib.error.URLError) and isinstance(exc.reason, ValueError):
                raise GitHubError(f"{method} {url}: {exc.reason}")
            raise _Retry(f"{type(exc).__name__}: {getattr(exc, 'reason', exc)}")
        status, data = box["answer"]
        if status >= 500:
            raise _Retry(f"HTTP {status}: {_message(data)}")
        return status, data

    # --- what the workflows need ------------------------------------------------------------

    def comment(self, pr: int, text: str) -> str:
        """Create the gate's comment on ``pr``, or edit the bot's earlier one; -> what it did."""
        body = text if text.startswith(MARKER) else f"{MARKER}\n{text}"
        if len(body) > COMMENT_LIMIT:
            cut = "\n\n(cut at GitHub's comment limit)"
            body = body[: COMMENT_LIMIT - len(cut)] + cut
        page = 1
        while True:
            comments = self.call("GET", f"/repos/{self.repo}/issues/{pr}/comments"
                                        f"?per_page=100&page={page}") or []  # fmt: skip
            mine = next((c for c in comments if self._ours(c)), None)
            if mine is not None:
                self.call("PATCH", f"/repos/{self.repo}/issues/comments/{mine['id']}",
                          {"body": body})  # fmt: skip
                return f"updated comment {mine['id']}"
            if len(comments) < 100:
                break
            page += 1
        made = self.call("POST", f"/repos/{self.repo}/issues/{pr}/comments", {"body": body})
        return f"posted comment {made['id']}"

    def _ours(self, comment: dict) -> bool:
        user = (comment.get("user") or {}).get("login")
        return user == self.bot and (comment.get("body") or "").startswith(MARKER)

    def status(self, sha: str, state: str, description: str, target_url: str | None = None):
        """Set the ``ragbench/gate`` commit status of ``sha`` (success, failure, error)."""
        body = {"state": state, "context": STATUS_CONTEXT, "description": description[:140]}
        if target_url:
            body["target_url"] = target_url
        self.call("POST", f"/repos/{self.repo}/statuses/{sha}", body)

    def permission(self, user: str) -> str:
        """``admin``, ``write`` (maintainers too), ``read`` or ``none``."""
        quoted = urllib.parse.quote(user, safe="")
        answer = self.call("GET", f"/repos/{self.repo}/collaborators/{quoted}/permission",
                           missing_ok=True)  # fmt: skip
        return (answer or {}).get("permission") or "none"

    def commit_pulls(self, sha: str) -> list[dict]:
        """The pull requests GitHub associates with commit ``sha`` (``GET /repos/{owner}/{repo}/
        commits/{sha}/pulls``): for a commit on the default branch, the merged pull request
        that brought it there; elsewhere also open ones. Pull request objects, as GitHub
        gives them (``number``, ``merged_at``, ``merge_commit_sha``, ``base``, ``head`` ...)."""
        pulls, page = [], 1
        while True:
            answer = self.call("GET", f"/repos/{self.repo}/commits/{sha}/pulls"
                                      f"?per_page=100&page={page}")  # fmt: skip
            if not isinstance(answer, list):
                raise GitHubError(f"the pull requests of commit {sha[:12]}: not a list")
            pulls += answer
            if len(answer) < 100:
                return pulls
            page += 1

    def remove_label(self, pr: int, name: str) -> bool:
        """Take label ``name`` off ``pr``; -> False when it was not there."""
        quoted = urllib.parse.quote(name, safe="")
        path = f"/repos/{self.repo}/issues/{pr}/labels/{quoted}"
        return self.call("DELETE", path, missing_ok=True) is not None


def _message(data: bytes) -> str:
    try:
        return str(json.loads(data).get("message"))[:200]
    except (ValueError, AttributeError):
        return data[:200].decode(errors="replace")
