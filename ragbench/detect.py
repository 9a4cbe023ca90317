"""Regression detection: the pull-request comparison and the main-branch history.

``compare`` judges head against base from samples measured in the same job (``ragbench gate``),
``history`` judges the newest run of each series on main against its lookback and marks the
change points of the whole series. The per-metric rules are in ``policies.toml``.
"""

from __future__ import annotations

import fnmatch
import json
import math
import statistics
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import stats
from .store import param_key

POLICIES = Path(__file__).with_name("policies.toml")
STATISTICAL = ("latency", "throughput")


@dataclass(frozen=True)
class Policy:
    match: str
    kind: str  # latency | throughput | bound | hash | info
    threshold: float = 0.0
    max: float | None = None
    min: float | None = None
    relative_to: dict | None = None


@dataclass(frozen=True)
class Policies:
    rules: tuple[Policy, ...]
    gate: dict
    main: dict

    def for_metric(self, benchmark: str, metric: str) -> Policy:
        name = f"{benchmark}.{metric}"
        for rule in self.rules:
            if fnmatch.fnmatchcase(name, rule.match):
                return rule
        return Policy("*", "info")


def load_policies(path: Path | None = None) -> Policies:
    """The policies file (default: the one shipped with ragbench); ValueError if malformed."""
    path = Path(path) if path else POLICIES
    try:
        data = tomllib.loads(path.read_text())
        rules = tuple(Policy(**p) for p in data.get("policy", []))
    except (OSError, tomllib.TOMLDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: not a valid policies file ({exc})") from None
    for rule in rules:
        if rule.kind not in (*STATISTICAL, "bound", "hash", "info"):
            raise ValueError(f"{path}: unknown kind {rule.kind!r} for {rule.match!r}")
    return Policies(rules, data.get("gate", {}), data.get("main", {}))


Key = tuple[str, str, str]  # (benchmark, metric, param_key)


@dataclass
class Cell:
    """One benchmark cell's metric on one side of a comparison: samples pooled over runs."""

    benchmark: str
    metric: str
    param_key: str
    params: dict
    unit: str | None
    samples: list[float]  # raw samples, or the runs' single values

    @property
    def key(self) -> Key:
        return (self.benchmark, self.metric, self.param_key)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def pool(cells: Iterable[Cell]) -> dict[Key, Cell]:
    """One cell per key, the samples of its runs pooled in order."""
    out: dict[Key, Cell] = {}
    for cell in cells:
        if cell.key in out:
            out[cell.key].samples.extend(cell.samples)
        else:
            out[cell.key] = Cell(cell.benchmark, cell.metric, cell.param_key, cell.params,
                                 cell.unit, list(cell.samples))  # fmt: skip
    return out


@dataclass
class Verdict:
    """The judgement of one cell. ``change`` is the relative change in the bad direction
    (+0.05: 5% slower or 5% less throughput); ``status`` one of regression, improvement,
    unchanged, violation, pre-existing, hash-changed, missing-base, missing-head, info."""

    key: Key
    params: dict
    unit: str | None
    policy: Policy
    status: str
    base: float | None = None
    head: float | None = None
    ratio: float | None = None  # head / base
    change: float | None = None
    interval: tuple[float, float] | None = None
    p: float | None = None
    p_adj: float | None = None
    detectable: float | None = None
    note: str = ""
    rechecked: bool = False


@dataclass
class Comparison:
    verdicts: list[Verdict] = field(default_factory=list)
    alpha: float = 0.01

    def by_status(self, *status: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.status in status]

    @property
    def failed(self) -> bool:
        return bool(self.by_status("regression", "violation"))


def _bad_change(ratio: float, lower_better: bool) -> float:
    return ratio - 1 if lower_better else 1 / ratio - 1


def compare(
    base: dict[Key, Cell], head: dict[Key, Cell], policies: Policies, detail: bool = True
) -> Comparison:
    """Every cell of head judged against base under ``policies``. ``detail=False`` skips the
    bootstrap intervals and the smallest detectable slowdowns (the verdicts stay the same)."""
    alpha = float(policies.gate.get("alpha", 0.01))
    conf = float(policies.gate.get("confidence", 0.95))
    resamples = int(policies.gate.get("resamples", 1000))
    out = Comparison(alpha=alpha)
    tested: list[Verdict] = []
    for key in sorted(set(base) | set(head)):
        b, h = base.get(key), head.get(key)
        cell = h or b
        policy = policies.for_metric(cell.benchmark, cell.metric)
        v = Verdict(key, cell.params, cell.unit, policy, "info")
        v.base = b.median if b else None
        v.head = h.median if h else None
        if policy.kind == "info":
            pass
        elif policy.kind == "bound":
            if h is None:
                v.status = "missing-head"
            else:
                _bound(v, policy, h, head, b)
        elif b is None:
            v.status = "missing-base"
        elif h is None:
            v.status = "missing-head"
        elif policy.kind == "hash":
            v.status = "hash-changed" if v.base != v.head else "unchanged"
        else:
            lower = policy.kind == "latency"
            v.ratio = v.head / v.base if v.base else math.inf
            v.change = _bad_change(v.ratio, lower)
            if len(b.samples) >= 2 and len(h.samples) >= 2:
                v.p = stats.mann_whitney(b.samples, h.samples)[1]
                if detail:
                    v.interval = stats.ratio_interval(
                        b.samples, h.samples, confidence=conf, resamples=resamples
                    )
                tested.append(v)
            else:  # one value a side (e.g. peak memory): the threshold alone decides
                v.status = _by_threshold(v.change, policy.threshold, significant=True)
        out.verdicts.append(v)
    adjusted = stats.holm([v.p for v in tested])
    for v, p_adj in zip(tested, adjusted, strict=True):
        v.p_adj = p_adj
        v.status = _by_threshold(v.change, v.policy.threshold, significant=p_adj < alpha)
        if not detail:
            continue
        b, h = base[v.key], head[v.key]
        lower = v.policy.kind == "latency"
        v.detectable = stats.min_detectable(
            b.samples, h.samples, alpha / len(tested), v.policy.threshold, lower
        )
    return out


def _by_threshold(change: float | None, threshold: float, significant: bool) -> str:
    """regression / improvement / unchanged for a change in the bad direction (+0.05: 5%
    worse) that ``significant`` says is real."""
    if significant and change is not None and change > threshold:
        return "regression"
    if significant and change is not None and -change / (1 + change) > threshold:
        return "improvement"
    return "unchanged"


def _limit(policy: Policy, cell: Cell, side: dict[Key, Cell]) -> float | None:
    """The upper bound for ``cell``, widened by ``relative_to`` from the same run."""
    limit = policy.max
    rel = policy.relative_to
    if limit is not None and rel and cell.params.get(rel["param"]) is not None:
        ref_params = {**cell.params, rel["param"]: rel["value"]}
        ref = side.get((cell.benchmark, cell.metric, param_key(ref_params)))
        if ref is not None:
            limit = max(limit, float(rel.get("factor", 1.0)) * ref.median)
    return limit


def _violates(policy: Policy, cell: Cell, side: dict[Key, Cell]) -> str | None:
    value = cell.median
    limit = _limit(policy, cell, side)
    if limit is not None and value >= limit:
        return f"{value:.4g} >= bound {limit:.4g}"
    if policy.min is not None and value < policy.min:
        return f"{value:.4g} < bound {policy.min:.4g}"
    return None


def _bound(v: Verdict, policy: Policy, h: Cell, head: dict, b: Cell | None) -> None:
    """A deterministic bound: fails on head, unless base (same job) breaks it too."""
    why = _violates(policy, h, head)
    if why is None:
        v.status = "unchanged"
        return
    v.note = why
    v.status = "violation"
    if b is not None and _violates(policy, b, {}) is not None:
        v.status = "pre-existing"


# --- main: lookback and change points ------------------------------------------------------


@dataclass
class Point:
    """One run of a series, in commit order."""

    commit_hash: str
    commit_time: object
    value: float
    env_key: str | None
    env: dict  # the ENV_FIELDS of the run, to say what changed


@dataclass
class SeriesReport:
    key: Key
    params: dict
    unit: str | None
    points: list[Point]
    change_points: list[int]  # indices of points where a new segment starts
    env_changes: list[int]  # those change points where the environment changed too
    latest_z: float | None = None
    latest_change: float | None = None
    status: str = "unchanged"  # regression | improvement | unchanged | short | env-change

    def describe_change(self, i: int) -> str:
        a, b = self.points[i - 1].env, self.points[i].env
        moved = [f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(a) if a.get(k) != b.get(k)]
        return ", ".join(moved) or "same environment"


def history(points: list[Point], key: Key, params: dict, unit: str | None,
            policies: Policies, change_points: bool = True) -> SeriesReport:  # fmt: skip
    """Judge the newest point against the lookback (same environment) and find change points
    (``change_points=False`` skips them: the lookback alone is cheap)."""
    conf = policies.main
    cps = (
        stats.e_divisive(
            [p.value for p in points],
            alpha=float(conf.get("changepoint_alpha", 0.01)),
            permutations=int(conf.get("permutations", 199)),
            min_size=int(conf.get("min_size", 3)),
        )
        if change_points
        else []
    )
    env_changes = [i for i in cps if points[i].env_key != points[i - 1].env_key]
    rep = SeriesReport(key, params, unit, points, cps, env_changes)
    policy = policies.for_metric(key[0], key[1])
    if policy.kind not in STATISTICAL or len(points) < 2:
        rep.status = "short" if policy.kind in STATISTICAL else "info"
        return rep
    latest = points[-1]
    same_env = [p.value for p in points[:-1] if p.env_key == latest.env_key]
    lookback = same_env[-int(conf.get("lookback", 10)) :]
    if len(lookback) < int(conf.get("min_size", 3)):
        rep.status = "env-change" if len(same_env) < len(points) - 1 else "short"
        return rep
    lower = policy.kind == "latency"
    rep.latest_z = stats.robust_z(lookback, latest.value)
    ratio = latest.value / statistics.median(lookback)
    rep.latest_change = _bad_change(ratio, lower)
    beyond = abs(rep.latest_z) > float(conf.get("mad_k", 5.0))
    rep.status = _by_threshold(rep.latest_change, policy.threshold, significant=beyond)
    return rep


def histories(rows: list[dict], policies: Policies, last: int = 200,
              change_points: bool = True) -> list[SeriesReport]:  # fmt: skip
    """Series reports from ``Store.series`` rows (one machine): one point per commit and
    environment (the median over its runs), in commit order, the newest ``last`` commits."""
    from .store import ENV_FIELDS

    grouped: dict[Key, dict[tuple, list[dict]]] = {}
    for row in rows:
        if row["median"] is None:
            continue
        key = (row["benchmark"], row["metric"], row["param_key"])
        grouped.setdefault(key, {}).setdefault((row["commit_hash"], row["env_key"]), []).append(row)
    reports = []
    for key, by_commit in sorted(grouped.items()):
        policy = policies.for_metric(key[0], key[1])
        if policy.kind in ("info", "hash"):
            continue
        points = []
        for (commit, env), runs in by_commit.items():  # rows arrive in commit order
            points.append(Point(
                commit, runs[0]["commit_time"], statistics.median(r["median"] for r in runs),
                env, {k: runs[0].get(k) for k in ENV_FIELDS},
            ))  # fmt: skip
        first = next(iter(by_commit.values()))[0]
        reports.append(history(points[-last:], key, json.loads(first["params"]), first["unit"],
                               policies, change_points))  # fmt: skip
    return reports
