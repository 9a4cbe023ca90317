"""The trusted side of a pull request's gate: what the base branch's code does with the gate's
output, in jobs that never run the pull request's code (``bench-pr.yml``'s verdict job and
``bench-accept.yml``, both on ``pull_request_target`` on the trusted runner; docs/runner.md).

``verdict`` reads the gate's JSON (an artifact the pull request's code wrote: checked field by
field, and for the head commit GitHub names, not the one it claims), records it in the store
(also as a gate verdict under its digest, ``rerun.record``: what ``ragbench gate --settle``
continues, and only that), and judges it against the acceptances given on that head commit:
the ``ragbench/gate`` commit status, one PR comment, and the exit code. ``accept`` records a
maintainer's acceptance (the ``perf-regression-accepted`` label, added by a user GitHub says
may write to the repository) of the failures that verdict recorded for the head commit it
was given on, at most ``[gate] max_accepted`` of them, or withdraws it (the label removed).
``merged_pulls`` names the pull request that merged a main commit from GitHub's own
association, for ``ragbench record`` to carry its acceptances there.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from . import jsonfile
from .gate import rerun
from .github import MARKER, Client
from .policies import load_policies
from .store import Store
from .verdicts.status import Status, VerdictError, read_gate_document

LABEL = "perf-regression-accepted"
WRITERS = ("admin", "maintain", "write")


class AcceptanceRefused(ValueError):
    """More failing cells than one acceptance may cover: nothing is accepted (exit 2)."""


def max_accepted(policies: Path | None = None) -> int:
    """``[gate] max_accepted`` of the policies (the base branch's ragbench/policies.toml in
    the trusted job): the most failing cells one acceptance may cover."""
    value = load_policies(policies).gate.get("max_accepted")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"policies: [gate] max_accepted is {value!r}, not a whole number >= 0 "
                         "(ragbench/policies.toml sets it)")  # fmt: skip
    return value


def trusted_counts(policies: Path | None = None) -> tuple[int, int]:
    """The most rounds and paired processes a pull request's gate runs here (``[gate] rounds``
    of the base branch's policies, ``paired.PROCESSES``: bench-pr sets neither): what the
    rounds and processes its JSON claims are held to where they are recorded, and so what
    caps the plan that settles it (``rerun.limits``)."""
    from .gate.paired import PROCESSES

    rounds = load_policies(policies).gate.get("rounds", 2)
    return (rounds if isinstance(rounds, int) and rounds >= 1 else 2), PROCESSES


def merged_pulls(client: Client, sha: str, branch: str) -> list[tuple[int, str]]:
    """(number, head commit) of each pull request that GitHub's commit -> pull request
    association says was merged into ``branch`` as ``sha``: merged, based on ``branch``, and
    ``sha`` its ``merge_commit_sha`` (the merge commit, the squash commit, or a rebase's last
    commit; the earlier commits of a rebase carry nothing). Never read from the commit's
    subject, which the pull request's author writes ("Fix typo (#7)")."""
    out = []
    for p in client.commit_pulls(sha):
        p = p if isinstance(p, dict) else {}
        head, base = p.get("head") or {}, p.get("base") or {}
        if (p.get("merged_at") and p.get("merge_commit_sha") == sha
                and isinstance(base, dict) and base.get("ref") == branch
                and isinstance(head, dict) and isinstance(head.get("sha"), str)
                and isinstance(p.get("number"), int)):  # fmt: skip
            out.append((p["number"], head["sha"]))
    return out


@dataclass
class Judgement:
    state: str  # success | failure | error (the commit status)
    description: str
    unaccepted: list[dict]
    accepted: int = 0  # failing cells covered by an acceptance
    accepted_by: str = ""  # who gave those acceptances, comma-separated

    @property
    def exit_code(self) -> int:
        return {"success": 0, "failure": 1}.get(self.state, 2)


def accepted_on(store: Store, pr: int, head: str) -> list[dict]:
    """The acceptances given on ``pr`` at ``head`` (another pull request with the same head
    commit has its own)."""
    return [a for a in store.acceptances(head) if a["commit_hash"] == head and a["pr"] == pr]


def judge(failures: list[dict], acceptances: list[dict]) -> Judgement:
    """The gate's failures at one head commit against the acceptances given on it."""

    def cell(row):
        return row["benchmark"], row["metric"], row["param_key"]

    failing = {cell(f) for f in failures}
    by = {cell(a): a["accepted_by"] for a in acceptances if cell(a) in failing}
    left = [f for f in failures if cell(f) not in by]
    n, who = len(by), ", ".join(sorted(set(by.values())))
    if not failures:
        return Judgement("success", "no regression, no failed or missing cell", [])
    if not left:
        return Judgement("success", f"{n} failing cell(s) accepted by {who}", [], n, who)
    also = f" ({n} accepted by {who})" if n else ""
    if all(f["status"] == Status.INCONCLUSIVE for f in left):
        return Judgement("failure", f"inconclusive: {len(left)} cell(s) could not be judged "
                         f"(too noisy or too few samples){also}; re-run the gate", left, n,
                         who)  # fmt: skip
    return Judgement("failure", f"{len(left)} failing cell(s), not accepted{also}", left, n, who)


def verdict_markdown(j: Judgement, head: str, pr: int, limit: int | None = None,
                     note: str = "") -> str:  # fmt: skip
    """The trusted part of the PR comment: the verdict, how many cells were accepted and by
    whom, and how to accept (at most ``limit`` cells); ``note``: a line under the verdict."""
    lines = [
        MARKER,
        f"### ragbench verdict for {head[:12]}: **{j.state.upper()}**: {j.description}",
    ]
    total = j.accepted + len(j.unaccepted)  # the failing cells
    if j.accepted:
        lines += ["", f"Accepted: {j.accepted} of {total} failing cell(s), by {j.accepted_by} "
                      f"(the `{LABEL}` label on {head[:12]})."]  # fmt: skip
    if note:
        lines += ["", note]
    if j.unaccepted:
        lines += ["", "| cell | status | change | note |", "|---|---|---|---|"]
        for f in j.unaccepted[:50]:
            change = _words(f)
            lines.append(f"| `{f['benchmark']}.{f['metric']}` {f['param_key']} | {f['status']} | "
                         f"{change} | {str(f.get('note') or '')[:100]} |")  # fmt: skip
        if limit is not None and total > limit:
            lines += ["", f"{total} failing cells are more than the {limit} one acceptance may "
                          "cover (`[gate] max_accepted` in ragbench/policies.toml): fix them or "
                          "split the pull request."]  # fmt: skip
        else:
            lines += ["", f"A maintainer (write access) accepts these for {head[:12]} by adding "
                          f"the `{LABEL}` label; a later push needs a new acceptance."]  # fmt: skip
    return "\n".join(lines)


# the gate's wording of a change ("3.7% slower", "5.0% fewer img/s": verdicts.worded); the
# document is the pull request's output, so only words of that shape are shown
WORDS = re.compile(r"[0-9.]+% [a-z]+(?: [A-Za-z/]+)?(?: \((?:worse|better)\))?|no change|-")


def _words(f: dict) -> str:
    words = f.get("words")
    if isinstance(words, str) and len(words) <= 40 and WORDS.fullmatch(words):
        return words
    change = f.get("change")
    return f"{change * 100:+.1f}% (+: worse)" if isinstance(change, float) else "-"


def run_url() -> str | None:
    """This workflow run's page, from GitHub's variables (the status links to it)."""
    env = os.environ
    if {"GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"} <= set(env):
        return "/".join((env["GITHUB_SERVER_URL"], env["GITHUB_REPOSITORY"], "actions", "runs",
                         env["GITHUB_RUN_ID"]))  # fmt: skip
    return None


def reproduce(pr: int, base: str | None, head: str, url: str | None,
              settle: dict | None = None) -> str:  # fmt: skip
    """The comment's last lines: where the run's logs and artifact are, the one command that
    runs the same gate on a GPU machine, and where the gate left something to settle
    (``settle``: the gate verdict this job recorded, ``Store.gate_verdict``), the one that
    settles it from the store this job recorded it in."""
    where = (f"Logs and the `ragbench-gate` artifact (gate.md, gate.json): {url}" if url
             else "No workflow run to link (GITHUB_RUN_ID unset).")  # fmt: skip
    if not base:
        return where
    text = (f"{where}  \nReproduce on a GPU machine, in a clone: `git fetch origin "
            f"pull/{pr}/head && ragbench gate --base {base[:12]} --head {head[:12]}`.")  # fmt: skip
    if settle and settle.get("plan"):
        gate_id, machine = settle["gate_id"], shlex.quote(settle["machine"])
        text += (f"  \nSettle what it left (gate `{gate_id}`, as this job recorded it) on its "
                 f"machine, in that clone: `ragbench gate --settle {gate_id} --store "
                 f"\"$RAGBENCH_STORE\" --machine {machine}` ($RAGBENCH_STORE: the store this "
                 "job writes; the artifact's gate.json names the same gate, an edited one "
                 "none).")  # fmt: skip
    return text


def _publish(client: Client, store: Store, pr: int, head: str, j: Judgement, log,
             note: str = "", policies: Path | None = None) -> None:  # fmt: skip
    gate = store.gate(pr, head) or {}
    report = gate.get("report") or ""
    text = verdict_markdown(j, head, pr, max_accepted(policies), note)
    recorded = store.gate_verdict(gate_id=gate["gate_id"]) if gate.get("gate_id") else None
    footer = reproduce(pr, gate.get("base"), head, run_url(), recorded)
    log(client.comment(pr, text + ("\n\n" + report if report else "") + "\n\n" + footer))
    client.status(head, j.state, j.description, run_url())


def verdict(store: Store, client: Client | None, *, gate_json: Path, report: Path | None,
            pr: int, head: str, machine: str | None, log=print,
            policies: Path | None = None) -> Judgement:  # fmt: skip
    """Judge the gate's output for ``pr`` at ``head``; with a ``client``, post the comment and
    the status (and take a stale acceptance label off a failing head). ``policies``: the file
    whose ``max_accepted`` the comment states (default: ragbench's)."""
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
    gate_id = rerun.record(store, doc, source="verdict", machine=machine, pr=pr,
                            most=trusted_counts(policies))  # fmt: skip
    store.record_gate(pr, head, doc["base"], machine or doc.get("machine"), doc["failures"],
                      text, gate_id)  # fmt: skip
    j = judge(doc["failures"], accepted_on(store, pr, head))
    if client is not None:
        _publish(client, store, pr, head, j, log, policies=policies)
        if j.state == "failure" and client.remove_label(pr, LABEL):
            log(f"took the stale {LABEL} label off PR #{pr}: it was given on an earlier commit")
    return j


def accept(store: Store, client: Client, *, pr: int, head: str, user: str,
           withdraw: bool = False, log=print,
           policies: Path | None = None) -> Judgement:  # fmt: skip
    """Record ``user``'s acceptance of the failures the trusted verdict recorded for ``pr`` at
    ``head`` (or withdraw it), then publish the new verdict. PermissionError when ``user`` may
    not write to the repository; VerdictError when no gate verdict for ``head`` is recorded
    yet; AcceptanceRefused (the reason also in the PR comment) when it has more failing cells
    than ``[gate] max_accepted`` (of ``policies``, default ragbench's)."""
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
        cells = list(dict.fromkeys((f["benchmark"], f["metric"], f["param_key"])
                                   for f in gate["failures"]))  # fmt: skip
        limit = max_accepted(policies)
        if len(cells) > limit:
            why = (f"PR #{pr} at {head[:12]} has {len(cells)} failing cells, more than the "
                   f"{limit} one acceptance may cover ([gate] max_accepted): nothing accepted; "
                   "fix the regressions, split the pull request, or raise max_accepted in "
                   "ragbench/policies.toml on the base branch")  # fmt: skip
            j = judge(gate["failures"], accepted_on(store, pr, head))
            _publish(client, store, pr, head, j, log, f"The `{LABEL}` label by {user} was "
                     f"refused: {why}.", policies)  # fmt: skip
            raise AcceptanceRefused(why)
        if cells:  # replacing an acceptance of an earlier verdict of this head
            store.accept_cells(head, cells, f"{LABEL} label on PR #{pr}", user, pr=pr,
                               replace=True)  # fmt: skip
        log(
            f"{user} ({permission}) accepted {len(cells)} failing cell(s) of PR #{pr} at "
            f"{head[:12]} (at most {limit}: [gate] max_accepted)"
        )
    if gate is None:
        return Judgement("failure", "no gate verdict recorded", [])
    j = judge(gate["failures"], accepted_on(store, pr, head))
    _publish(client, store, pr, head, j, log, policies=policies)
    return j
