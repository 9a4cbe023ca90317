"""main's alerts: the steps its history took and the gated cells its newest commit broke,
grouped by the commit they arrived with, with a state a person sets and later runs keep.

An alert is one machine's change of one commit. Its cells:

- a **step**: a series' stored change point (``ragbench.history.edivisive``) at that commit where
  the code changed (an environment change is no code change and makes none), or its newest
  point where the lookback flags it, placed at the first of the newest points the lookback
  flags each (``run_start``; ``found_by``: ``change point`` or ``newest run``). The
  cell keeps the medians before and after the step and the bootstrap interval of their ratio,
  all from the same points: each segment up to the neighbouring change point, at most
  ``SEGMENT`` points (the lookback, for a newest run). It is raised only where that interval
  excludes no change (1.0) in the bad direction and the estimate is beyond the threshold, so
  the percentage shown lies inside the interval shown. A stale series (its last point older
  than the machine's newest run: a dropped Python) has no newest run to judge.
- a **finding** of the machine's newest commit against the one before
  (``ragbench.verdicts.comparison``): a broken bound (a kernel's error ratio over 2, an
  output's drift), a cell that failed (the benchmark raised) or went missing (``found_by``:
  ``violation: 6418 >= bound 2``), a bound broken on the commit before too placed at the first
  of the newest commits that break it (``broken_since``). One that an earlier alert already
  holds (not fixed) makes none.

The alert keeps the range it arrived in (the previous measured commit, exclusive, to this
one: a merge or a batch of pushes holds several commits, which ``ragbench bisect`` searches).

States: ``new``; ``acknowledged`` (someone looks at it); ``expected`` (a reason says why);
``fixed``; ``invalid`` (noise, a broken runner). ``update`` runs after each ingest: a new step
or finding makes an alert (or joins its commit's); an open one (new or acknowledged) becomes
fixed when every cell is undone (``undone_by``): a step by a later change point of the code
(never one of the environment: torch, triton, Python, asv's settings) whose segment is back at
the old level, the whole after/before interval within the threshold, over at least
``FIX_POINTS`` points; a finding by a newest commit without it. A new alert whose steps the
points measured since placed elsewhere (change points that moved; a newest run's step now at
a commit measured later, between its previous one and its own) becomes ``invalid``, naming
where they are. A
fixed alert whose series is no longer back (the newest code step went up again) is reopened
(``new``). A cell the policies now judge by another rule than it was found under (``rule``: a
threshold or bound moved, a bound made ``info``) is never undone, so its alert stays as it is
until a person sets its state (``ragbench alerts`` says which cells and why). Every state
change is a conditional update of the state that was read, so a state a person set since is
never overwritten.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

from .. import stats
from ..discovery import cell_text
from ..policies import STATISTICAL, Policies, Policy, load_policies
from ..store import timing
from ..verdicts.comparison import Key, bad_change, ratio_of
from ..verdicts.status import Status, worded
from . import series as history
from .steps import (
    SEGMENT,
    Series,
    change_positions,
    measured,
    neighbours,
    positions_of,
    read_many,
    read_series,
    step_at,
    timed,
)

STATES = ("new", "acknowledged", "expected", "fixed", "invalid")
OPEN = ("new", "acknowledged")
LAST = 400  # the newest commits whose change points make alerts (the dashboard's charts')
# points after a step back, at least, for it to fix an alert: E-Divisive finds a segment of
# min_size (3) points, and three lucky points of a noisy series are no level
FIX_POINTS = 5
STEP_FOUND = ("change point", "newest run")  # found_by of a series' step
# what the newest commit's comparison finds that makes an alert
FINDINGS = (Status.VIOLATION, Status.PRE_EXISTING, Status.FAILED, Status.MISSING)
BY = "ragbench alerts"  # changed_by of the states this module sets


class AlertError(ValueError):
    """An alert that does not exist, or a state change that is not one (exit 2)."""


def cell_words(c: dict) -> tuple[str, str]:
    """A row of ``alert_cells`` in words: its step (``3.7% slower``) or finding (``violation:
    6418 >= bound 2``) and the interval of after/before (``1.752-1.766``; '' where none)."""
    if c["found_by"] not in STEP_FOUND:
        return c["found_by"], ""
    change = worded(cell_change(c), c["unit"], c["kind"] != "throughput")
    interval = f"{c['ratio_lo']:.3f}-{c['ratio_hi']:.3f}" if c["ratio_lo"] is not None else ""
    return change, interval


def cell_change(c: dict) -> float:
    """A step (a row of ``alert_cells``) in the bad direction: +0.05 is 5% slower, or 5% less
    throughput."""
    return bad_change(ratio_of(c["after"], c["before"]), c["kind"] == "latency")


def raised(c: dict, threshold: float) -> bool:
    """Whether a step tells one story of a regression: its after/before interval excludes no
    change (1.0) in the bad direction, and its estimate, inside that interval, is beyond
    ``threshold``."""
    lo, hi = c["ratio_lo"], c["ratio_hi"]
    if lo is None or hi is None or math.isnan(lo) or math.isnan(hi) or not c["before"]:
        return False
    excludes = lo > 1 if c["kind"] == "latency" else hi < 1
    inside = lo <= ratio_of(c["after"], c["before"]) <= hi
    return excludes and inside and cell_change(c) > threshold


# --- making alerts --------------------------------------------------------------------------


def steps(store, machine: str, policies: Policies,
          last: int = LAST) -> tuple[dict[str, list[dict]], dict, dict]:  # fmt: skip
    """The raised steps of the machine's series over its newest ``last`` commits: (commit ->
    its cells, commit -> its time, commit -> the commit before it in the series)."""
    out: dict[str, list] = {}
    times, prevs = {}, {}
    lookback = int(policies.main.get("lookback", 10))
    min_size = int(policies.main.get("min_size", 3))
    for rep in history.stored_histories(store, machine, policies, last=last):
        policy = policies.for_metric(rep.key[0], rep.key[1], rep.unit)
        if policy.kind not in STATISTICAL:
            continue  # (a stale series' last point is no newest run: its status says so)
        lower = policy.kind == "latency"
        code = [rep.points[c.index] for c in rep.changes
                if c.index not in rep.env_changes and c.index not in rep.accepted
                and bad_change(ratio_of(c.after, c.before), lower) > policy.threshold]  # fmt: skip
        newest = rep.status == Status.REGRESSION or (
            rep.status == Status.SETTINGS and rep.latest_change > policy.threshold
        )
        if not code and not newest:
            continue
        s = read_series(store, machine, rep.environment or "", rep.key)
        cps = [i for p in (rep.points[c.index] for c in rep.changes)
               if (i := s.at(p.commit_hash, p.env_key))]  # fmt: skip
        found = [(i, {**step_at(s, i, cps, policy.kind), "rule": policy.rule(),
                      **timed(s.timings[i - 1], s.timings[i])}, "change point")
                 for p in code if (i := s.at(p.commit_hash, p.env_key))]  # fmt: skip
        if newest and len(s.values) > 1:
            n = len(s.values) - 1
            # from the newest accepted change or change point on: a lookback across a step
            # would judge the newest against two levels, and raise the step again, here
            start = max((i for p in (rep.points[j] for j in rep.accepted)
                         if (i := s.at(p.commit_hash, p.env_key)) is not None and i < n),
                        default=0)  # fmt: skip
            start = max([start, *(i for i in cps if i < n)])
            same = [i for i in range(start, n + 1) if s.env_keys[i] == s.env_keys[n]]
            first = run_start([s.values[i] for i in same], lookback, policy,
                              float(policies.main.get("mad_k", 5.0)), min_size)  # fmt: skip
            base, run = same[max(0, first - lookback) : first], same[first:]
            # fewer points than a segment since the last change point: no level to judge
            # against (two points after a step raised their noise, 3.9%, as a second step);
            # a step its change point holds already is that one
            if len(base) >= min_size and run[0] not in {i for i, _, _ in found}:
                step = measured([s.values[i] for i in base], [s.values[i] for i in run],
                                policy.kind)  # fmt: skip
                was = timing.typical([s.timings[i] for i in base])
                found.append((run[0], {**step, "rule": policy.rule(),
                                       **timed(was, s.timings[run[0]])}, "newest run"))  # fmt: skip
        for i, cell, by in found:
            if raised(cell, policy.threshold):
                commit = s.commits[i]
                out.setdefault(commit, []).append({
                    "environment": s.environment, "benchmark": s.key[0], "metric": s.key[1],
                    "param_key": s.key[2], "unit": rep.unit, **cell, "found_by": by})  # fmt: skip
                times[commit] = s.times[i]
                prevs.setdefault(commit, s.commits[i - 1])
    return out, times, prevs


def run_start(values: list[float], lookback: int, policy: Policy, mad_k: float,
              min_size: int = 3) -> int:  # fmt: skip
    """Where the newest point's step began (an index of ``values``, a series' points of one
    environment from its last change point on, the newest last): the first of the points at
    the end that the lookback flags each, as it flags the newest (beyond the threshold in the
    bad direction and beyond ``mad_k`` MADs of the ``lookback`` points before it, at least
    ``min_size`` of them). Points ingested together (a history, or commits measured in one
    job) and a step whose change point E-Divisive cannot see yet (too few points after it)
    keep their newest point's step at the commit that brought it, not at the newest."""
    lower = policy.kind == "latency"
    first = len(values) - 1
    while first > 1:
        before = values[max(0, first - 1 - lookback) : first - 1]
        if len(before) < min_size:
            break
        level, value = statistics.median(before), values[first - 1]
        z = stats.robust_z(before, value)
        if not (bad_change(ratio_of(value, level), lower) > policy.threshold
                and abs(z) > mad_k and (z > 0) == lower):  # fmt: skip
            break
        first -= 1
    return first


@dataclass
class Newest:
    """The machine's newest commit judged against the one before
    (``ragbench.verdicts.comparison``)."""

    commit: str | None
    prev: str | None
    time: object
    verdicts: dict  # (environment, *key) -> Verdict
    since: object = None  # the time of the newest LAST commits' oldest


def newest(store, machine: str, policies: Policies) -> Newest:
    """The comparison of the machine's newest commit with the commit before it on main, in
    each environment of the newest commit's runs with its own runs there (another harness's:
    asv's env_name; '' for this suite's): every cell, with its bound, failure or absence (no
    timing statistics), keyed ``(environment, benchmark, metric, param_key)``. Runs of two
    environments are never pooled: a cell that failed in one is not the other's value."""
    from ..verdicts import comparison as compare

    runs = store.runs(machine=machine)
    commits = list(dict.fromkeys(r["commit_hash"] for r in runs))
    if not commits:
        return Newest(None, None, None, {})

    def ids(commit: str, env: str) -> list[str]:
        return [r["run_id"] for r in runs
                if r["commit_hash"] == commit and (r["environment"] or "") == env]  # fmt: skip

    verdicts = {}
    for env in sorted({r["environment"] or "" for r in runs if r["commit_hash"] == commits[0]}):
        base = ids(commits[1], env) if len(commits) > 1 else []
        c = compare.compare(compare.cells(store, base), compare.cells(store, ids(commits[0], env)),
                            policies, detail=False)  # fmt: skip
        verdicts.update({(env, *v.key): v for v in c.verdicts})
    oldest = commits[:LAST][-1]
    since = next(r["commit_time"] for r in runs if r["commit_hash"] == oldest)
    return Newest(commits[0], commits[1] if len(commits) > 1 else None, runs[0]["commit_time"],
                  verdicts, since)  # fmt: skip


def finding_words(v) -> str:
    """A finding in the words ``found_by`` keeps: ``violation: 6418 >= bound 2``."""
    status = Status.VIOLATION if v.status == Status.PRE_EXISTING else v.status
    also = " (broken on the commit before too)" if v.status == Status.PRE_EXISTING else ""
    return f"{status}: {v.note}{also}" if v.note else f"{status}{also}"


def findings(store, machine: str, now: Newest, stored: list[dict]) -> list[tuple]:
    """The cells of the newest commit's findings that no alert holds yet (fixed ones aside),
    each ``(commit, its time, the commit before it, the cell)``: the newest commit's, or, for a
    bound broken on the commit before too, the first of the newest commits that break it
    (``broken_since``: commits ingested together hold where it arrived)."""
    held = {_cell_key(c) for a in stored if a["state"] != "fixed"
            for c in a["cells"] if c["found_by"] not in STEP_FOUND}  # fmt: skip
    out = []
    for key, v in sorted(now.verdicts.items()):  # a finding stored with '' holds every one
        if v.status in FINDINGS and key not in held and ("", *key[1:]) not in held:
            cell = {"environment": key[0], "benchmark": key[1], "metric": key[2],
                    "param_key": key[3], "unit": v.unit, "kind": v.policy.kind,
                    "rule": v.policy.rule(), "before": v.base, "after": v.head,
                    "ratio_lo": None, "ratio_hi": None, "found_by": finding_words(v)}  # fmt: skip
            since = v.status == Status.PRE_EXISTING and broken_since(store, machine, key, v.policy)
            if since:
                commit, when, prev, before, after, words = since
                moved = {
                    "before": before,
                    "after": after,
                    "found_by": f"{Status.VIOLATION}: {words}",
                }
                out.append((commit, when, prev, {**cell, **moved}))
            else:
                out.append((now.commit, now.time, now.prev, cell))
    return out


def broken_since(store, machine: str, key: tuple, policy: Policy) -> tuple | None:
    """Where the bound of the cell ``key`` (environment, benchmark, metric, param_key) broke:
    the first of its series' newest points that all break it, as (commit, its time, the
    commit before it, the value before, the value, the bound's words); None where its points
    do not show that (a bound judged against a reference in the same run)."""
    s = read_series(store, machine, key[0], key[1:])
    i = len(s.values) - 1
    if i < 1 or history.broken_bound(policy, s.values[i]) is None:
        return None
    while i > 0 and history.broken_bound(policy, s.values[i - 1]) is not None:
        i -= 1
    prev, before = (s.commits[i - 1], s.values[i - 1]) if i else (None, None)
    return (s.commits[i], s.times[i], prev, before, s.values[i],
            history.broken_bound(policy, s.values[i]))  # fmt: skip


def _earlier(store, machine: str, commit: str, than: str | None) -> bool:
    """Whether ``commit``'s time is before ``than``'s (both of the machine's runs)."""
    if than is None or commit == than:
        return False
    times = [store.runs(machine=machine, commit=c)[:1] for c in (commit, than)]
    if not all(times):
        return False
    return _when(times[0][0]["commit_time"]) < _when(times[1][0]["commit_time"])


def _when(t) -> tuple:
    return (t is not None, t or 0)


def _cell_key(c: dict) -> tuple:
    return (c["environment"], c["benchmark"], c["metric"], c["param_key"])


def update(store, machine: str, policies: Policies, *, last: int = LAST,
           log: Callable[[str], None] = lambda m: None) -> tuple[int, int, int]:  # fmt: skip
    """Alerts of the machine brought up to date (module notes); -> (alerts made or grown,
    alerts marked fixed, fixed alerts reopened)."""
    found, times, prevs = steps(store, machine, policies, last)
    stored_list = store.alerts(machine)
    now = newest(store, machine, policies)
    fixed = reopened = 0
    held_again: dict[tuple, object] = {}  # cells of reopened alerts -> their commit's time
    for a in stored_list:
        if (
            a["state"] != "fixed"
            or a["changed_by"] != BY
            or _when(a["commit_time"]) < _when(now.since)
            or any(rejudged(c, policies) for c in a["cells"])
        ):
            continue  # open ones below; a state a person set is theirs; older than LAST commits
        by = undone_by(store, machine, a, policies, now, steps_only=True)
        steps_alone = all(c["found_by"] in STEP_FOUND for c in a["cells"])
        if by is not None and steps_alone and _earlier(store, machine, by, a["fixed_by"]):
            # commits measured late, before the fix, moved the step back earlier (never later:
            # a step up and back since is another alert's)
            why = f"every step undone from {by[:12]} on"
            store.set_alert_state(machine, a["commit_hash"], "fixed", by=BY, was="fixed",
                                  fixed_by=by, reason=why)  # fmt: skip
        if by is None:
            # a finding broken again is a new alert of its commit; a step is this one again
            why = f"reopened: no longer back at the old level (it was from {a['fixed_by'][:12]} on)"
            if store.set_alert_state(machine, a["commit_hash"], "new", by=BY, was="fixed",
                                     reason=why):  # fmt: skip
                reopened += 1
                a["state"] = "new"
                held_again.update({_cell_key(c): a["commit_time"] for c in a["cells"]
                                   if c["found_by"] in STEP_FOUND})  # fmt: skip
    for commit, group in found.items():  # the step a reopened alert is: no other alert
        group[:] = [c for c in group if _cell_key(c) not in held_again
                    or _when(times.get(commit)) <= _when(held_again[_cell_key(c)])]  # fmt: skip
    gone = moved(stored_list, found, now) + overtaken(store, machine, stored_list, found, times,
                                                      now)  # fmt: skip
    for a in gone:
        to = ", ".join(c[:12] for c in a["moved_to"])
        why = f"no step here any more: {a['why']} put it at {to}"
        store.set_alert_state(machine, a["commit_hash"], "invalid", by=BY, was="new", reason=why)
    stored = {a["commit_hash"]: a for a in store.alerts(machine, cells=None)}  # every cell
    for commit, when, prev, cell in findings(store, machine, now, stored_list):
        found.setdefault(commit, []).append(cell)
        times.setdefault(commit, when)
        prevs.setdefault(commit, prev)
    alerts, cells = [], []
    for commit, group in found.items():
        known = {_cell_key(c) for c in stored.get(commit, {}).get("cells", [])}
        fresh = [c for c in group if _cell_key(c) not in known]
        if not fresh:
            continue
        if commit not in stored:
            alerts.append({"branch": store.branch, "machine": machine, "commit_hash": commit,
                           "prev_commit_hash": prevs.get(commit), "commit_time": times.get(commit),
                           "state": "new", "found_at": _now()})  # fmt: skip
        cells += [{"branch": store.branch, "machine": machine, "commit_hash": commit, **c}
                  for c in fresh]  # fmt: skip
    if alerts or cells:
        store.save_alerts(alerts, cells)
    for a in store.alerts(machine) if alerts or cells else stored_list:
        if a["state"] in OPEN and (by := undone_by(store, machine, a, policies, now)):
            what = "step" if all(c["found_by"] in STEP_FOUND for c in a["cells"]) else "cell"
            why = f"every {what} undone from {by[:12]} on"
            fixed += store.set_alert_state(machine, a["commit_hash"], "fixed", by=BY,
                                           was=a["state"], fixed_by=by, reason=why)  # fmt: skip
    grown = len({c["commit_hash"] for c in cells})
    log(
        f"alerts: {machine}: {grown} made or grown, {fixed} fixed, {reopened} reopened, "
        f"{len(gone)} whose step moved"
    )
    return grown, fixed, reopened


def rejudged(c: dict, policies: Policies) -> str | None:
    """The rule the policies judge the cell ``c`` by now where it is not the one it was found
    under (a threshold or bound moved, a bound made ``info``; a cell stored before cells kept
    their rule: its kind), else None. No later commit undoes such a cell: the old rule would
    need the old thresholds, the new one never raised it. A failed or missing cell is one
    whatever the rule."""
    if c["found_by"].startswith((Status.FAILED, Status.MISSING)):
        return None
    policy = _policy(policies, c)
    was = c.get("rule")
    if (policy.rule() if was else policy.kind) == (was or c["kind"]):
        return None
    return policy.rule()


def rejudged_words(alert: dict, policies: Policies) -> str | None:
    """The open alert's cells that the policies judge by another rule now (``rejudged``), in a
    sentence (``ragbench alerts``, the dashboard's Alerts page); None where there is none."""
    rules = [(c, now) for c in alert["cells"]
             if alert["state"] in OPEN and (now := rejudged(c, policies))]  # fmt: skip
    if not rules:
        return None
    cells = "; ".join(f"{cell_name(c)} (found under {c.get('rule') or c['kind']!r}, now {now!r})"
                      for c, now in rules)  # fmt: skip
    return f"Judged by another rule now, so no later commit marks them fixed: {cells}."


def _change_points(found: dict[str, list[dict]]) -> dict[tuple, set[str]]:
    """Each cell's commits with a change point in ``found`` (``steps``)."""
    at: dict[tuple, set[str]] = {}
    for commit, group in found.items():
        for c in group:
            if c["found_by"] == "change point":
                at.setdefault(_cell_key(c), set()).add(commit)
    return at


def _own_new(stored: list[dict], now: Newest, found_by: str) -> list[dict]:
    """The new alerts this module made (no person set their state) within the newest ``LAST``
    commits, which ``steps`` reads, all of whose cells were found by ``found_by``."""
    return [a for a in stored
            if a["state"] == "new" and a["changed_by"] in (None, BY) and a["cells"]
            and _when(a["commit_time"]) >= _when(now.since)
            and all(c["found_by"] == found_by for c in a["cells"])]  # fmt: skip


def moved(stored: list[dict], found: dict[str, list[dict]], now: Newest) -> list[dict]:
    """The new alerts, this module's, of change points alone, none of which is found at their
    commit any more and each at another (``found``: ``steps``): a commit measured after newer
    ones moved the change points, and the alert made before it claims steps that are not
    there. Each with ``moved_to``, the commits they are at now."""
    at, out = _change_points(found), []
    for a in _own_new(stored, now, "change point"):
        where = [at.get(_cell_key(c), set()) for c in a["cells"]]
        if all(w and a["commit_hash"] not in w for w in where):
            out.append({**a, "moved_to": sorted(set().union(*where)),
                        "why": "the commits measured since"})  # fmt: skip
    return out


def overtaken(store, machine: str, stored: list[dict], found: dict[str, list[dict]],
              times: dict, now: Newest) -> list[dict]:  # fmt: skip
    """The new alerts, this module's, of newest-run cells alone, each of whose cells now has a
    change point at a commit between the alert's previous measured commit and its own: that
    commit was measured after the alert was made (else it would have been the previous one),
    and the step the alert claims at its own commit is there, held by that commit's alert.
    Each with ``moved_to`` (``moved``)."""
    at, out = _change_points(found), []
    for a in _own_new(stored, now, "newest run"):
        prev = a["prev_commit_hash"] and store.runs(machine=machine, commit=a["prev_commit_hash"])
        if not prev:
            continue
        after, before = _when(prev[0]["commit_time"]), _when(a["commit_time"])
        where = [{x for x in at.get(_cell_key(c), ()) if after < _when(times.get(x)) < before}
                 for c in a["cells"]]  # fmt: skip
        if all(where):
            out.append({**a, "moved_to": sorted(set().union(*where)),
                        "why": "a commit measured later"})  # fmt: skip
    return out


def update_runs(store, run_ids: list[str], policies: Policies | None = None,
                log: Callable[[str], None] = lambda m: None) -> int:  # fmt: skip
    """After an ingest: the alerts of each machine these runs gave main a point on, brought
    up to date (``update``); -> the alerts made, grown, fixed or reopened."""
    policies = policies or load_policies()
    machines = sorted({row[0] for row in store.run_series(run_ids)})
    return sum(sum(update(store, m, policies, log=log)) for m in machines)


def _now():
    from datetime import UTC, datetime

    return datetime.fromtimestamp(time.time(), UTC).replace(tzinfo=None)


# --- undone, or not -------------------------------------------------------------------------


def _policy(policies: Policies, c: dict) -> Policy:
    return policies.for_metric(c["benchmark"], c["metric"], c["unit"])


def step_back(store, machine: str, alert: dict, c: dict, policies: Policies,
              s: Series | None = None) -> str | None:  # fmt: skip
    """The commit from which the step ``c`` (a cell of ``alert``) is undone, else None. It is
    undone where the segment of the newest change point of the code after the alert's commit
    (a change of the environment neither undoes nor redoes a step) is back at the level
    before the step, and then from the first of those change points whose segments are all
    back. A segment is back when it has at least ``FIX_POINTS`` points and the bad end of
    the interval of its level over the old one is within the threshold. Where the
    environment is the same throughout, that interval is of the segment against the points
    before the step; else the step back's own interval, chained with the alert's step (the
    environment's move between them left out)."""
    key = (c["benchmark"], c["metric"], c["param_key"])
    s = s or read_series(store, machine, c["environment"], key)
    at = s.at(alert["commit_hash"])
    if not at:
        return None
    cps = change_positions(store, machine, policies, s)
    later = [p for p in cps if p > at]
    code = [p for p in later if not s.moved(p)]
    lower = c["kind"] == "latency"

    def is_back(back: int) -> bool:
        prev, nxt = neighbours(cps, back, len(s.values))
        prev = max(prev, at)
        segment = s.values[back:nxt][:SEGMENT]
        if len(segment) < FIX_POINTS:
            return False
        if len(set(s.env_keys[max(0, at - 1) : nxt])) == 1:
            old = s.values[max(neighbours(cps, at, len(s.values))[0], at - SEGMENT) : at]
            lo, hi = stats.ratio_interval(old, segment)
            level = hi if lower else lo
        else:
            lo, hi = stats.ratio_interval(s.values[max(prev, back - SEGMENT) : back], segment)
            level = ratio_of(c["after"], c["before"]) * (hi if lower else lo)
        return not math.isnan(level) and bad_change(level, lower) <= _policy(policies, c).threshold

    if not code or not is_back(code[-1]):
        return None
    # the commit that fixed it: the first of the code's steps from which every segment is back
    # (before: the newest, so a later unrelated speed-up was named the fix)
    first = len(code) - 1
    while first > 0 and is_back(code[first - 1]):
        first -= 1
    return s.commits[code[first]]


def finding_gone(alert: dict, c: dict, now: Newest) -> str | None:
    """The newest commit where it no longer shows the finding ``c`` (it has the cell, measured
    and within its bound), else None."""
    key = _cell_key(c)
    if key in now.verdicts or key[0]:
        found = [now.verdicts[key]] if key in now.verdicts else []
    else:  # stored before findings had their environment: gone from every one
        found = [v for k, v in now.verdicts.items() if k[1:] == key[1:]]
    if now.commit in (None, alert["commit_hash"]) or not found:
        return None
    if any(v.head is None for v in found):
        return None
    return None if any(v.status in FINDINGS for v in found) else now.commit


def held_since(store, machine: str, alert: dict, c: dict, policies: Policies, by: str,
               when) -> tuple[str, object]:  # fmt: skip
    """The first of the newest commits up to ``by`` (where the finding ``c`` of ``alert`` is
    gone, at ``when``) that hold its bound, after the alert's commit, and its time: commits
    ingested together hold where it was fixed. ``(by, when)`` where its points do not show
    that (no bound, a failed or missing cell)."""
    policy = _policy(policies, c)
    if policy.kind != "bound":
        return by, when
    s = read_series(store, machine, c["environment"], (c["benchmark"], c["metric"],
                                                       c["param_key"]))  # fmt: skip
    at, i = s.at(alert["commit_hash"]), s.at(by)
    if at is None or i is None:
        return by, when
    while i - 1 > at and history.broken_bound(policy, s.values[i - 1]) is None:
        i -= 1
    return s.commits[i], s.times[i]


def undone_by(store, machine: str, alert: dict, policies: Policies, now: Newest | None = None,
              steps_only: bool = False) -> str | None:  # fmt: skip
    """The commit from which every cell of ``alert`` is undone (``step_back``,
    ``finding_gone``; ``steps_only``: its steps alone, where it has some): of the cells' such
    commits, the newest; None where a cell is not."""
    if steps_only and not any(c["found_by"] in STEP_FOUND for c in alert["cells"]):
        return alert["fixed_by"]
    if not steps_only and any(rejudged(c, policies) for c in alert["cells"]):
        return None  # judged by another rule now: no value of a later commit undoes it
    now = now or newest(store, machine, policies)
    back = []
    for c in alert["cells"]:
        if steps_only and c["found_by"] not in STEP_FOUND:
            continue
        if c["found_by"] in STEP_FOUND:
            s = read_series(store, machine, c["environment"],
                            (c["benchmark"], c["metric"], c["param_key"]))  # fmt: skip
            by = step_back(store, machine, alert, c, policies, s)
            when = s.times[s.at(by)] if by else None
        else:
            by, when = finding_gone(alert, c, now), now.time
            if by is not None:
                by, when = held_since(store, machine, alert, c, policies, by, when)
        if by is None:
            return None
        back.append((when is not None, when or 0, by))
    return max(back)[2] if back else None


def moves(store, machine: str, alert: dict, policies: Policies) -> list[str]:
    """The changes of level since the alert's commit that are none of the code's, in words
    (``9.8% faster at 0123456789ab (environment: python 3.12 -> 3.13); no fix of the code``,
    or ``... (measurement setting changed: asv number 85 -> 1) ...``): shown with the alert,
    never counted as its fix."""
    return moves_of(store, machine, [alert], policies)[alert["commit_hash"]]


def moves_of(store, machine: str, found: list[dict], policies: Policies) -> dict[str, list[str]]:
    """``moves`` of each of the machine's alerts ``found``: commit -> its lines. Their series
    are read together (``steps.read_many``, ``steps.positions_of``): one query an environment
    and the machine's change points once."""
    cells = [(a, c) for a in found for c in a["cells"] if c["found_by"] in STEP_FOUND]
    many = read_many(store, machine, {(c["environment"], *cell_key(c)) for _, c in cells})
    cps = positions_of(store, machine, policies, many)
    out: dict[str, list[str]] = {a["commit_hash"]: [] for a in found}
    for a, c in cells:
        key = (c["environment"], *cell_key(c))
        s, at = many[key], many[key].at(a["commit_hash"])
        for p in (p for p in cps[key] if at and p > at and s.moved(p)):
            step = step_at(s, p, cps[key], c["kind"])
            change = worded(cell_change(step), c["unit"], c["kind"] != "throughput")
            out[a["commit_hash"]].append(
                f"{cell_name(c)}: {change} at {s.commits[p][:12]} "
                f"({history.change_cause(s.point(p - 1), s.point(p))}); no fix of the code"
            )
    return out


def cell_key(c: dict) -> Key:
    """A cell's series key (benchmark, metric, param_key)."""
    return (c["benchmark"], c["metric"], c["param_key"])


def cell_name(c: dict) -> str:
    """A cell of an alert as the reports name it, as code: ```bench.metric params```."""
    return f"`{cell_text((c['benchmark'], c['metric'], c['param_key']))}`"


def stale_series(store, machine: str, policies: Policies, last: int = LAST) -> list:
    """The machine's stale series (``history.stale_at``): their reports, last point first."""
    reports = history.stored_histories(store, machine, policies, last=last, change_points=False)
    return sorted((r for r in reports if r.stale), key=lambda r: str(r.stale_since))


# --- a person's state -----------------------------------------------------------------------


def change_state(
    store, machine: str, commit: str, state: str, *, by: str, reason: str | None = None
) -> tuple[dict, str]:
    """A person's state change of the alert at ``commit`` (a prefix); -> (the alert as it
    was, the state now stored). The update is conditional on the state read: where an ingest
    changed it in between, it is read again and the person's change made on what is there.
    AlertError where there is no such alert or the change says nothing."""
    state = state.lower()
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
    was = found[0]
    for _ in range(5):
        current = store.alerts(machine, commit=was["commit_hash"])[0]
        if store.set_alert_state(machine, was["commit_hash"], state, by=by, was=current["state"],
                                 reason=reason):  # fmt: skip
            break
    stored = store.alerts(machine, commit=was["commit_hash"])[0]["state"]
    return was, stored
