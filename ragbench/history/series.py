"""Main's history: the newest run of each series judged against its lookback (the runs before
it in the same environment), and the change points of the whole series, each with its cause
(the environment, how asv timed the cell, or the code). ``ragbench detect`` and the dashboard
read it; the per-metric rules are in ``policies.toml`` (``ragbench.policies``).
"""

from __future__ import annotations

import itertools
import json
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import stats
from ..policies import STATISTICAL, Policies, Policy
from ..store import ENV_FIELDS, Store, timing
from ..verdicts.comparison import Key, bad_change, by_threshold, ratio_of
from ..verdicts.status import Status
from . import edivisive as changepoints


@dataclass
class Point:
    """One run of a series, in commit order."""

    commit_hash: str
    commit_time: object
    value: float
    env_key: str | None
    env: dict  # the ENV_FIELDS of the run, to say what changed
    timing: dict = field(default_factory=dict)  # how the harness timed it (ragbench.store.timing)


def change_cause(before: Point, after: Point, values: tuple[float, float] | None = None) -> str:
    """What moved between two points of a series besides the code: the environment
    (``environment: torch 2.10.0 -> 2.11.0``), how the harness timed the cell (``measurement
    setting changed: asv number 100 -> 10``: ``ragbench.store.timing``, by its factor or more where
    its calibration does not explain it; ``values``: the levels either side, else the two
    points'), both, or ``code`` where neither did."""
    causes = []
    if before.env_key != after.env_key:
        a, b = before.env, after.env
        moved = [f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(a) if a.get(k) != b.get(k)]
        causes.append("environment: " + (", ".join(moved) or "another environment"))
    setting = settings_change(before, after, values)
    if setting:
        causes.append(timing.words(setting))
    return "; ".join(causes) or "code"


def settings_change(before: Point, after: Point,
                    values: tuple[float, float] | None = None) -> str | None:  # fmt: skip
    """The measurement settings that moved between two points (``asv number 89287 -> 1``),
    else None (``timing.changed``)."""
    a, b = values or (before.value, after.value)
    return timing.changed(before.timing, after.timing, a, b)


@dataclass
class Change:
    """A change point with the medians of the segments around it: ``before`` and ``after``
    (over the window that found it, for a stored one)."""

    index: int  # into the report's points
    before: float
    after: float


@dataclass
class SeriesReport:
    key: Key
    params: dict
    unit: str | None
    points: list[Point]  # every point, or (stored) the ones the report names, oldest first
    change_points: list[int]  # indices of points where a new segment starts
    env_changes: list[int]  # those change points where the environment changed too
    latest_z: float | None = None
    latest_change: float | None = None
    # regression | accepted | improvement | unchanged | short | env-change | info
    status: Status = Status.UNCHANGED
    accepted: list[int] = field(default_factory=list)  # points whose change was accepted
    # the environment another harness defines (asv's env_name ...): one series each; None for
    # this suite's runs, whose environment changes along one series
    environment: str | None = None
    changes: list[Change] = field(default_factory=list)  # the change points, with medians
    # stale: the commit time of the series' last point, older than the machine's newest run
    stale_since: object = None
    note: str = ""  # a broken bound: the value against the bound

    @property
    def stale(self) -> bool:
        return self.status == Status.STALE

    def describe_change(self, i: int) -> str:
        """The cause of the change at point ``i`` (``change_cause``, with the levels either
        side where it is a change point)."""
        c = next((c for c in self.changes if c.index == i), None)
        return change_cause(self.points[i - 1], self.points[i],
                            (c.before, c.after) if c else None)  # fmt: skip

    def settings_changed(self, i: int) -> str | None:
        """The measurement settings that moved at the change at point ``i``, else None."""
        c = next((c for c in self.changes if c.index == i), None)
        return settings_change(self.points[i - 1], self.points[i],
                               (c.before, c.after) if c else None)  # fmt: skip


def change_points_of(values, policies: Policies) -> list[int]:
    """E-Divisive change points of ``values`` (oldest first) with the main branch's settings
    in policies.toml, over windows as they are stored (``ragbench.history.edivisive``): indices
    where a new level starts."""
    return changepoints.change_points(values, changepoints.Settings.of(policies))


def history(points: list[Point], key: Key, params: dict, unit: str | None,
            policies: Policies, change_points: bool = True, accepted: Iterable[str] = (),
            environment: str | None = None, newest_time=None) -> SeriesReport:  # fmt: skip
    """Judge the newest point against the lookback (same environment) and find change points
    (``change_points=False`` skips them: the lookback alone is cheap).

    ``accepted``: commits where a maintainer accepted this cell's change. The lookback starts at
    the newest of them (its level is the new baseline), and a regression of the newest point
    that was accepted reads ``accepted``. ``environment``: the series' (``SeriesReport``);
    ``newest_time``: the commit time of the machine's newest run (a series whose last point is
    older is stale, never judged)."""
    policy = policies.for_metric(key[0], key[1], unit)
    cps = (
        change_points_of([p.value for p in points], policies)
        if change_points and not policy.paired  # host time of separate runs: means nothing
        else []
    )
    bounds = [0, *cps, len(points)]
    changes = [Change(i, statistics.median(p.value for p in points[bounds[j] : i]),
                      statistics.median(p.value for p in points[i : bounds[j + 2]]))
               for j, i in enumerate(cps)]  # fmt: skip
    accepted = set(accepted)
    at = [i for i, p in enumerate(points) if p.commit_hash in accepted]
    latest = points[-1]
    start = max((i for i in at if i < len(points) - 1), default=0)
    since = points[start:-1]
    same_env = [p for p in since if p.env_key == latest.env_key]
    lookback = same_env[-int(policies.main.get("lookback", 10)) :]
    env_changes = [i for i in cps if points[i].env_key != points[i - 1].env_key]
    return _report(key, params, unit, policy, policies.main, points, changes, env_changes, at,
                   lookback, len(same_env) < len(since), len(points), environment,
                   stale_at(latest, newest_time))  # fmt: skip


def stale_at(latest: Point, newest_time) -> object:
    """The commit time of ``latest`` (a series' last point) where it is older than
    ``newest_time`` (the machine's newest run): the series stopped (a dropped Python, a
    removed cell) and its last point is no newest run. None where it is current."""
    t = latest.commit_time
    return t if t is not None and newest_time is not None and t < newest_time else None


def broken_bound(policy: Policy, value: float) -> str | None:
    """Why ``value`` breaks the policy's bound (``6418 >= bound 2``), else None. A bound
    widened by a same-run reference (``relative_to``) is judged by the gate of the run, where
    the reference is: here only the value under the plain bound counts as held."""
    if policy.max is not None and value >= policy.max and not policy.relative_to:
        return f"{value:.4g} >= bound {policy.max:.4g}"
    if policy.min is not None and value < policy.min:
        return f"{value:.4g} < bound {policy.min:.4g}"
    return None


def _report(key: Key, params: dict, unit: str | None, policy: Policy, conf: dict,
            points: list[Point], changes: list[Change], env_changes: list[int],
            accepted: list[int], lookback: list[Point], env_moved: bool, n: int,
            environment: str | None = None, stale_since=None) -> SeriesReport:  # fmt: skip
    """The report of one series, as both paths make it (every point in memory: ``history``;
    the lookback in SQL and the stored change points: ``stored_histories``): ``points`` oldest
    first, ``changes`` and ``env_changes`` (indices into them) its change points and those
    where the environment changed too, ``accepted`` the points whose change was accepted. The
    newest point (of ``n`` in the series) is judged against ``lookback``: the points before it
    in its environment from the newest accepted change on (the newest ``lookback`` of them);
    ``env_moved``: some of those points were of another environment. ``stale_since``: the
    series stopped there (``stale_at``): its last point is not judged. A bound's newest point
    is judged against the bound (``broken_bound``): a violation, else unchanged. A newest
    point flagged against a lookback timed otherwise (``ragbench.store.timing``: another asv
    ``number``) is ``settings-changed``, its note the settings: not a change of the code."""
    rep = SeriesReport(key, params, unit, points, [c.index for c in changes], env_changes,
                       accepted=accepted, environment=environment, changes=changes)  # fmt: skip
    if stale_since is not None:
        rep.status, rep.stale_since = Status.STALE, stale_since
        return rep
    if policy.kind == "bound":
        rep.note = broken_bound(policy, rep.points[-1].value) or ""
        held = policy.max is None or not policy.relative_to or rep.points[-1].value < policy.max
        rep.status = (Status.VIOLATION if rep.note else Status.UNCHANGED if held
                      else Status.INFO)  # fmt: skip
        return rep
    if policy.paired:
        rep.status = Status.INFO
        return rep
    if policy.kind not in STATISTICAL or n < 2:
        rep.status = Status.SHORT if policy.kind in STATISTICAL else Status.INFO
        return rep
    latest = rep.points[-1]
    min_size = int(conf.get("min_size", 3))
    version = latest.timing.get("version")  # asv's hash of the benchmark's code
    same = [p for p in lookback if p.timing.get("version", version) == version]
    if len(same) >= min_size:  # like with like, where there are enough
        lookback = same
    if len(lookback) < min_size:
        rep.status = Status.ENV_CHANGE if env_moved else Status.SHORT
        return rep
    lower = policy.kind == "latency"
    values = [p.value for p in lookback]
    level = statistics.median(values)
    rep.latest_z = stats.robust_z(values, latest.value)
    rep.latest_change = bad_change(ratio_of(latest.value, level), lower)
    beyond = abs(rep.latest_z) > float(conf.get("mad_k", 5.0))
    rep.status = by_threshold(rep.latest_change, policy.threshold, significant=beyond)
    if rep.status == Status.REGRESSION and len(rep.points) - 1 in rep.accepted:
        rep.status = Status.ACCEPTED
    moved = timing.changed(timing.typical([p.timing for p in lookback]), latest.timing, level,
                           latest.value)  # fmt: skip
    if moved and rep.status in (Status.REGRESSION, Status.IMPROVEMENT):
        rep.status, rep.note = Status.SETTINGS, timing.words(moved)
    return rep


def _tracked(policies: Policies, key: Key, unit: str | None) -> Policy | None:
    """The rule of a series main's history reports on; None for one it does not (info and
    hash metrics: shown, never judged over time)."""
    policy = policies.for_metric(key[0], key[1], unit)
    return None if policy.kind in ("info", "hash") else policy


def histories(rows: list[dict], policies: Policies, last: int = 200, change_points: bool = True,
              acceptances: Iterable[dict] = ()) -> list[SeriesReport]:  # fmt: skip
    """Series reports from ``Store.series`` rows (one machine): one point per commit and
    environment (the median over its runs), in commit order, the newest ``last`` commits.
    ``acceptances``: ``Store.acceptances()`` rows (see ``history``). A cell measured in
    several environments of another harness (asv's environment: py3.12 and py3.13) is a series
    per environment."""
    accepted: dict[Key, set[str]] = {}
    for a in acceptances:
        accepted.setdefault((a["benchmark"], a["metric"], a["param_key"]), set()).add(
            a["commit_hash"]
        )
    grouped: dict[tuple[Key, str], dict[tuple, list[dict]]] = {}
    times = [r["commit_time"] for r in rows if r.get("commit_time") is not None]
    newest_time = max(times, default=None)
    for row in rows:
        if row["median"] is None:
            continue
        key = (row["benchmark"], row["metric"], row["param_key"])
        series = (key, row.get("environment") or "")
        grouped.setdefault(series, {}).setdefault((row["commit_hash"], row["env_key"]),
                                                  []).append(row)  # fmt: skip
    reports = []
    for (key, environment), by_commit in sorted(grouped.items()):
        first = next(iter(by_commit.values()))[0]
        unit = unit_of([r for runs in by_commit.values() for r in runs])
        if _tracked(policies, key, unit) is None:
            continue
        points = []
        for (commit, env), runs in by_commit.items():  # rows arrive in commit order
            points.append(Point(
                commit, runs[0]["commit_time"], statistics.median(r["median"] for r in runs),
                env, {k: runs[0].get(k) for k in ENV_FIELDS},
                timing.of(runs[0].get("source"), min_of(runs, "stats_number"),
                          min_of(runs, "stats_repeat"),
                          max((r["version"] for r in runs if r.get("version")), default=None)),
            ))  # fmt: skip
        reports.append(history(points[-last:], key, json.loads(first["params"]), unit,
                               policies, change_points, accepted.get(key, ()),
                               environment or None, newest_time))  # fmt: skip
    return reports


def unit_of(rows: list[dict]) -> str | None:
    """A series' unit: that of its newest row that has one (oldest first). An asv result file
    ingested without its ``benchmarks.json`` two directories up stores no unit, and the
    series' words and policy stay those of the unit its other runs have."""
    return next((r["unit"] for r in reversed(rows) if r.get("unit")), None)


def min_of(rows: list[dict], column: str):
    """The smallest value of ``column`` over ``rows``, None where none has one."""
    return min((r[column] for r in rows if r.get(column) is not None), default=None)


def stored_histories(
    store: Store,
    machine: str,
    policies: Policies,
    last: int = 200,
    change_points: bool = True,
    **series_filter,
) -> list[SeriesReport]:
    """``histories`` of the machine's series over its newest ``last`` commits, from the store
    without reading the series into Python: the lookback in SQL (``Store.lookback``) and the
    stored change points (``ragbench.history.edivisive``) of those commits. A series whose stored
    change points are behind its newest point (or missing, or of other settings) has them
    brought up to date here, in memory, from its stored state (``ragbench changepoints``
    stores them). ``series_filter``: benchmark, metric, params. Each report's ``points`` are
    the ones it names: the lookback, the newest, the accepted ones and each change point with
    the point before it."""
    conf = policies.main
    rows = store.lookback(machine, last=last, lookback=int(conf.get("lookback", 10)),
                          **series_filter)  # fmt: skip
    groups = {k: list(g) for k, g in itertools.groupby(rows, key=_series_key)}
    found = _stored_change_points(store, machine, policies, groups) if change_points else {}
    newest_run = store.newest_commit(machine)
    newest_time = newest_run[1] if newest_run else None
    # a cell that failed on the newest commit is no stale series: its newest run failed
    failed = {(r["benchmark"], r["metric"], r["param_key"]) for r in store.newest_failures(machine)}
    reports = []
    for (environment, *key), group in groups.items():
        key = tuple(key)
        newest = group[-1]
        unit = unit_of(group)
        policy = _tracked(policies, key, unit)
        if policy is None:
            continue
        points = {(r["commit_hash"], r["env_key"]): Point(
            r["commit_hash"], r["commit_time"], r["value"], r["env_key"],
            {k: r[k] for k in ENV_FIELDS},
            timing.of(r["source"], r["stats_number"], r["stats_repeat"], r["version"]))
            for r in group}  # fmt: skip
        cps = [c for c in found.get((environment, *key), []) if not policy.paired
               and (newest["since"] is None or c["prev_commit_time"] is None
                    or c["prev_commit_time"] >= newest["since"])]  # fmt: skip
        for c in cps:
            for pre in ("prev_", ""):
                points.setdefault((c[f"{pre}commit_hash"], c[f"{pre}env_key"]), Point(
                    c[f"{pre}commit_hash"], c[f"{pre}commit_time"], c[f"{pre}value"],
                    c[f"{pre}env_key"], json.loads(c[f"{pre}env"]),
                    timing.parse(c[f"{pre}timing"])))  # fmt: skip
        latest = points.pop((newest["commit_hash"], newest["env_key"]))
        ordered = [*sorted(points.values(), key=_when), latest]
        index = {(p.commit_hash, p.env_key): i for i, p in enumerate(ordered)}
        at = [index[(c["commit_hash"], c["env_key"])] for c in cps]
        changes = [Change(i, c["before"], c["after"]) for i, c in zip(at, cps, strict=True)]
        reports.append(_report(
            key, json.loads(newest["params"]), unit, policy, conf, ordered, changes,
            [i for i, c in zip(at, cps, strict=True) if c["env_key"] != c["prev_env_key"]],
            sorted(index[(r["commit_hash"], r["env_key"])] for r in group if r["accepted"]),
            [points[(r["commit_hash"], r["env_key"])] for r in group if r["in_lookback"]],
            newest["same_n"] < newest["since_n"], newest["n"], environment,
            stale_at(latest, newest_time),
        ))  # fmt: skip
        if reports[-1].stale and key in failed:
            reports[-1].status, reports[-1].note = Status.FAILED, "failed on the newest commit"
    return reports


def _series_key(row: dict) -> tuple:
    return (row["environment"], row["benchmark"], row["metric"], row["param_key"])


def _when(p: Point) -> tuple:
    return (p.commit_time is not None, p.commit_time or 0)


def _stored_change_points(store: Store, machine: str, policies: Policies,
                          groups: dict[tuple, list[dict]]) -> dict[tuple, list[dict]]:  # fmt: skip
    """The change points of ``groups``' series: ``(environment, benchmark, metric, param_key)``
    -> rows of ``change_points`` (``changepoints.current``: brought up to date in memory where
    the store's are behind the newest point)."""
    newest = {k: (g[-1]["commit_hash"], g[-1]["env_key"]) for k, g in groups.items()}
    where = {col: next(iter(groups))[i] for i, col in ((1, "benchmark"), (2, "metric"))
             if len({g[i] for g in groups}) == 1}  # fmt: skip
    return changepoints.current(store, machine, changepoints.Settings.of(policies), newest,
                                **where)  # fmt: skip
