"""main's alerts: the steps its history took, grouped by the commit they arrived with, with a
state a person sets and later runs keep.

An alert is one machine's change of one commit: every series whose stored change point
(``ragbench.changepoints``) sits at that commit with a step in the bad direction beyond the
cell's threshold (an environment change is no code change and makes none), and every series
whose newest point the lookback flags as a regression. Each cell keeps the medians before and
after the step and the bootstrap interval of their ratio (the points of the two segments, at
most ``SEGMENT`` each side); the alert keeps the range it arrived in (the previous measured
commit, exclusive, to this one: a merge or a batch of pushes holds several commits, which
``ragbench bisect`` searches).

States: ``new``; ``acknowledged`` (someone looks at it); ``expected`` (a reason says why);
``fixed`` (at least the newest ``FIXED_AFTER`` points of every cell are back within the
threshold of their ``before``: by the commit they came back with); ``invalid`` (noise, a
broken runner).
``update`` runs after each ingest: a new step makes an alert (or joins its commit's), an open
one (new or acknowledged) whose steps are undone becomes fixed. A state set by hand is kept.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from dataclasses import dataclass

from . import history, stats
from .compare import Key, bad_change, ratio_of
from .policies import STATISTICAL, Policies, load_policies
from .verdicts import Status, worded

STATES = ("new", "acknowledged", "expected", "fixed", "invalid")
OPEN = ("new", "acknowledged")
LAST = 400  # the newest commits whose change points make alerts (the dashboard's charts')
SEGMENT = 20  # points a side for a step's interval
FIXED_AFTER = 3  # newest points of a cell all back within the threshold: its step is undone


class AlertError(ValueError):
    """An alert that does not exist, or a state change that is not one (exit 2)."""


@dataclass
class Step:
    """One cell's step at a commit."""

    environment: str
    key: Key
    unit: str | None
    kind: str  # the policy's: latency or throughput
    before: float
    after: float
    prev_commit: str | None
    found_by: str  # "change point" or "newest run"

    @property
    def change(self) -> float:
        return cell_change(vars(self))


def cell_words(c: dict) -> tuple[str, str]:
    """A row of ``alert_cells`` in words: its step (``3.7% slower``) and the interval of
    after/before (``1.752-1.766``; '' where there is none)."""
    change = worded(cell_change(c), c["unit"], c["kind"] != "throughput")
    interval = f"{c['ratio_lo']:.3f}-{c['ratio_hi']:.3f}" if c["ratio_lo"] is not None else ""
    return change, interval


def cell_change(c: dict) -> float:
    """A step (a ``Step``'s fields, or a row of ``alert_cells``) in the bad direction: +0.05
    is 5% slower, or 5% less throughput."""
    return bad_change(ratio_of(c["after"], c["before"]), c["kind"] == "latency")


def steps(store, machine: str, policies: Policies,
          last: int = LAST) -> tuple[dict[str, list[Step]], dict]:  # fmt: skip
    """The bad steps of the machine's series over its newest ``last`` commits: (commit ->
    its steps, commit -> its time)."""
    out: dict[str, list] = {}
    times = {}
    for rep in history.stored_histories(store, machine, policies, last=last):
        policy = policies.for_metric(rep.key[0], rep.key[1], rep.unit)
        if policy.kind not in STATISTICAL:
            continue
        found = [(c.index, c.before, c.after, "change point") for c in rep.changes
                 if c.index not in rep.env_changes and c.index not in rep.accepted]  # fmt: skip
        if rep.status == Status.REGRESSION and rep.latest_change is not None:
            newest = rep.points[-1].value
            ratio = (1 + rep.latest_change if policy.kind == "latency"
                     else 1 / (1 + rep.latest_change))  # fmt: skip
            found.append((len(rep.points) - 1, newest / ratio, newest, "newest run"))
        for i, before, after, by in found:
            step = Step(rep.environment or "", rep.key, rep.unit, policy.kind, before, after,
                        rep.points[i - 1].commit_hash if i else None, by)  # fmt: skip
            if step.change > policy.threshold and before:
                commit = rep.points[i].commit_hash
                out.setdefault(commit, []).append(step)
                times[commit] = rep.points[i].commit_time
    return out, times


def update(store, machine: str, policies: Policies, *, last: int = LAST,
           log: Callable[[str], None] = lambda m: None) -> tuple[int, int]:  # fmt: skip
    """Alerts of the machine brought up to date (module notes); -> (alerts made or grown,
    alerts marked fixed)."""
    found, times = steps(store, machine, policies, last)
    stored = {a["commit_hash"]: a for a in store.alerts(machine)}
    alerts, cells = [], []
    for commit, group in found.items():
        known = {(c["environment"], c["benchmark"], c["metric"], c["param_key"])
                 for c in stored.get(commit, {}).get("cells", [])}  # fmt: skip
        fresh = [s for s in group if (s.environment, *s.key) not in known]
        if not fresh:
            continue
        if commit not in stored:
            prev = next((s.prev_commit for s in group if s.prev_commit), None)
            alerts.append({"branch": store.branch, "machine": machine, "commit_hash": commit,
                           "prev_commit_hash": prev, "commit_time": times.get(commit),
                           "state": "new", "found_at": _now()})  # fmt: skip
        cells += [_cell(store, machine, commit, s) for s in fresh]
    if alerts or cells:
        store.save_alerts(alerts, cells)
    fixed = 0
    for a in store.alerts(machine):
        if a["state"] in OPEN:
            by = undone_by(store, machine, a, policies)
            if by:
                store.set_alert_state(machine, a["commit_hash"], "fixed", by="ragbench alerts",
                                      reason=f"every step undone from {by[:12]} on",
                                      fixed_by=by)  # fmt: skip
                fixed += 1
    grown = len({c["commit_hash"] for c in cells})
    log(f"alerts: {machine}: {grown} made or grown, {fixed} fixed")
    return grown, fixed


def update_runs(store, run_ids: list[str], policies: Policies | None = None,
                log: Callable[[str], None] = lambda m: None) -> int:  # fmt: skip
    """After an ingest: the alerts of each machine these runs gave main a point on, brought
    up to date (``update``); -> the alerts made, grown or fixed."""
    policies = policies or load_policies()
    machines = sorted({row[0] for row in store.run_series(run_ids)})
    return sum(sum(update(store, m, policies, log=log)) for m in machines)


def _now():
    from datetime import UTC, datetime

    return datetime.fromtimestamp(time.time(), UTC).replace(tzinfo=None)


def _points(store, machine: str, environment: str, key: Key) -> list[tuple]:
    """(commit_hash, commit_time, value) of one series, oldest first."""
    return [(r[3], r[5], r[7]) for r in store.series_points(machine, environment, keys=[key])]


def _cell(store, machine: str, commit: str, s: Step) -> dict:
    """A row of ``alert_cells``: the step with the interval of after/before over the two
    segments' points around ``commit``."""
    points = _points(store, machine, s.environment, s.key)
    at = next((i for i, (c, _, _) in enumerate(points) if c == commit), None)
    lo = hi = None
    if at:
        before = [v for _, _, v in points[max(0, at - SEGMENT) : at]]
        after = [v for _, _, v in points[at : at + SEGMENT]]
        lo, hi = stats.ratio_interval(before, after)
    return {"branch": store.branch, "machine": machine, "commit_hash": commit,
            "environment": s.environment, "benchmark": s.key[0], "metric": s.key[1],
            "param_key": s.key[2], "unit": s.unit, "kind": s.kind, "before": s.before,
            "after": s.after, "ratio_lo": lo, "ratio_hi": hi, "found_by": s.found_by}  # fmt: skip


def undone_by(store, machine: str, alert: dict, policies: Policies) -> str | None:
    """The commit from which every cell of ``alert`` is back within its threshold of
    ``before``: each cell's newest points after the alert's commit that are all back, at
    least ``FIXED_AFTER`` of them (the first of them is where the cell came back); of the
    cells' such commits, the newest. None where a cell is not back."""
    back = []
    for c in alert["cells"]:
        key = (c["benchmark"], c["metric"], c["param_key"])
        threshold = policies.for_metric(key[0], key[1], c["unit"]).threshold
        points = _points(store, machine, c["environment"], key)
        at = next((i for i, p in enumerate(points) if p[0] == alert["commit_hash"]), None)
        run = []  # the newest points that are back, newest first
        for p in reversed(points[at + 1 :] if at is not None else []):
            ratio = ratio_of(p[2], c["before"])
            if bad_change(ratio, c["kind"] == "latency") > threshold:
                break
            run.append(p)
        if len(run) < FIXED_AFTER:
            return None
        back.append(run[-1])
    return max(back, key=lambda p: (p[1] is not None, p[1]))[0] if back else None


def change_state(
    store, machine: str, commit: str, state: str, *, by: str, reason: str | None = None
) -> dict:
    """A person's state change of the alert at ``commit`` (a prefix); -> the alert as it was.
    AlertError where there is no such alert or the change says nothing."""
    if state not in STATES or state == "fixed":
        raise AlertError(f"state {state!r}: one of {', '.join(s for s in STATES if s != 'fixed')}"
                         " (fixed is found by a later run)")  # fmt: skip
    if state == "expected" and not reason:
        raise AlertError("an expected alert needs --reason (why this step is intended)")
    found = store.alerts(machine, commit=commit)
    if len(found) != 1:
        there = ", ".join(a["commit_hash"][:12] for a in store.alerts(machine)[:10]) or "none"
        raise AlertError(f"{'no' if not found else 'more than one'} alert of {machine} at "
                         f"{commit!r} (its alerts: {there})")  # fmt: skip
    store.set_alert_state(machine, found[0]["commit_hash"], state, by=by, reason=reason)
    return found[0]


def repro_command(alert: dict) -> str:
    """The gate that measures exactly the alert's cells: its commit against the one before."""
    from .discovery import bench_regex

    keys = [(c["benchmark"], c["metric"], c["param_key"]) for c in alert["cells"]]
    bench = " ".join(f"--bench {shlex.quote(b)}" for b in bench_regex(keys))
    base = alert["prev_commit_hash"] or f"{alert['commit_hash']}~1"
    return (
        f"ragbench gate --base {base[:12]} --head {alert['commit_hash'][:12]} --machine "
        f"{shlex.quote(alert['machine'])} {bench}"
    )


def repository_url(policies: Policies) -> str | None:
    """Where a commit's diff is shown: ``repository_url`` of ``[main]`` in the policies, else
    git's ``origin`` remote as a web address (``git@github.com:o/r.git`` ->
    ``https://github.com/o/r``), else None."""
    url = policies.main.get("repository_url")
    if isinstance(url, str) and url.startswith(("https://", "http://")):
        return url.rstrip("/")
    from . import suite

    try:
        remote = suite.git("remote", "get-url", "origin")
    except suite.SuiteError:
        return None
    remote = re.sub(r"^git@([^:]+):", r"https://\1/", remote)
    remote = re.sub(r"^ssh://git@([^/]+)/", r"https://\1/", remote)
    return remote.removesuffix(".git").rstrip("/") if remote.startswith("https://") else None


def diff_url(repository: str | None, alert: dict) -> str | None:
    """The web page of the alert's commits: the range where the previous commit is known."""
    if not repository:
        return None
    if alert["prev_commit_hash"]:
        return f"{repository}/compare/{alert['prev_commit_hash']}...{alert['commit_hash']}"
    return f"{repository}/commit/{alert['commit_hash']}"


def bisect_command(alert: dict) -> str | None:
    """Where the step arrived with several commits, or with a merge: the bisection of one of
    its cells (``ragbench bisect``: the first-parent line from the previous measured commit,
    then a merge's branch against its merge-base). None where the range is one commit and no
    merge (it is the one), or holds none."""
    if not alert["prev_commit_hash"] or not alert["cells"]:
        return None
    from . import suite

    prev, commit = alert["prev_commit_hash"], alert["commit_hash"]
    try:
        line = suite.git("rev-list", "--first-parent", "--ancestry-path", f"{prev}..{commit}")
        merge = len(suite.git("rev-list", "--parents", "-n", "1", commit).split()) > 2
    except suite.SuiteError:  # commits this clone lacks: the command says what it can
        line, merge = "", True
    if len(line.split()) == 1 and not merge:
        return None
    c = alert["cells"][0]
    cell = f"{c['benchmark']}.{c['metric']} {c['param_key']}"
    return (
        f"ragbench bisect --cell {shlex.quote(cell)} --good {prev[:12]} "
        f"--bad {commit[:12]} --machine {shlex.quote(alert['machine'])}"
    )
