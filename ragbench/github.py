"""The pull-request side of the gate: one PR comment kept up to date, and accepted regressions.

``comment`` finds the gate's own comment on a pull request by its marker (``report.MARKER``)
and edits it, or posts it when there is none, through GitHub's REST API (``GITHUB_TOKEN``,
``GITHUB_API_URL``). ``verdict`` reads the regressions ``ragbench gate --json`` wrote: it fails
on them, unless a maintainer accepted them (the PR label), which it records in the store.
"""

from __future__ import annotations

import json
import os
import urllib.request
from pathlib import Path

from .report import MARKER
from .store import Store


class GitHubError(RuntimeError):
    """The API refused or could not be reached."""


def _call(method: str, url: str, token: str, body: dict | None = None):
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(url, data=data, method=method, headers={
        "Authorization": f"Bearer {token}", "Accept": "application/vnd.github+json",
        "X-GitHub-Api-Version": "2022-11-28", "Content-Type": "application/json",
    })  # fmt: skip
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return json.loads(resp.read() or b"null")
    except OSError as exc:
        raise GitHubError(f"{method} {url}: {exc}") from None


def comment(report: str, repo: str, pr: int, token: str, api: str | None = None) -> str:
    """Create or update the gate's comment on ``repo``'s pull request ``pr``; -> what it did."""
    api = (api or os.environ.get("GITHUB_API_URL") or "https://api.github.com").rstrip("/")
    body = report if MARKER in report else f"{MARKER}\n{report}"
    page = 1
    while True:
        url = f"{api}/repos/{repo}/issues/{pr}/comments?per_page=100&page={page}"
        comments = _call("GET", url, token) or []
        mine = next((c for c in comments if MARKER in (c.get("body") or "")), None)
        if mine is not None:
            _call("PATCH", f"{api}/repos/{repo}/issues/comments/{mine['id']}", token,
                  {"body": body})  # fmt: skip
            return f"updated comment {mine['id']}"
        if len(comments) < 100:
            break
        page += 1
    made = _call("POST", f"{api}/repos/{repo}/issues/{pr}/comments", token, {"body": body})
    return f"posted comment {made['id']}"


def verdict(gate_json: Path, store: Store | None, accepted_by: str | None, reason: str) -> int:
    """0 when the gate found no regression, or a maintainer accepted them (recorded in the
    store); 1 otherwise."""
    data = json.loads(Path(gate_json).read_text())
    regressions = data["regressions"]
    if not regressions:
        return 0
    if not accepted_by:
        return 1
    for r in regressions:
        store.accept(data["head"], r["benchmark"], r["metric"], r["param_key"], reason,
                     accepted_by)  # fmt: skip
    return 0
