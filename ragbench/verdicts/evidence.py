"""One cell's verdict (``Verdict``) and the rule of evidence it passes by (``RULE``): a change
judged against its threshold (``by_threshold``), and the evidence an unchanged cell needs
(``evidence``, ``worst``, ``powered``), where the samples were tested or judged by asv's
intervals (``by_interval``) or by the summaries alone (``by_summary``)."""

from __future__ import annotations

import math
from dataclasses import dataclass

from .. import stats
from ..policies import Policy
from .status import Status

Key = tuple[str, str, str]  # (benchmark, metric, param_key)


@dataclass
class Verdict:
    """The judgement of one cell. ``change`` is the relative change in the bad direction
    (+0.05: 5% slower or 5% less throughput); ``status`` one of regression, improvement,
    unchanged, violation, pre-existing, hash-changed, failed (the benchmark raised on head),
    missing (base has a value, head none), new (head has a value, base none), inconclusive
    (the samples could not have shown a change of the threshold, or were too noisy), info.
    ``method``: asv (runs of each side, pooled), interval (too few raw samples: asv's 99%
    confidence intervals, ``by_interval``), welch (no raw samples, only summaries: Welch's t,
    ``by_summary``), paired or processes (``ragbench.gate.paired``)."""

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


def ratio_of(head: float, base: float) -> float:
    """head / base, with 0 / 0 = 1 and x / 0 = inf."""
    if base == 0:
        return 1.0 if head == 0 else math.inf
    return head / base


def bad_change(ratio: float, lower_better: bool) -> float:
    """The relative change in the bad direction: +0.1 is 10% slower, or 10% less throughput
    (inf: all of it lost)."""
    if lower_better:
        return ratio - 1
    return math.inf if ratio == 0 else 1 / ratio - 1


RULE = (
    "PASS only when every gated cell showed that it did not get worse by its threshold: the "
    "confidence interval of head/base stayed under the threshold at its worse end (for a "
    "host-time cell timed in one process: head against base and base's A/A copy, the interval "
    "widened by how far the A/A arm moved, the two added in quadrature; a cell without evidence "
    "after the gate's processes is measured in as many more and judged on all at a stricter "
    "interval), or the test had the power to see the threshold and did not flag it; a cell "
    "without that evidence is inconclusive, and so is the run (exit 1)."
)

INTERVAL = "interval"  # Verdict.method of a cell judged by asv's confidence intervals
WELCH = "welch"  # ... and of one judged by Welch's t on its summaries (``by_summary``)


def usable(summary: stats.Summary | None) -> bool:
    """A summary a test can be made of: a positive mean, a spread, two timings or more."""
    return summary is not None and summary[0] > 0 and summary[1] >= 0 and summary[2] >= 2


def by_summary(v: Verdict, base: stats.Summary, head: stats.Summary, alpha: float,
               conf: float) -> None:  # fmt: skip
    """The note and evidence of a cell judged by Welch's t on the two sides' summaries (mean,
    standard deviation, rounds: ``stats.welch``), where neither side kept raw samples (a
    pytest-benchmark run saved without its rounds' data). Its p joined Holm's correction with
    the run's other tests (``v.status`` is set from it); ``v.interval`` is the ``conf``
    interval of mean(head)/mean(base) (``stats.summary_ratio_interval``). Evidence as for the
    other tests (``RULE``): unchanged with the power to see the threshold, or with that
    interval under it, else inconclusive."""
    lower = v.policy.kind == "latency"
    v.detectable = stats.summary_min_detectable(base, head, alpha, v.policy.threshold, lower)
    v.note = join_notes(v.note, (
        f"no raw samples: Welch's t on the summaries (mean {base[0]:.4g} -> {head[0]:.4g}, "
        f"stddev {base[1]:.3g} -> {head[1]:.3g}, {base[2]} and {head[2]} rounds), "
        f"p {v.p:.2g} (Holm {v.p_adj:.2g})"
    ))  # fmt: skip
    if v.status == Status.UNCHANGED:
        evidence(v, v.detectable, name=f"{conf:.0%} interval of the means' ratio")


def by_interval(v: Verdict, base_ci: tuple[float, float], head_ci: tuple[float, float]) -> None:
    """Judge ``v`` (its ``change`` set) from asv's 99% confidence intervals of base's and
    head's values, where a side has too few raw samples for the test: as ``asv compare`` does
    (asv's ``_stats.is_different``), the change is significant only when the two intervals do
    not overlap, and then counts beyond the threshold. Per cell, as asv has it: no correction
    over the cells of the run (asv puts such a test's p between 0.00027 and 0.01).

    ``interval``: the head/base ratios both intervals allow; ``detectable``: the smallest
    change in the bad direction that would have separated intervals as wide as these (never
    below the threshold, as ``stats.min_detectable``). So ``evidence`` applies as to tested
    cells: unchanged with power when that is within the threshold, else only where the
    interval stays under the threshold at its worse end, else inconclusive (``RULE``)."""
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
    v.status = by_threshold(v.change, threshold_of(v.policy), significant=different)
    if not across_processes(v) and v.status == Status.UNCHANGED:
        evidence(v, v.detectable, name="head/base within asv's 99% intervals")


def evidence(v: Verdict, detectable: float | None, *, interval: tuple[float, float] | None = None,
             name: str = "interval", widen: float = 0.0, power: bool = True) -> None:  # fmt: skip
    """An ``unchanged`` verdict keeps its word only with evidence (``RULE``): ``detectable``
    (the smallest change these samples could flag; None: one value a side) within the
    threshold, or ``interval`` of head/base (``v.interval`` where not given; ``name`` says
    which it is) under the threshold at its worse end, made ``widen`` worse (a paired cell's
    A/A movement: ``worst``), from samples that could have flagged some change. Else
    inconclusive. The note says which, with the figures. ``power=False``: the interval alone
    decides (a paired cell, whose A/A arm widens it).

    The interval is the cell's own, not widened for the number of cells: the run passes only
    when every cell does, so each cell's test at its level keeps the run's at that level (an
    intersection-union test)."""
    t = v.policy.threshold
    if power and detectable is not None and detectable <= t:
        v.note = join_notes(v.note, f"unchanged: could detect {detectable * 100:.1f}%, "
                            f"within the {t * 100:g}% threshold")  # fmt: skip
        return
    can_flag = detectable is not None and math.isfinite(detectable)
    reach = (
        "one value a side: no interval" if detectable is None
        else f"could detect only {detectable * 100:.1f}%" if can_flag
        else "too few samples to detect any change"
    )  # fmt: skip
    interval = interval if interval is not None else v.interval
    bound = worst(v, interval, widen)
    if bound is None:
        v.status = Status.INCONCLUSIVE
        v.note = join_notes(v.note, reach)
        return
    lo, hi = interval
    widened = f" widened by the A/A arm's {widen * 100:.1f}%" if widen else ""
    judged = f"{name} {lo:.3f}-{hi:.3f}{widened}, at worst {bound * 100:+.1f}%"
    if can_flag and bound < t:
        v.note = join_notes(v.note, f"unchanged: {judged}, under the {t * 100:g}% threshold")
        return
    v.status = Status.INCONCLUSIVE
    v.note = join_notes(v.note, f"{reach}; {judged}, not under the {t * 100:g}% threshold")


def worst(v: Verdict, interval: tuple[float, float] | None, widen: float = 0.0) -> float | None:
    """The change in the bad direction (+0.05: 5% slower or 5% less throughput) at the worse
    end of ``interval`` (of head/base, for ``v``'s metric), widened by ``widen``: the
    interval's reach beyond the estimate (the rounds' noise) and ``widen`` (how far an A/A arm
    of the same code moved: the arms' own bias) are two independent errors and add in
    quadrature. Added in full, they left 9 of 30 calibration A/A gates passing, the interval
    alone 18; in quadrature 18 (docs/calibration.md). None without a finite interval."""
    if interval is None or not all(map(math.isfinite, interval)):
        return None
    lower = v.policy.kind == "latency"
    end = bad_change(interval[1] if lower else interval[0], lower)
    if not widen or v.change is None or not math.isfinite(v.change):
        return (1 + end) * (1 + widen) - 1
    return v.change + math.hypot(max(0.0, end - v.change), widen)


def powered(v: Verdict) -> bool:
    """Whether ``v`` showed, with the power to see its threshold, that it is within it: an
    improvement, or unchanged with a ``detectable`` change within the threshold."""
    if v.status == Status.IMPROVEMENT:
        return True
    detectable = v.detectable if v.detectable is not None else math.inf
    return v.status == Status.UNCHANGED and detectable <= v.policy.threshold


def join_notes(a: str, b: str) -> str:
    """A verdict's note ``a`` with ``b`` added."""
    return f"{a}; {b}" if a else b


# What runs in separate processes can show of a metric that includes host time: no A/A gate
# run of the asv calibration failed at a 100% threshold (docs/calibration.md). Below that the
# paired comparison (ragbench.gate.paired) judges such a metric.
CROSS_PROCESS = 1.0


def threshold_of(policy: Policy) -> float:
    return max(policy.threshold, CROSS_PROCESS) if policy.paired else policy.threshold


def across_processes(v: Verdict) -> bool:
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


def by_threshold(change: float | None, threshold: float, significant: bool) -> str:
    """regression / improvement / unchanged for a change in the bad direction (+0.05: 5%
    worse) that ``significant`` says is real."""
    if not significant or change is None:
        return Status.UNCHANGED
    if change > threshold:
        return Status.REGRESSION
    if change <= -1 or -change / (1 + change) > threshold:  # -1: all of the cost gone
        return Status.IMPROVEMENT
    return Status.UNCHANGED
