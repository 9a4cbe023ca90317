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

from . import git, jsonfile
from . import provenance as fingerprint
from .gate import rerun
from .github import COMMENT_LIMIT, MARKER, Client
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
        # a cell timed otherwise on either side (asv's number, its benchmark's version) stays
        # so when the gate runs again: the notes say which
        return Judgement("failure", f"inconclusive: {len(left)} cell(s) could not be judged "
                         f"(too noisy, too few samples, or timed otherwise: see each note){also}; "
                         "re-run the gate, or accept them", left, n, who)  # fmt: skip
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
            cell = _code(f"{f['benchmark']}.{f['metric']}") + " " + _code(f["param_key"])
            lines.append(f"| {cell} | {f['status']} | {_words(f)} | "
                         f"{_code(f.get('note') or '', 100)} |")  # fmt: skip
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


def _code(text: str, limit: int = 200) -> str:
    """``text``, which the pull request's code wrote (a cell's names, a note), as one inline code
    span in a table cell: one line of at most ``limit`` characters, shown as written. A fence
    longer than any run of backticks in it, and its pipes escaped (GitHub ends a table cell at
    a pipe even inside code), so that nothing in it ends the span, the cell or the line."""
    s = " ".join(str(text).split())[:limit]
    if not s:
        return ""
    fence = "`" * (max(map(len, re.findall("`+", s)), default=0) + 1)
    pad = " " if s[0] == "`" or s[-1] == "`" else ""  # CommonMark strips one space each side
    return f"{fence}{pad}{s.replace('|', chr(92) + '|')}{pad}{fence}"


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
    """The comment's trusted lines under the verdict: where the run's logs and artifact are;
    where the verdict checked the gate's base (``base``: ``gate_base``'s, else None), the one
    command that runs the same gate on a GPU machine (the head's suite and policies, as the
    sandbox's ``make gate-pr`` did), and where the gate left something to
    settle (``settle``: the gate verdict this job recorded, ``Store.gate_verdict``), the one
    that settles it from the store this job recorded it in."""
    where = (f"Logs and the `ragbench-gate` artifact (gate.md, gate.json): {url}" if url
             else "No workflow run to link (GITHUB_RUN_ID unset).")  # fmt: skip
    if not base:
        return where
    # the sandbox ran the pull request's own `make gate-pr`: its suite and its policies, which
    # the head's checkout gives (a clone of the base branch would measure with the base's)
    text = (f"{where}  \nReproduce on a GPU machine, in a clone (the head checked out: the "
            f"gate ran its suite and policies): `git fetch origin pull/{pr}/head && git "
            f"checkout --detach {head[:12]} && ragbench gate --base {base[:12]} --head "
            f"{head[:12]}`.")  # fmt: skip
    if settle and settle.get("plan"):
        gate_id, machine = settle["gate_id"], shlex.quote(settle["machine"])
        text += (f"  \nSettle what it left (gate `{gate_id}`, as this job recorded it) on its "
                 f"machine, in that clone: `ragbench gate --settle {gate_id} --store "
                 f"\"$RAGBENCH_STORE\" --machine {machine}` ($RAGBENCH_STORE: the store this "
                 "job writes; the artifact's gate.json names the same gate, an edited one "
                 "none).")  # fmt: skip
    return text


def report_section(report: str, room: int) -> str:
    """The gate job's markdown report, which the pull request's code wrote, as the comment's
    last part, in at most ``room`` characters: folded under a summary that says whose it is,
    with no closing tag of its own (it cannot end the fold and pass for the trusted part), cut
    where GitHub's comment limit would, saying so."""
    if not report:
        return ""
    head = ("<details><summary>The gate job's report (gate.md, written by the pull request's "
            "code in the sandbox)</summary>\n\n")  # fmt: skip
    tail = "\n\n</details>"
    cut = ("\n\n(cut at GitHub's comment limit: the whole report is gate.md in the "
           "ragbench-gate artifact above)")  # fmt: skip
    body = re.sub(r"</(details|summary)", r"&lt;/\1", report, flags=re.IGNORECASE)
    if len(head) + len(body) + len(tail) > room:
        body = body[: max(0, room - len(head) - len(cut) - len(tail))] + cut
    return head + body + tail


def _publish(client: Client, store: Store, pr: int, head: str, j: Judgement, log,
             note: str = "", policies: Path | None = None) -> None:  # fmt: skip
    """The PR's one comment and the commit status. The comment's trusted parts come first (the
    verdict, then the run's link and the commands), the pull request's report last: nothing
    in it can hide, move or cut them."""
    gate = store.gate(pr, head) or {}
    text = verdict_markdown(j, head, pr, max_accepted(policies), note)
    recorded = store.gate_verdict(gate_id=gate["gate_id"]) if gate.get("gate_id") else None
    text += "\n\n" + reproduce(pr, gate.get("base"), head, run_url(), recorded)
    report = report_section(gate.get("report") or "", COMMENT_LIMIT - len(text) - 2)
    log(client.comment(pr, text + ("\n\n" + report if report else "")))
    client.status(head, j.state, j.description, run_url())


def gate_base(pr: int, base_sha: str, head: str) -> str:
    """The commit the gate had to measure ``head`` against: the merge base of the pull
    request's base ``base_sha`` (GitHub's event) and ``head``, as ``make gate`` computes it,
    here in the trusted job's checkout (history needed: ``fetch-depth: 0``), ``head`` fetched
    as data from ``refs/pull/N/head`` when it is not here. VerdictError when git cannot say."""
    try:
        try:
            git.run("cat-file", "-e", f"{head}^{{commit}}")
        except git.GitError:  # not here yet
            git.run("fetch", "--quiet", "--no-tags", "origin",
                    f"+refs/pull/{pr}/head:refs/ragbench/pr-head")  # fmt: skip
        return git.run("merge-base", base_sha, head)
    except git.GitError as exc:
        raise VerdictError(f"the merge base of the pull request's base {base_sha[:12]} and "
                           f"head {head[:12]} is unknown here: {exc}"[:400]) from None  # fmt: skip


def verdict(store: Store, client: Client | None, *, gate_json: Path, report: Path | None,
            pr: int, head: str, machine: str | None, log=print,
            policies: Path | None = None, base_sha: str | None = None) -> Judgement:  # fmt: skip
    """Judge the gate's output for ``pr`` at ``head``; with a ``client``, post the comment and
    the status (and take a stale acceptance label off a failing head). ``policies``: the file
    whose ``max_accepted`` the comment states (default: ragbench's).

    What the JSON claims about where it ran is held to what this job knows: with ``base_sha``
    (the pull request's base in GitHub's event) its base must be ``gate_base``'s, and only
    then is it recorded as the base the comment's commands name; with ``machine`` (or
    ``$RAGBENCH_MACHINE``) its machine must be that one. Otherwise an error status."""
    trusted = machine or fingerprint.configured_machine()
    try:
        doc = read_gate_document(gate_json, head)
        if trusted is not None and doc.get("machine") != trusted:
            raise VerdictError(f"{gate_json}: the gate names machine "
                               f"{str(doc.get('machine'))[:40]!r}, not {trusted!r}, this "
                               "runner's (RAGBENCH_MACHINE)")  # fmt: skip
        if base_sha is not None and doc["base"] != (want := gate_base(pr, base_sha, head)):
            raise VerdictError(f"{gate_json}: the gate measured against {doc['base'][:12]}, not "
                               f"{want[:12]}, the merge base of the pull request's base "
                               f"{base_sha[:12]} and its head")  # fmt: skip
    except VerdictError as exc:
        j = Judgement("error", f"the gate produced no verdict: {exc}"[:140], [])
        if client is not None:  # the whole reason in the comment, the status has 140 chars
            # the reason quotes what the gate's output holds: as code, never as markup
            said = Judgement("error", "the gate produced no verdict (why below)", [])
            client.comment(pr, f"{verdict_markdown(said, head, pr)}\n\n{_code(str(exc), 2000)}")
            client.status(head, j.state, j.description, run_url())
        raise
    text = ""
    if report is not None and report.is_file():
        try:  # only shown: the verdict is the JSON's
            text = jsonfile.read_text(report, limit=1 * 2**20)
        except ValueError as exc:
            text = f"(The gate's report {report.name} is not shown: {exc}.)"
    gate_id = rerun.record(store, doc, source="verdict", machine=trusted, pr=pr,
                            most=trusted_counts(policies))  # fmt: skip
    store.record_gate(pr, head, doc["base"] if base_sha is not None else None,
                      trusted or doc.get("machine"), doc["failures"], text, gate_id)  # fmt: skip
    j = judge(doc["failures"], accepted_on(store, pr, head))
    if client is not None:
        _publish(client, store, pr, head, j, log, policies=policies)
        if j.state == "failure" and client.remove_label(pr, LABEL):
            log(f"took the stale {LABEL} label off PR #{pr}: it was given on an earlier commit")
    return j


def accept(store: Store, client: Client, *, pr: int, head: str, user: str,
           withdraw: bool = False, log=print,
           policies: Path | None = None) -> Judgement | None:  # fmt: skip
    """Record ``user``'s acceptance of the failures the trusted verdict recorded for ``pr`` at
    ``head`` (or withdraw it), then publish the new verdict. PermissionError when ``user`` may
    not write to the repository; VerdictError when no gate verdict for ``head`` is recorded
    yet; AcceptanceRefused (the reason also in the PR comment) when it has more failing cells
    than ``[gate] max_accepted`` (of ``policies``, default ragbench's). None after a withdrawal
    where no gate verdict is recorded: there is no verdict to publish."""
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
        return None
    j = judge(gate["failures"], accepted_on(store, pr, head))
    _publish(client, store, pr, head, j, log, policies=policies)
    return j
