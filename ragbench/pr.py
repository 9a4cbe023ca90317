"""The trusted side of a pull request's gate: what the base branch's code does with the gate's
output, in jobs that never run the pull request's code (``bench-pr-verdict.yml`` on
``workflow_run``, ``bench-accept.yml`` on ``pull_request_target``; docs/runner.md).

``verdict`` reads the gate's JSON (an artifact the pull request's code wrote: checked field by
field, and for the head commit GitHub names, not the one it claims), records it in the store,
and judges it against the acceptances given on that head commit: the ``ragbench/gate`` commit
status, one PR comment, and the exit code. ``accept`` records a maintainer's acceptance (the
``perf-regression-accepted`` label, added by a user GitHub says may write to the repository)
for the failures of the head commit it was given on, or withdraws it (the label removed).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from . import jsonfile
from .github import MARKER, Client
from .store import Store
from .verdicts import Status, VerdictError, read_gate_document

LABEL = "perf-regression-accepted"
WRITERS = ("admin", "maintain", "write")


@dataclass
class Judgement:
    state: str  # success | failure | error (the commit status)
    description: str
    unaccepted: list[dict]

    @property
    def exit_code(self) -> int:
        return {"success": 0, "failure": 1}.get(self.state, 2)


def accepted_on(store: Store, pr: int, head: str) -> list[dict]:
    """The acceptances given on ``pr`` at ``head`` (another pull request with the same head
    commit has its own)."""
    return [a for a in store.acceptances(head) if a["commit_hash"] == head and a["pr"] == pr]


def judge(failures: list[dict], acceptances: list[dict]) -> Judgement:
    """The gate's failures at one head commit against the acceptances given on it."""
    accepted = {(a["benchmark"], a["metric"], a["param_key"]) for a in acceptances}
    left = [f for f in failures if (f["benchmark"], f["metric"], f["param_key"]) not in accepted]
    if not failures:
        return Judgement("success", "no regression, no failed or missing cell", [])
    if not left:
        who = ", ".join(sorted({a["accepted_by"] for a in acceptances}))
        return Judgement("success", f"{len(failures)} failing cell(s) accepted by {who}", [])
    if all(f["status"] == Status.INCONCLUSIVE for f in left):
        return Judgement("failure", f"inconclusive: {len(left)} cell(s) could not be judged "
                         "(too noisy or too few samples); re-run the gate", left)  # fmt: skip
    return Judgement("failure", f"{len(left)} failing cell(s), not accepted", left)


def verdict_markdown(j: Judgement, head: str, pr: int) -> str:
    """The trusted part of the PR comment: the verdict and how to accept."""
    lines = [
        MARKER,
        f"### ragbench verdict for {head[:12]}: **{j.state.upper()}**: {j.description}",
    ]
    if j.unaccepted:
        lines += ["", "| cell | status | change | note |", "|---|---|---|---|"]
        for f in j.unaccepted[:50]:
            change = f"{f['change'] * 100:+.1f}%" if isinstance(f.get("change"), float) else "-"
            lines.append(f"| `{f['benchmark']}.{f['metric']}` {f['param_key']} | {f['status']} | "
                         f"{change} | {str(f.get('note') or '')[:100]} |")  # fmt: skip
        lines += ["", f"A maintainer (write access) accepts these for {head[:12]} by adding the "
                      f"`{LABEL}` label; a later push needs a new acceptance."]  # fmt: skip
    return "\n".join(lines)


def run_url() -> str | None:
    """This workflow run's page, from GitHub's variables (the status links to it)."""
    env = os.environ
    if {"GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"} <= set(env):
        return "/".join((env["GITHUB_SERVER_URL"], env["GITHUB_REPOSITORY"], "actions", "runs",
                         env["GITHUB_RUN_ID"]))  # fmt: skip
    return None


def _publish(client: Client, store: Store, pr: int, head: str, j: Judgement, log) -> None:
    gate = store.gate(pr, head)
    report = (gate or {}).get("report") or ""
    log(client.comment(pr, verdict_markdown(j, head, pr) + ("\n\n" + report if report else "")))
    client.status(head, j.state, j.description, run_url())


def verdict(store: Store, client: Client | None, *, gate_json: Path, report: Path | None,
            pr: int, head: str, machine: str | None, log=print) -> Judgement:  # fmt: skip
    """Judge the gate's output for ``pr`` at ``head``; with a ``client``, post the comment and
    the status (and take a stale acceptance label off a failing head)."""
    try:
        doc = read_gate_document(gate_json, head)
    except VerdictError as exc:
        j = Judgement("error", f"the gate produced no verdict: {exc}"[:140], [])
        if client is not None:  # the whole reason in the comment, the status has 140 chars
            client.comment(pr, f"{verdict_markdown(j, head, pr)}\n\n{exc}")
            client.status(head, j.state, j.description, run_url())
        raise
    text = ""
    if report is not None and report.is_file():
        text = jsonfile.read_text(report, limit=1 * 2**20)
    store.record_gate(pr, head, doc["base"], machine or doc.get("machine"), doc["failures"],
                      text)  # fmt: skip
    j = judge(doc["failures"], accepted_on(store, pr, head))
    if client is not None:
        _publish(client, store, pr, head, j, log)
        if j.state == "failure" and client.remove_label(pr, LABEL):
            log(f"took the stale {LABEL} label off PR #{pr}: it was given on an earlier commit")
    return j


def accept(store: Store, client: Client, *, pr: int, head: str, user: str,
           withdraw: bool = False, log=print) -> Judgement:  # fmt: skip
    """Record ``user``'s acceptance of the gate's failures at ``head`` (or withdraw it), then
    publish the new verdict. PermissionError when ``user`` may not write to the repository;
    VerdictError when no gate verdict for ``head`` is recorded yet."""
    gate = store.gate(pr, head)
    if withdraw:
        n = store.withdraw(head, pr)
        log(f"withdrew {n} acceptance(s) of {head[:12]} (the {LABEL} label was removed)")
    else:
        permission = client.permission(user)
        if permission not in WRITERS:
            raise PermissionError(
                f"{user} has {permission!r} permission on {client.repo}: only users who may "
                f"write to it accept regressions; nothing recorded"
            )
        if gate is None:
            raise VerdictError(
                f"no gate verdict of PR #{pr} at {head[:12]} is recorded yet: add the {LABEL} "
                "label again once the gate has reported"
            )
        cells = [(f["benchmark"], f["metric"], f["param_key"]) for f in gate["failures"]]
        if cells:
            store.accept_cells(head, cells, f"{LABEL} label on PR #{pr}", user, pr=pr)
        log(f"{user} ({permission}) accepted {len(cells)} failing cell(s) of {head[:12]}")
    if gate is None:
        return Judgement("failure", "no gate verdict recorded", [])
    j = judge(gate["failures"], accepted_on(store, pr, head))
    _publish(client, store, pr, head, j, log)
    return j
