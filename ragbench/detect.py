"""Regression detection: the pull-request comparison and the main-branch history.

``compare`` judges head against base from samples measured in the same job (``ragbench gate``),
``history`` judges the newest run of each series on main against its lookback and marks the
change points of the whole series. The per-metric rules are in ``policies.toml``.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import statistics
import tomllib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from . import changepoints, jsonfile, stats
from .store import FAILED, Store, param_key
from .verdicts import FAILING, Headline, Status

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
    paired: bool = False  # includes host time: judged from base and head in one process
    history_only: bool = False  # judged on main's history, shown but never gated in a PR
    min_samples: int | None = None  # a side needs this many to be judged ([gate] min_samples)
    metric: str = "*"  # a glob of the metric's own name (``time_*``: asv's time benchmarks)
    unit: tuple[str, ...] | None = None  # only metrics of these units (globs); None: any

    def applies(self, benchmark: str, metric: str, unit: str | None) -> bool:
        """Whether this rule judges ``benchmark.metric`` of ``unit``."""
        if not (fnmatch.fnmatchcase(f"{benchmark}.{metric}", self.match)
                and fnmatch.fnmatchcase(metric, self.metric)):  # fmt: skip
            return False
        return self.unit is None or (
            unit is not None and any(fnmatch.fnmatchcase(unit, u) for u in self.unit)
        )


@dataclass(frozen=True)
class Policies:
    rules: tuple[Policy, ...]
    gate: dict
    main: dict

    # ``[machines]``: runner-name glob -> machine, first match (hosted CI runners, each named
    # after its node, are one machine)
    machines: dict[str, str] = field(default_factory=dict)

    def machine(self, runner: str) -> str:
        """The machine a runner's results belong to (``[machines]``), else its own name."""
        return next((m for p, m in self.machines.items() if fnmatch.fnmatchcase(runner, p)), runner)

    def for_metric(self, benchmark: str, metric: str, unit: str | None = None) -> Policy:
        """The first rule that applies to ``benchmark.metric`` of ``unit`` (None: unknown, and
        no rule that names units applies); ``info`` where none does."""
        rules = (r for r in self.rules if r.applies(benchmark, metric, unit))
        return next(rules, Policy("*", "info"))


def load_policies(path: Path | None = None) -> Policies:
    """The policies file (default: the one shipped with ragbench); ValueError if malformed."""
    path = Path(path) if path else POLICIES
    try:
        data = tomllib.loads(jsonfile.read_text(path, limit=2**20))
        rules = tuple(_rule(p) for p in data.get("policy", []))
    except (ValueError, tomllib.TOMLDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: not a valid policies file ({exc})") from None
    for rule in rules:
        if rule.kind not in (*STATISTICAL, "bound", "hash", "info"):
            raise ValueError(f"{path}: unknown kind {rule.kind!r} for {rule.match!r}")
    machines = data.get("machines", {})
    if not isinstance(machines, dict) or not all(isinstance(v, str) and v
                                                 for v in machines.values()):  # fmt: skip
        raise ValueError(f"{path}: [machines] maps runner-name patterns to machine names "
                         '(\'"fv-az*" = "github-ubuntu"\')')  # fmt: skip
    return Policies(rules, data.get("gate", {}), data.get("main", {}), machines)


def _rule(entry: dict) -> Policy:
    """One ``[[policy]]``; TypeError when a field is unknown or ``unit`` no list of texts."""
    if not isinstance(entry, dict):
        raise TypeError(f"a [[policy]] must be a table, not {str(entry)[:40]!r}")
    unit = entry.get("unit")
    if unit is not None:
        if not isinstance(unit, list) or not all(isinstance(u, str) for u in unit):
            raise TypeError(f"unit of {entry.get('match')!r} must be a list of texts")
        entry = {**entry, "unit": tuple(unit)}
    return Policy(**entry)


Key = tuple[str, str, str]  # (benchmark, metric, param_key)
SIDES = ("base", "head")


@dataclass
class Cell:
    """One benchmark cell's metric on one side of a comparison: samples pooled over runs, how
    many of those runs failed there (the benchmark raised: no value), how many had none, and
    asv's 99% confidence interval of the value where every run has one (over several runs:
    the hull of theirs, wider than any, so never more sure than asv was)."""

    benchmark: str
    metric: str
    param_key: str
    params: dict
    unit: str | None
    samples: list[float]  # raw samples, or the runs' single values
    failures: int = 0
    absent: int = 0  # runs of this side that have no row of it (NaN or skipped there)
    ci: tuple[float, float] | None = None  # (ci_99_a, ci_99_b)

    @property
    def key(self) -> Key:
        return (self.benchmark, self.metric, self.param_key)

    @property
    def median(self) -> float | None:
        return statistics.median(self.samples) if self.samples else None


def pool(cells: Iterable[Cell]) -> dict[Key, Cell]:
    """One cell per key, the samples of its runs pooled in order, their failures and runs
    without a value counted."""
    out: dict[Key, Cell] = {}
    for cell in cells:
        if cell.key in out:
            into = out[cell.key]
            into.samples.extend(cell.samples)
            into.failures += cell.failures
            into.absent += cell.absent
            into.ci = (
                (min(into.ci[0], cell.ci[0]), max(into.ci[1], cell.ci[1]))
                if into.ci and cell.ci else None
            )  # fmt: skip
        else:
            out[cell.key] = Cell(cell.benchmark, cell.metric, cell.param_key, cell.params,
                                 cell.unit, list(cell.samples), cell.failures,
                                 cell.absent, cell.ci)  # fmt: skip
    return out


@dataclass
class Verdict:
    """The judgement of one cell. ``change`` is the relative change in the bad direction
    (+0.05: 5% slower or 5% less throughput); ``status`` one of regression, improvement,
    unchanged, violation, pre-existing, hash-changed, failed (the benchmark raised on head),
    missing (base has a value, head none), new (head has a value, base none), inconclusive
    (the samples could not have shown a change of the threshold, or were too noisy), info.
    ``method``: asv (runs of each side, pooled), interval (too few raw samples: asv's 99%
    confidence intervals, ``by_interval``), paired or processes (``ragbench.paired``)."""

    key: Key
    params: dict
    unit: str | None
    policy: Policy
    status: Status
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
    method: str = "asv"
    aa: float | None = None  # a paired cell's A/A arm: how far base moved against itself


@dataclass
class Comparison:
    verdicts: list[Verdict] = field(default_factory=list)
    alpha: float = 0.01

    def by_status(self, *status: str) -> list[Verdict]:
        return [v for v in self.verdicts if v.status in status]

    @property
    def failed(self) -> bool:
        return bool(self.by_status(*FAILING))

    def gated(self) -> list[Verdict]:
        """The statistically judged cells that have a value on both sides."""
        return [
            v for v in self.verdicts
            if v.policy.kind in STATISTICAL and not v.policy.history_only
            and v.base is not None and v.head is not None
        ]  # fmt: skip

    def judged(self) -> list[Verdict]:
        """The cells the policies gate that were judged: the statistical ones with a value on
        both sides and the deterministic bounds with a value on head."""
        bounds = [v for v in self.verdicts if v.policy.kind == "bound" and v.head is not None]
        return self.gated() + bounds

    @property
    def inconclusive(self) -> bool:
        """Some cell has no evidence either way, or nothing at all was judged: no pass."""
        return bool(self.by_status(Status.INCONCLUSIVE)) or not self.judged()

    @property
    def headline(self) -> Headline:
        return (
            Headline.FAIL
            if self.failed
            else Headline.INCONCLUSIVE
            if self.inconclusive
            else Headline.PASS
        )


def _ratio(head: float, base: float) -> float:
    """head / base, with 0 / 0 = 1 and x / 0 = inf."""
    if base == 0:
        return 1.0 if head == 0 else math.inf
    return head / base


def _bad_change(ratio: float, lower_better: bool) -> float:
    """The relative change in the bad direction: +0.1 is 10% slower, or 10% less throughput
    (inf: all of it lost)."""
    if lower_better:
        return ratio - 1
    return math.inf if ratio == 0 else 1 / ratio - 1


def compare(
    base: dict[Key, Cell], head: dict[Key, Cell], policies: Policies, detail: bool = True
) -> Comparison:
    """Every cell of head judged against base under ``policies``. ``detail=False`` skips the
    bootstrap intervals and the smallest detectable slowdown of flagged cells (the verdicts
    stay the same). A ``paired`` metric fails here only beyond ``CROSS_PROCESS`` and is
    inconclusive otherwise (``ragbench.paired`` judges it)."""
    alpha = float(policies.gate.get("alpha", 0.01))
    conf = float(policies.gate.get("confidence", 0.95))
    resamples = int(policies.gate.get("resamples", 1000))
    out = Comparison(alpha=alpha)
    tested: list[Verdict] = []
    for key in sorted(set(base) | set(head)):
        b, h = base.get(key), head.get(key)
        cell = h or b
        policy = policies.for_metric(cell.benchmark, cell.metric, cell.unit)
        v = Verdict(key, cell.params, cell.unit, policy, Status.INFO)
        v.base = b.median if b else None
        v.head = h.median if h else None
        if h is not None and h.failures:  # the benchmark raised on head: never a pass
            v.status = Status.FAILED
            v.note = f"raised in {h.failures} head run(s)" + (
                f", and in {b.failures} base run(s)" if b is not None and b.failures else ""
            )
        elif h is not None and h.absent and v.base is not None:  # a NaN in some head run
            v.status = Status.MISSING
            v.note = f"no value in {h.absent} of the head runs (NaN or skipped there)"
        elif v.head is None and v.base is None:  # failed on base, no value on head either
            v.status = Status.UNCHANGED
            v.note = "no value on either side (failed on base)"
        elif v.head is None:  # whatever the kind: a NaN is no measurement
            v.status = Status.MISSING
            v.note = "no value on head: NaN, skipped, or no longer measured"
        elif policy.kind == "info":
            pass
        elif policy.history_only:
            v.note = "tracked on main's history; not calibrated for pull requests"
        elif policy.kind == "bound":
            _bound(v, policy, h, head, base)
        elif v.base is None:
            v.status = Status.NEW
            v.note = "failed on base" if b is not None else ""
        elif policy.kind == "hash":
            v.status = Status.HASH_CHANGED if v.base != v.head else Status.UNCHANGED
        elif policy.kind == "latency" and v.head == 0 < v.base:
            v.status = Status.MISSING
            v.note = "a latency of 0 on head: nothing was measured"
        else:
            lower = policy.kind == "latency"
            v.ratio = _ratio(v.head, v.base)
            v.change = _bad_change(v.ratio, lower)
            need = min_samples(policy, policies)
            fewest = min(len(b.samples), len(h.samples))
            if (fewest < need or fewest < 2) and b.ci and h.ci:  # too few for the test
                by_interval(v, b.ci, h.ci)
            elif fewest < need:
                v.status = Status.INCONCLUSIVE
                v.note = too_few(len(b.samples), len(h.samples), need)
            elif fewest >= 2:
                v.p = stats.mann_whitney(b.samples, h.samples)[1]
                if detail:
                    v.interval = stats.ratio_interval(
                        b.samples, h.samples, confidence=conf, resamples=resamples
                    )
                tested.append(v)
            else:  # one value a side, where the policy asks no more: the threshold decides
                v.status = _by_threshold(v.change, _threshold(policy), significant=True)
                if not _across_processes(v) and v.status == Status.UNCHANGED:
                    evidence(v, None)
        out.verdicts.append(v)
    adjusted = stats.holm([v.p for v in tested])
    for v, p_adj in zip(tested, adjusted, strict=True):
        v.p_adj = p_adj
        v.status = _by_threshold(v.change, _threshold(v.policy), significant=p_adj < alpha)
        if _across_processes(v) or (v.status != Status.UNCHANGED and not detail):
            continue
        b, h = base[v.key], head[v.key]
        lower = v.policy.kind == "latency"
        v.detectable = stats.min_detectable(
            b.samples, h.samples, alpha / len(tested), v.policy.threshold, lower
        )
        if v.status == Status.UNCHANGED:
            evidence(v, v.detectable)
    return out


# --- the rule of evidence: what a cell needs to pass ----------------------------------------

RULE = (
    "PASS only when every gated cell showed, with the power to see its threshold, that it did "
    "not get worse, or stayed within half its threshold on the point estimate shown (with "
    "enough samples that the test could have flagged it); a cell without that evidence is "
    "inconclusive, and so is the run (exit 1)."
)

INTERVAL = "interval"  # Verdict.method of a cell judged by asv's confidence intervals


def by_interval(v: Verdict, base_ci: tuple[float, float], head_ci: tuple[float, float]) -> None:
    """Judge ``v`` (its ``change`` set) from asv's 99% confidence intervals of base's and
    head's values, where a side has too few raw samples for the test: as ``asv compare`` does
    (asv's ``_stats.is_different``), the change is significant only when the two intervals do
    not overlap, and then counts beyond the threshold. Per cell, as asv has it: no correction
    over the cells of the run (asv puts such a test's p between 0.00027 and 0.01).

    ``interval``: the head/base ratios both intervals allow; ``detectable``: the smallest
    change in the bad direction that would have separated intervals as wide as these (never
    below the threshold, as ``stats.min_detectable``). So ``evidence`` applies as to tested
    cells: unchanged with power when that is within the threshold, else only within half of
    it on the point estimate, else inconclusive (``RULE``)."""
    (b_lo, b_hi), (h_lo, h_hi) = base_ci, head_ci
    v.method = INTERVAL
    # a bound at or below 0 (asv's, from few samples) allows any ratio on that side
    v.interval = (max(h_lo, 0) / b_hi if b_hi > 0 else 0.0, h_hi / b_lo if b_lo > 0 else math.inf)
    different = h_lo > b_hi or h_hi < b_lo
    v.note = "no raw samples: asv's 99% intervals " + (
        "do not overlap" if different else "overlap (not significant)"
    )
    if v.policy.kind == "latency":  # head slowed by d: its interval starts at h_lo/h * b(1+d)
        need = (b_hi * v.head) / (h_lo * v.base) if h_lo > 0 and v.base else math.inf
    else:  # head's throughput cut by 1/(1+d): its interval ends at h_hi/h * b/(1+d)
        need = (h_hi * v.base) / (v.head * b_lo) if b_lo > 0 and v.head else math.inf
    v.detectable = max(need - 1, v.policy.threshold)
    v.status = _by_threshold(v.change, _threshold(v.policy), significant=different)
    if not _across_processes(v) and v.status == Status.UNCHANGED:
        evidence(v, v.detectable)


# Below 5 values a side, Mann-Whitney at alpha 0.01 can never be significant (5 and 5: the
# smallest two-sided p is 2 / C(10, 5) = 0.008; 4 and 4: 0.029), so such a cell could never
# fail: it never passes either. ``min_samples`` in a policy or in [gate] overrides it.
MIN_SAMPLES = 5


def min_samples(policy: Policy, policies: Policies) -> int:
    """The values a side needs before a cell of ``policy`` is judged at all."""
    if policy.min_samples is not None:
        return int(policy.min_samples)
    return int(policies.gate.get("min_samples", MIN_SAMPLES))


def too_few(n_base: int, n_head: int, need: int) -> str:
    return (
        f"too few samples ({n_base} base, {n_head} head; the policy needs {need} a side): "
        "measure again"
    )


def evidence(v: Verdict, detectable: float | None) -> None:
    """An ``unchanged`` verdict keeps its word only with evidence: ``detectable`` (the
    smallest change these samples could flag; None: one value a side, the threshold alone
    flags) within the threshold, or a point estimate within half the threshold from samples
    that could have flagged some change, against a base that is not 0. Else inconclusive."""
    t = v.policy.threshold
    if detectable is not None and detectable <= t:
        return
    can_flag = detectable is None or math.isfinite(detectable)
    power = (
        "one value a side" if detectable is None
        else f"could detect only {detectable * 100:.0f}%" if can_flag
        else "too few samples to detect any change"
    )  # fmt: skip
    if can_flag and v.change is not None and v.change <= t / 2 and v.base:
        v.note = _join(v.note, f"{power}; within half the {t * 100:g}% threshold on the point "
                       f"estimate ({v.change * 100:+.1f}%)")  # fmt: skip
        return
    v.status = Status.INCONCLUSIVE
    v.note = _join(v.note, power)


def powered(v: Verdict) -> bool:
    """Whether ``v`` showed, with the power to see its threshold, that it is within it: an
    improvement, or unchanged with a ``detectable`` change within the threshold."""
    if v.status == Status.IMPROVEMENT:
        return True
    detectable = v.detectable if v.detectable is not None else math.inf
    return v.status == Status.UNCHANGED and detectable <= v.policy.threshold


def recheck_keys(c: Comparison) -> list[Key]:
    """The cells a gate measures once more: the regressions, to see them reproduce, and the
    inconclusive cells that runs in separate processes can settle (not the paired ones: only
    ``ragbench.paired`` judges those)."""
    return [
        v.key for v in c.verdicts
        if v.status == Status.REGRESSION
        or (v.status == Status.INCONCLUSIVE and not v.policy.paired)
    ]  # fmt: skip


def remeasured(c: Comparison, first: dict[str, dict[Key, Cell]],
               again: dict[str, dict[Key, Cell]], policies: Policies,
               detail: bool = True) -> int:  # fmt: skip
    """``c`` (of ``first``: ``{"base": cells, "head": cells}``) after the re-measurement
    ``again`` of its ``recheck_keys``, in place. A regression is judged on the re-measurement
    alone (``settle``); an inconclusive cell on the first samples and the new ones pooled.
    -> the number of cells re-measured."""
    keys = recheck_keys(c)
    flagged = {v.key for v in c.verdicts if v.status == Status.REGRESSION}
    thin = set(keys) - flagged
    alone = compare(*({k: again[s][k] for k in flagged & set(again[s])} for s in SIDES),
                    policies, detail)  # fmt: skip
    pooled = compare(*(pool(cell for cells in (first[s], again[s]) for cell in cells.values()
                            if cell.key in thin) for s in SIDES), policies, detail)  # fmt: skip
    by_key = {v.key: v for v in pooled.verdicts}
    judged = {v.key: v for v in alone.verdicts}
    for i, v in enumerate(c.verdicts):
        if v.key in flagged:
            settle(v, judged.get(v.key))
        elif v.key in by_key:
            w = c.verdicts[i] = by_key[v.key]
            w.rechecked = True
            w.note = _join("first and re-measured samples pooled", w.note)
    return len(keys)


def settle(v: Verdict, again: Verdict | None) -> None:
    """A flagged cell after its re-measurement ``again``: it stays a regression unless
    ``again`` shows, with the power to see the threshold, that it is within it (then the
    re-measurement's figures are the cell's); a re-measurement without that power leaves it
    inconclusive, never unchanged."""
    v.rechecked = True
    flagged = f"flagged at {v.change * 100:+.1f}%"
    if again is None:
        v.note = _join(v.note, f"{flagged}; the re-measurement has no value of it")
    elif again.status == Status.REGRESSION:
        v.note = _join(v.note, "reproduced when re-measured")
    elif again.status in FAILING:
        v.status, v.note = again.status, f"{flagged}, then {again.status} when re-measured"
    elif powered(again):
        for name in ("base", "head", "ratio", "change", "interval", "p", "p_adj", "detectable"):
            setattr(v, name, getattr(again, name))
        v.status = Status.UNCHANGED
        v.note = f"{flagged}, then within the threshold when re-measured (figures shown)"
    else:
        v.status = Status.INCONCLUSIVE
        v.note = (f"{flagged}, then re-measured without the power to clear it "
                  f"({again.note or again.status})")  # fmt: skip


def _join(a: str, b: str) -> str:
    return f"{a}; {b}" if a else b


# What runs in separate processes can show of a metric that includes host time: no A/A gate
# run of the asv calibration failed at a 100% threshold (docs/calibration.md). Below that the
# paired comparison (ragbench.paired) judges such a metric.
CROSS_PROCESS = 1.0


def _threshold(policy: Policy) -> float:
    return max(policy.threshold, CROSS_PROCESS) if policy.paired else policy.threshold


def _across_processes(v: Verdict) -> bool:
    """A paired metric judged from separate processes: a regression beyond CROSS_PROCESS
    stands (fail closed), anything else is inconclusive. -> whether ``v`` is such a metric."""
    if not v.policy.paired:
        return False
    if v.status != Status.REGRESSION:
        v.status = Status.INCONCLUSIVE
        v.note = "includes host time: judged only with base and head in one process"
    else:
        v.note = f"beyond the {CROSS_PROCESS:.0%} that separate processes can show"
    return True


def _by_threshold(change: float | None, threshold: float, significant: bool) -> str:
    """regression / improvement / unchanged for a change in the bad direction (+0.05: 5%
    worse) that ``significant`` says is real."""
    if not significant or change is None:
        return Status.UNCHANGED
    if change > threshold:
        return Status.REGRESSION
    if change <= -1 or -change / (1 + change) > threshold:  # -1: all of the cost gone
        return Status.IMPROVEMENT
    return Status.UNCHANGED


def _limit(policy: Policy, cell: Cell, side: dict[Key, Cell],
           base: dict[Key, Cell] | None = None) -> float | None:  # fmt: skip
    """The upper bound for ``cell``, widened by ``relative_to``: by the reference cell of the
    same run (``side``); the reference cell itself by its own value on ``base`` (never by
    itself: a broken reference would excuse itself and widen every other cell's bound)."""
    limit = policy.max
    rel = policy.relative_to
    if limit is None or not rel or cell.params.get(rel["param"]) is None:
        return limit
    if cell.params[rel["param"]] == rel["value"]:
        ref = (base or {}).get(cell.key)
    else:
        ref_params = {**cell.params, rel["param"]: rel["value"]}
        ref = side.get((cell.benchmark, cell.metric, param_key(ref_params)))
    if ref is not None and ref.median is not None:
        limit = max(limit, float(rel.get("factor", 1.0)) * ref.median)
    return limit


def _violates(policy: Policy, cell: Cell, side: dict[Key, Cell],
              base: dict[Key, Cell] | None = None) -> str | None:  # fmt: skip
    value = cell.median
    limit = _limit(policy, cell, side, base)
    if limit is not None and value >= limit:
        return f"{value:.4g} >= bound {limit:.4g}"
    if policy.min is not None and value < policy.min:
        return f"{value:.4g} < bound {policy.min:.4g}"
    return None


def _bound(v: Verdict, policy: Policy, h: Cell, head: dict, base: dict) -> None:
    """A deterministic bound: fails on head, unless base (same job) breaks it too, judged by
    its own run's references, and head is no worse than base."""
    why = _violates(policy, h, head, base)
    if why is None:
        v.status = Status.UNCHANGED
        return
    v.note = why
    v.status = Status.VIOLATION
    b = base.get(v.key)
    if b is None or b.median is None or _violates(policy, b, base) is None:
        return
    worse = (policy.max is not None and h.median > b.median) or (
        policy.min is not None and h.median < b.median
    )
    if not worse:
        v.status = Status.PRE_EXISTING


# --- main: lookback and change points ------------------------------------------------------


@dataclass
class Point:
    """One run of a series, in commit order."""

    commit_hash: str
    commit_time: object
    value: float
    env_key: str | None
    env: dict  # the ENV_FIELDS of the run, to say what changed
    timing: dict = field(default_factory=dict)  # asv's ``number`` and ``repeat`` for the cell


# asv calibrates ``number`` (and ``repeat``) each run unless a benchmark sets it: Django's
# form_clean ran with number 412 to 427 over 400 runs of one environment, and then 1 once the
# project fixed it. A factor of 2 or more is a change of how it is timed, not that jitter.
TIMING_FACTOR = 2


def change_cause(before: Point, after: Point) -> str:
    """What moved between two points of a series besides the code: the environment
    (``environment: torch 2.10.0 -> 2.11.0``), how asv timed the cell (``asv number 100 ->
    10``, by ``TIMING_FACTOR`` or more: another number of calls per sample moves the figure by
    itself: caches, warm-up), both, or ``code`` where neither did."""
    causes = []
    if before.env_key != after.env_key:
        a, b = before.env, after.env
        moved = [f"{k} {a.get(k)} -> {b.get(k)}" for k in sorted(a) if a.get(k) != b.get(k)]
        causes.append("environment: " + (", ".join(moved) or "another environment"))
    a, b = before.timing, after.timing
    timed = [f"{k} {a[k]} -> {b[k]}" for k in ("number", "repeat") if a.get(k) and b.get(k)
             and max(a[k], b[k]) >= TIMING_FACTOR * min(a[k], b[k])]  # fmt: skip
    if timed:
        causes.append("asv " + ", ".join(timed))
    return "; ".join(causes) or "code"


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

    def describe_change(self, i: int) -> str:
        """The cause of the change at point ``i`` (``change_cause``)."""
        return change_cause(self.points[i - 1], self.points[i])


def change_points_of(values, policies: Policies) -> list[int]:
    """E-Divisive change points of ``values`` (oldest first) with the main branch's settings
    in policies.toml, over windows as they are stored (``ragbench.changepoints``): indices
    where a new level starts."""
    return changepoints.change_points(values, changepoints.Settings.of(policies))


def history(points: list[Point], key: Key, params: dict, unit: str | None,
            policies: Policies, change_points: bool = True,
            accepted: Iterable[str] = ()) -> SeriesReport:  # fmt: skip
    """Judge the newest point against the lookback (same environment) and find change points
    (``change_points=False`` skips them: the lookback alone is cheap).

    ``accepted``: commits where a maintainer accepted this cell's change. The lookback starts at
    the newest of them (its level is the new baseline), and a regression of the newest point
    that was accepted reads ``accepted``."""
    conf = policies.main
    policy = policies.for_metric(key[0], key[1], unit)
    cps = (
        change_points_of([p.value for p in points], policies)
        if change_points and not policy.paired  # host time of separate runs: means nothing
        else []
    )
    env_changes = [i for i in cps if points[i].env_key != points[i - 1].env_key]
    accepted = set(accepted)
    rep = SeriesReport(key, params, unit, points, cps, env_changes)
    bounds = [0, *cps, len(points)]
    rep.changes = [Change(i, statistics.median(p.value for p in points[bounds[j] : i]),
                          statistics.median(p.value for p in points[i : bounds[j + 2]]))
                   for j, i in enumerate(cps)]  # fmt: skip
    rep.accepted = [i for i, p in enumerate(points) if p.commit_hash in accepted]
    latest = points[-1]
    start = max((i for i in rep.accepted if i < len(points) - 1), default=0)
    since = points[start:-1]
    same_env = [p.value for p in since if p.env_key == latest.env_key]
    lookback = same_env[-int(conf.get("lookback", 10)) :]
    _judge(rep, policy, conf, lookback, len(same_env) < len(since), len(points))
    return rep


def _judge(rep: SeriesReport, policy: Policy, conf: dict, lookback: list[float],
           env_moved: bool, n: int) -> None:  # fmt: skip
    """The newest point (``rep.points[-1]``, of ``n``) against ``lookback``: the values before
    it in its environment from the newest accepted change on (the newest ``lookback`` of
    them); ``env_moved``: some of those points were of another environment."""
    if policy.paired:
        rep.status = Status.INFO
        return
    if policy.kind not in STATISTICAL or n < 2:
        rep.status = Status.SHORT if policy.kind in STATISTICAL else Status.INFO
        return
    latest = rep.points[-1]
    if len(lookback) < int(conf.get("min_size", 3)):
        rep.status = Status.ENV_CHANGE if env_moved else Status.SHORT
        return
    lower = policy.kind == "latency"
    rep.latest_z = stats.robust_z(lookback, latest.value)
    rep.latest_change = _bad_change(_ratio(latest.value, statistics.median(lookback)), lower)
    beyond = abs(rep.latest_z) > float(conf.get("mad_k", 5.0))
    rep.status = _by_threshold(rep.latest_change, policy.threshold, significant=beyond)
    if rep.status == Status.REGRESSION and len(rep.points) - 1 in rep.accepted:
        rep.status = Status.ACCEPTED


def histories(rows: list[dict], policies: Policies, last: int = 200, change_points: bool = True,
              acceptances: Iterable[dict] = ()) -> list[SeriesReport]:  # fmt: skip
    """Series reports from ``Store.series`` rows (one machine): one point per commit and
    environment (the median over its runs), in commit order, the newest ``last`` commits.
    ``acceptances``: ``Store.acceptances()`` rows (see ``history``). A cell measured in
    several environments of another harness (asv's environment: py3.12 and py3.13) is a series
    per environment."""
    from .store import ENV_FIELDS

    accepted: dict[Key, set[str]] = {}
    for a in acceptances:
        accepted.setdefault((a["benchmark"], a["metric"], a["param_key"]), set()).add(
            a["commit_hash"]
        )
    grouped: dict[tuple[Key, str], dict[tuple, list[dict]]] = {}
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
        policy = policies.for_metric(key[0], key[1], first["unit"])
        if policy.kind in ("info", "hash"):
            continue
        points = []
        for (commit, env), runs in by_commit.items():  # rows arrive in commit order
            points.append(Point(
                commit, runs[0]["commit_time"], statistics.median(r["median"] for r in runs),
                env, {k: runs[0].get(k) for k in ENV_FIELDS},
                {k: runs[0].get(f"stats_{k}") for k in ("number", "repeat")},
            ))  # fmt: skip
        report = history(points[-last:], key, json.loads(first["params"]), first["unit"],
                         policies, change_points, accepted.get(key, ()))  # fmt: skip
        report.environment = environment or None
        reports.append(report)
    return reports


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
    stored change points (``ragbench.changepoints``) of those commits. A series whose stored
    change points are behind its newest point (or missing, or of other settings) has them
    brought up to date here, in memory, from its stored state (``ragbench changepoints``
    stores them). ``series_filter``: benchmark, metric, params. Each report's ``points`` are
    the ones it names: the lookback, the newest, the accepted ones and each change point with
    the point before it."""
    from .store import ENV_FIELDS

    conf = policies.main
    rows = store.lookback(machine, last=last, lookback=int(conf.get("lookback", 10)),
                          **series_filter)  # fmt: skip
    groups = {k: list(g) for k, g in itertools.groupby(rows, key=_series_key)}
    found = _stored_change_points(store, machine, policies, groups) if change_points else {}
    reports = []
    for (environment, *key), group in groups.items():
        key = tuple(key)
        newest = group[-1]
        policy = policies.for_metric(key[0], key[1], newest["unit"])
        if policy.kind in ("info", "hash"):
            continue
        points = {(r["commit_hash"], r["env_key"]): Point(
            r["commit_hash"], r["commit_time"], r["value"], r["env_key"],
            {k: r[k] for k in ENV_FIELDS}) for r in group}  # fmt: skip
        cps = [c for c in found.get((environment, *key), []) if not policy.paired
               and (newest["since"] is None or c["prev_commit_time"] is None
                    or c["prev_commit_time"] >= newest["since"])]  # fmt: skip
        for c in cps:
            for pre in ("prev_", ""):
                points.setdefault((c[f"{pre}commit_hash"], c[f"{pre}env_key"]), Point(
                    c[f"{pre}commit_hash"], c[f"{pre}commit_time"], c[f"{pre}value"],
                    c[f"{pre}env_key"], json.loads(c[f"{pre}env"])))  # fmt: skip
        latest = points.pop((newest["commit_hash"], newest["env_key"]))
        ordered = [*sorted(points.values(), key=_when), latest]
        index = {(p.commit_hash, p.env_key): i for i, p in enumerate(ordered)}
        at = [index[(c["commit_hash"], c["env_key"])] for c in cps]
        rep = SeriesReport(
            key,
            json.loads(newest["params"]),
            newest["unit"],
            ordered,
            at,
            [i for i, c in zip(at, cps, strict=True) if c["env_key"] != c["prev_env_key"]],
            environment=environment,
        )
        rep.changes = [Change(i, c["before"], c["after"]) for i, c in zip(at, cps, strict=True)]
        rep.accepted = sorted(index[(r["commit_hash"], r["env_key"])] for r in group
                              if r["accepted"])  # fmt: skip
        lookback = [r["value"] for r in group if r["in_lookback"]]
        _judge(rep, policy, conf, lookback, newest["same_n"] < newest["since_n"], newest["n"])
        reports.append(rep)
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


def cells(store: Store, run_ids: list[str]) -> dict[Key, Cell]:
    """Each cell's samples pooled over the runs (one value a run where asv kept none), the
    runs where it failed, and the runs that have no row of it."""
    rows = store.measurements(run_ids)
    pooled = pool(
        Cell(row["benchmark"], row["metric"], row["param_key"], json.loads(row["params"]),
             row["unit"], _samples(row), failures=int(row["status"] == FAILED),
             ci=(row["ci_99_a"], row["ci_99_b"]) if row["ci_99_a"] is not None else None)
        for row in rows
    )  # fmt: skip
    seen = Counter((r["benchmark"], r["metric"], r["param_key"]) for r in rows)
    runs = len(set(run_ids))
    for key, cell in pooled.items():
        cell.absent = runs - seen[key]
    return pooled


def _samples(row: dict) -> list[float]:
    if row["status"] == FAILED:
        return []
    return list(row["samples"]) if row["samples"] else [row["median"]]
