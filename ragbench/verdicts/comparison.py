"""One comparison of two sets of cells under the policies: each cell of head judged against
base (``compare``), from samples measured in the same job, and what a cell needs to pass
(``RULE``: the rule of evidence, in ``evidence``). The gate (which re-measures what it flags:
``ragbench.gate.remeasure``), the paired comparison (``ragbench.gate.paired``), ``versions``
and ``bisect`` judge cells with it; main's history is ``ragbench.history.series``.
"""

from __future__ import annotations

import json
import math
import statistics
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

from .. import stats
from ..policies import STATISTICAL, Policies, Policy
from ..store import FAILED, Store, param_key
from .evidence import (
    WELCH,
    Key,
    Verdict,
    across_processes,
    bad_change,
    by_interval,
    by_summary,
    by_threshold,
    evidence,
    ratio_of,
    threshold_of,
    usable,
)
from .status import FAILING, Headline, Status


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
    # (mean, standard deviation, rounds) where every run kept only its summary (a
    # pytest-benchmark run saved without its rounds' data), over several runs combined
    summary: stats.Summary | None = None

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
            into.summary = combine(into.summary, cell.summary)
        else:
            out[cell.key] = Cell(cell.benchmark, cell.metric, cell.param_key, cell.params,
                                 cell.unit, list(cell.samples), cell.failures,
                                 cell.absent, cell.ci, cell.summary)  # fmt: skip
    return out


def combine(a: stats.Summary | None, b: stats.Summary | None) -> stats.Summary | None:
    """The summary of two summaries' timings together (exact: the pooled mean, and the sum of
    squares within and between them); None where either is missing."""
    if a is None or b is None:
        return None
    (ma, sa, na), (mb, sb, nb) = a, b
    n = na + nb
    mean = (na * ma + nb * mb) / n
    squares = (na - 1) * sa**2 + (nb - 1) * sb**2 + na * (ma - mean) ** 2 + nb * (mb - mean) ** 2
    return (mean, math.sqrt(squares / (n - 1)), n)


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


def compare(
    base: dict[Key, Cell], head: dict[Key, Cell], policies: Policies, detail: bool = True
) -> Comparison:
    """Every cell of head judged against base under ``policies``. ``detail=False`` skips the
    bootstrap intervals and the smallest detectable slowdown of flagged cells (the verdicts
    stay the same). A ``paired`` metric fails here only beyond ``CROSS_PROCESS`` and is
    inconclusive otherwise (``ragbench.gate.paired`` judges it)."""
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
            v.ratio = ratio_of(v.head, v.base)
            v.change = bad_change(v.ratio, lower)
            need = min_samples(policy, policies)
            fewest = min(len(b.samples), len(h.samples))
            if (fewest < need or fewest < 2) and b.ci and h.ci:  # too few for the test
                by_interval(v, b.ci, h.ci)
            elif (fewest < need or fewest < 2) and usable(b.summary) and usable(h.summary):
                v.method = WELCH  # no raw samples: the summaries' own test, beside the others'
                v.base, v.head = b.summary[0], h.summary[0]  # the means it compares, shown
                v.ratio = ratio_of(h.summary[0], b.summary[0])
                v.change = bad_change(v.ratio, lower)
                v.p = stats.welch(b.summary, h.summary)
                v.interval = stats.summary_ratio_interval(b.summary, h.summary, confidence=conf)
                tested.append(v)
            elif fewest < need:
                v.status = Status.INCONCLUSIVE
                v.note = too_few(len(b.samples), len(h.samples), need,
                                 summaries=bool(b.summary or h.summary))  # fmt: skip
            elif fewest >= 2:
                v.p = stats.mann_whitney(b.samples, h.samples)[1]
                if detail:
                    v.interval = stats.ratio_interval(
                        b.samples, h.samples, confidence=conf, resamples=resamples
                    )
                tested.append(v)
            else:  # one value a side, where the policy asks no more: the threshold decides
                v.status = by_threshold(v.change, threshold_of(policy), significant=True)
                if not across_processes(v) and v.status == Status.UNCHANGED:
                    evidence(v, None)
        out.verdicts.append(v)
    adjusted = stats.holm([v.p for v in tested])
    for v, p_adj in zip(tested, adjusted, strict=True):
        v.p_adj = p_adj
        v.status = by_threshold(v.change, threshold_of(v.policy), significant=p_adj < alpha)
        if across_processes(v) or (v.status != Status.UNCHANGED and not detail):
            continue
        b, h = base[v.key], head[v.key]
        lower = v.policy.kind == "latency"
        if v.method == WELCH:
            by_summary(v, b.summary, h.summary, alpha / len(tested), conf)
            continue
        v.detectable = stats.min_detectable(
            b.samples, h.samples, alpha / len(tested), v.policy.threshold, lower
        )
        if v.status == Status.UNCHANGED:
            if v.interval is None and v.detectable > v.policy.threshold:  # judged by it
                v.interval = stats.ratio_interval(
                    b.samples, h.samples, confidence=conf, resamples=resamples
                )
            evidence(v, v.detectable, name=f"{conf:.0%} interval")
    return out


# Below 5 values a side, Mann-Whitney at alpha 0.01 can never be significant (5 and 5: the
# smallest two-sided p is 2 / C(10, 5) = 0.008; 4 and 4: 0.029), so such a cell could never
# fail: it never passes either. ``min_samples`` in a policy or in [gate] overrides it.
MIN_SAMPLES = 5


def min_samples(policy: Policy, policies: Policies) -> int:
    """The values a side needs before a cell of ``policy`` is judged at all."""
    if policy.min_samples is not None:
        return int(policy.min_samples)
    return int(policies.gate.get("min_samples", MIN_SAMPLES))


def too_few(n_base: int, n_head: int, need: int, summaries: bool = False) -> str:
    """``summaries``: kept instead of raw samples (pytest-benchmark's mean, spread and rounds),
    and none that a test can use (``evidence.usable``): a mean of 0, or one round."""
    also = ", and summaries no test can use (a mean of 0, or one round)" if summaries else ""
    return (
        f"too few samples ({n_base} base, {n_head} head; the policy needs {need} a side){also}: "
        "measure again"
    )


def _limit(policy: Policy, cell: Cell, side: dict[Key, Cell],
           base: dict[Key, Cell] | None = None) -> float | None:  # fmt: skip
    """The upper bound for ``cell``, widened by ``relative_to``: by the reference cell of the
    same run (``side``); the reference cell itself by its own value on ``base`` (never by
    itself: a broken reference would excuse itself and widen every other cell's bound); with
    no value on base (a history's first commit, a cell that failed there) to ``factor`` x
    ``max``: the fixed ``max`` alone is below what it measures (padded_full 0.006-0.010
    against 0.007), and no bound at all would let a broken reference widen the others'."""
    limit = policy.max
    rel = policy.relative_to
    if limit is None or not rel or cell.params.get(rel["param"]) is None:
        return limit
    if _is_reference(policy, cell):
        ref = (base or {}).get(cell.key)
        if ref is None or ref.median is None:
            return float(rel.get("factor", 1.0)) * limit
    else:
        ref_params = {**cell.params, rel["param"]: rel["value"]}
        ref = side.get((cell.benchmark, cell.metric, param_key(ref_params)))
    if ref is not None and ref.median is not None:
        limit = max(limit, float(rel.get("factor", 1.0)) * ref.median)
    return limit


def _is_reference(policy: Policy, cell: Cell) -> bool:
    """Whether ``cell`` is the reference its relative bound widens the others' by."""
    rel = policy.relative_to
    return bool(rel) and cell.params.get(rel["param"]) == rel["value"]


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
    b = base.get(v.key)
    why = _violates(policy, h, head, base)
    if why is None:
        v.status = Status.UNCHANGED
        return
    v.note = why
    v.status = Status.VIOLATION
    if b is None or b.median is None or _violates(policy, b, base) is None:
        return
    worse = (policy.max is not None and h.median > b.median) or (
        policy.min is not None and h.median < b.median
    )
    if not worse:
        v.status = Status.PRE_EXISTING


def cells(store: Store, run_ids: list[str]) -> dict[Key, Cell]:
    """Each cell's samples pooled over the runs (one value a run where asv kept none), the
    runs where it failed, and the runs that have no row of it."""
    rows = store.measurements(run_ids)
    pooled = pool(
        Cell(row["benchmark"], row["metric"], row["param_key"], json.loads(row["params"]),
             row["unit"], _samples(row), failures=int(row["status"] == FAILED),
             ci=(row["ci_99_a"], row["ci_99_b"]) if row["ci_99_a"] is not None else None,
             summary=_summary(row))
        for row in rows
    )  # fmt: skip
    seen = Counter((r["benchmark"], r["metric"], r["param_key"]) for r in rows)
    runs = len(set(run_ids))
    for key, cell in pooled.items():
        cell.absent = runs - seen[key]
    return pooled


def _summary(row: dict) -> stats.Summary | None:
    """A row's (mean, standard deviation, rounds) where it kept those and no raw samples."""
    if row["samples"] or row["status"] == FAILED:
        return None
    values = (row.get("mean"), row.get("stddev"), row.get("stats_repeat"))
    return None if None in values else (float(values[0]), float(values[1]), int(values[2]))


def _samples(row: dict) -> list[float]:
    if row["status"] == FAILED:
        return []
    return list(row["samples"]) if row["samples"] else [row["median"]]
