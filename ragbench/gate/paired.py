"""The paired A/B comparison of the metrics that include host time (``paired = true`` in
``policies.toml``): base, head and base again timed in the same process.

Host time per call moves 1.6-2.1x from one process to the next on our VMs, so runs of base and
head in separate processes cannot show a 10% change of it. ``benchmarks/support/paired.py`` loads
both revisions into one process and times them in randomized interleaved rounds; this module
runs it in ``processes`` fresh processes and judges each cell from the per-round ratios of
head to base and ``aa`` (base loaded again; their geometric mean): their median, a sign test
(Holm over the paired cells), and the distribution-free interval of the median at the
family-wise level. The ratio aa/base, two copies of the same code, says how far the arms move
by themselves: that widens the interval a cell is judged by, so a cell is unchanged only where
the widened interval stays under the threshold (``evidence.evidence``). A cell left without
that evidence gets a second look (``second_look``): as many more processes of it alone.

Where base and head cannot share a process (one of them loads only alone: a clash of global
registrations, a changed package layout), each process loads one revision, base and head
alternate over ``2 * processes`` processes, and the cell's samples are the processes'
medians: the report then says how large a change that run could detect.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import asv_run, stats
from ..policies import STATISTICAL, Policies
from ..store import param_key
from ..verdicts import comparison as compare
from ..verdicts.evidence import worst
from ..verdicts.status import Status

PROCESSES = 3  # fresh processes a comparison pools (calibrated: docs/calibration.md)
# The second look at cells the first left inconclusive spends this share of the first look's
# error: its interval is at 1 - 0.05 / 2 where the first's is at 95%, so a cell truly at its
# threshold passes at most 2.5% + 1.25% of the time over both looks (one-sided).
SECOND_LOOK = 0.5
ARMS = ("base", "aa", "head")
TOGETHER, ALONE = "paired", "processes"  # how a cell was measured (Verdict.method)


class PairedError(RuntimeError):
    """The paired runner itself could not run (not: a revision failed, that is a result)."""


@dataclass
class PairedCell:
    """One cell's values over the processes: per arm, the per-round values in order (paired
    by index across arms within a process) and each process's median."""

    benchmark: str
    metric: str
    params: dict
    unit: str
    rounds: dict[str, list[float]] = field(default_factory=dict)
    medians: dict[str, list[float]] = field(default_factory=dict)
    ratios: dict[str, list[float]] = field(default_factory=dict)  # arm -> arm/base per round
    errors: dict[str, str] = field(default_factory=dict)

    @property
    def key(self) -> compare.Key:
        return (self.benchmark, self.metric, param_key(self.params))


def _process(arms: dict[str, Path], out: Path, *, seed: int, mode: str, rounds: int | None,
             pipeline_rounds: int | None, only: str | None = None) -> dict:  # fmt: skip
    args = ["--out", str(out), "--seed", str(seed)]
    if only:
        args += ["--only", only]
    if rounds:
        args += ["--rounds", str(rounds)]
    if pipeline_rounds:
        args += ["--pipeline-rounds", str(pipeline_rounds)]
    code, last = asv_run.runner("benchmarks.support.paired", arms, args, mode=mode)
    if code != 0 or not out.is_file():
        raise PairedError(f"the paired runner exited with {code}: {last or 'no message'}")
    try:
        return json.loads(out.read_text())
    except ValueError as exc:
        raise PairedError(f"the paired runner wrote no JSON document: {exc}") from None


def only_of(keys) -> str:
    """The paired runner's ``--only`` that selects exactly the cells ``keys`` (their
    "benchmark param_key")."""
    names = sorted({f"{re.escape(k[0])} {re.escape(k[2])}" for k in keys})
    return f"^{names[0]}$" if len(names) == 1 else f"^(?:{'|'.join(names)})$"


def measure(base: Path, head: Path, work: Path, *, processes: int = PROCESSES,
            mode: str = "quick", rounds: int | None = None, pipeline_rounds: int | None = None,
            log: Callable[[str], None] = print, only: str | None = None,
            first: int = 0) -> tuple[str, list[dict]]:  # fmt: skip
    """-> (method, documents): base, A/A and head in each of ``processes`` processes
    (``TOGETHER``); where head loads only alone, one revision a process in ``2 * processes``
    alternating processes (``ALONE``); where head does not load at all, the one process that
    shows it (its cells fail). ``only``: the cells whose "benchmark param_key" it matches
    (the paired runner's ``--only``; ``ragbench bisect``: one cell; ``only_of``). ``first``:
    the number of the first process (its seed), after those of an earlier look."""
    if processes < 1:
        raise PairedError(f"--paired-processes must be at least 1, got {processes}")
    kw = {"mode": mode, "rounds": rounds, "pipeline_rounds": pipeline_rounds, "only": only}
    arms = {"base": base, "aa": base, "head": head}
    docs = []
    for i in range(first, first + processes):
        log(f"paired: process {i + 1}/{first + processes}: base, A/A and head interleaved")
        docs.append(_process(arms, work / f"paired-{i}.json", seed=i, **kw))
        if i == 0 and "head" in docs[0]["errors"]:
            alone = _process({"head": head}, work / "alone-probe.json", seed=0, **kw)
            if alone["errors"]:
                return TOGETHER, docs  # head is broken, not in the way of base
            log(f"paired: head loads alone but not beside base ({docs[0]['errors']['head']}): "
                "alternating processes instead")  # fmt: skip
            return ALONE, _alone(base, head, work, processes, kw, alone, log)
    return TOGETHER, docs


def _alone(base, head, work, processes, kw, first_head, log) -> list[dict]:
    docs = [first_head]
    for i in range(2 * processes - 1):
        side, src = ("base", base) if i % 2 == 0 else ("head", head)
        log(f"paired: process {i + 2}/{2 * processes}: {side} alone")
        docs.append(_process({side: src}, work / f"alone-{i}.json", seed=i + 1, **kw))
    return docs


def collect(docs: list[dict]) -> dict[compare.Key, PairedCell]:
    """The documents' cells pooled by key: rounds in order, one median a process, ratios."""
    cells: dict[compare.Key, PairedCell] = {}
    for doc in docs:
        for c in doc["cells"]:
            new = PairedCell(c["benchmark"], c["metric"], c["params"], c["unit"])
            cell = cells.setdefault(new.key, new)
            cell.errors.update({a: e for a, e in doc["errors"].items() if a in ARMS})
            cell.errors.update(c["errors"])
            values = c["values"]
            for arm, v in values.items():
                if v:
                    cell.rounds.setdefault(arm, []).extend(v)
                    cell.medians.setdefault(arm, []).append(statistics.median(v))
            base, aa, head = (values.get(arm) for arm in ARMS)
            if base and aa:
                pairs = zip(aa, base, strict=True)
                cell.ratios.setdefault("aa", []).extend(compare.ratio_of(x, b) for x, b in pairs)
            if base and head:
                pairs = zip(head, _reference(base, aa), strict=True)
                cell.ratios.setdefault("head", []).extend(compare.ratio_of(x, r) for x, r in pairs)
    return cells


def _reference(base: list[float], aa: list[float] | None) -> list[float]:
    """What head is divided by, round by round: the geometric mean of base and its A/A copy
    where the process has both (else base). Two copies of base halve the reference's share of
    the round's noise: the log-ratio's variance is 1.5 instead of 2 times one arm's, and it is
    independent of the A/A arm's own ratio aa/base. On the H100's calibration processes this
    narrowed the cells' intervals enough that 26 of 30 A/A gate runs pass, 18 against base
    alone, with every planted +5% still caught (docs/calibration.md)."""
    if not aa or len(aa) != len(base):
        return base
    return [math.sqrt(b * a) if b > 0 and a > 0 else b for b, a in zip(base, aa, strict=True)]


def judge(cells: dict[compare.Key, PairedCell], policies: Policies, method: str,
          processes: int) -> list[compare.Verdict]:  # fmt: skip
    """A verdict for each cell whose policy is ``paired``: head/base tested (sign test, Holm
    over these cells), the interval at the family-wise level, the A/A arm's movement."""
    alpha = float(policies.gate.get("alpha", 0.01))
    conf = float(policies.gate.get("confidence", 0.95))
    verdicts, tested = [], []
    for key, cell in sorted(cells.items()):
        policy = policies.for_metric(cell.benchmark, cell.metric, cell.unit)
        if not policy.paired:
            continue
        v = compare.Verdict(key, cell.params, cell.unit, policy, Status.INFO, method=method)
        base, head = cell.rounds.get("base"), cell.rounds.get("head")
        v.base = statistics.median(base) if base else None
        v.head = statistics.median(head) if head else None
        if "head" in cell.errors:
            v.status, v.note = Status.FAILED, f"head raised: {cell.errors['head']}"
        elif v.head is None:
            v.status, v.note = Status.MISSING, "no value on head"
        elif not all(map(math.isfinite, head)):  # a NaN is no measurement, never a pass
            v.status, v.note = Status.MISSING, "a non-finite value on head"
        elif base is not None and not all(map(math.isfinite, base)):
            v.status, v.note = Status.INCONCLUSIVE, "a non-finite value on base: no comparison"
        elif v.base is None:
            v.status = Status.NEW
            v.note = f"base raised: {cell.errors['base']}" if "base" in cell.errors else ""
        elif policy.kind in STATISTICAL:
            tested.append(v)
        verdicts.append(v)
    level = 1 - alpha / max(1, len(tested))  # Bonferroni: the interval every cell must pass
    for v in tested:
        v.p = _p(cells[v.key], method)
    adjusted = stats.holm([v.p for v in tested])
    for v, p_adj in zip(tested, adjusted, strict=True):
        _decide(v, cells[v.key], p_adj < alpha, p_adj, (level, conf), method, processes,
                compare.min_samples(v.policy, policies))  # fmt: skip
    return verdicts


def second_look(docs: list[dict], more: list[dict], keys, policies: Policies,
                processes: int) -> list[compare.Verdict]:  # fmt: skip
    """The cells ``keys``, left inconclusive by the ``processes`` documents ``docs``, judged
    again on ``docs`` and ``more`` (further processes of those cells alone) pooled: the second
    look of a sequential design, its interval at the stricter confidence ``SECOND_LOOK`` gives.
    Holm and the family-wise level stay over every paired cell of the first look. On the
    H100's A/A processes of the gate's own three arms, 191 of 220 combinations of 3 passed at
    the first look and all 220 after a second of 3 more (docs/calibration.md)."""
    conf = float(policies.gate.get("confidence", 0.95))
    gate = {**policies.gate, "confidence": 1 - (1 - conf) * SECOND_LOOK}
    stricter = dataclasses.replace(policies, gate=gate)
    verdicts = judge(collect(docs + more), stricter, TOGETHER, processes + len(more))
    return [v for v in verdicts if v.key in set(keys)]


def _p(cell: PairedCell, method: str, best: bool = False) -> float:
    """The test's p; ``best``: the smallest p these sample counts allow (every sign the same,
    or the two sides' processes fully apart)."""
    if method == TOGETHER:
        ratios = cell.ratios["head"]
        return stats.sign_test([2.0] * len(ratios) if best else ratios)
    b, h = cell.medians["base"], cell.medians["head"]
    if best:
        b, h = range(len(b)), range(len(b), len(b) + len(h))
    return stats.mann_whitney(b, h)[1]


def _decide(v, cell: PairedCell, significant: bool, p_adj: float, levels: tuple[float, float],
            method: str, processes: int, need: int) -> None:  # fmt: skip
    """``levels``: the family-wise level of the interval shown (and of ``detectable``), and the
    cell's own confidence, of the interval it is judged unchanged by (``evidence.evidence``)."""
    level, conf = levels
    lower = v.policy.kind == "latency"
    t = v.policy.threshold
    v.p_adj = p_adj
    # base, head and the change tell one story: head is base times the ratio judged (the
    # medians of all rounds pooled across processes read 212 vs 235 us, +11%, where the
    # per-round ratio, the one measurement that is paired, said -1.5%)
    if method == TOGETHER:
        ratios = cell.ratios["head"]
        v.ratio = statistics.median(ratios)
        v.interval = stats.median_interval(ratios, level)
        judged = stats.median_interval(ratios, conf)
        v.head = v.base * v.ratio
        v.note = (f"{len(ratios)} rounds in {processes} process(es); head = base x the median "
                  "per-round ratio to base and its A/A copy")  # fmt: skip
        counts = (len(ratios),)
    else:  # one median a process: the ratio of the sides' medians
        b, h = cell.medians["base"], cell.medians["head"]
        v.base, v.head = statistics.median(b), statistics.median(h)
        v.ratio = compare.ratio_of(v.head, v.base)
        v.interval = stats.ratio_interval(b, h, confidence=level)
        judged = stats.ratio_interval(b, h, confidence=conf)
        v.note = f"{len(b)} base and {len(h)} head process(es), alternating: their medians"
        counts = (len(b), len(h))
    v.change = compare.bad_change(v.ratio, lower)
    if min(counts) < need:
        v.status, v.detectable = Status.INCONCLUSIVE, math.inf
        v.note += f"; too few samples (the policy needs {need}): measure again"
        return
    # the smallest change this cell could flag: its threshold, or the interval's reach
    reach = max(v.ratio - v.interval[0], v.interval[1] - v.ratio) / v.ratio
    v.detectable = max(t, reach)
    v.status = compare.by_threshold(v.change, t, significant)
    aa = cell.ratios.get("aa")
    moved = 0.0
    if aa:  # how far base moved against itself: the interval judged is that much wider
        moved = abs(compare.bad_change(statistics.median(aa), lower))
        v.aa = moved
        v.note += f"; A/A {moved * 100:.1f}%"
    if v.status == Status.IMPROVEMENT and moved:
        bound = worst(v, judged, moved)
        if bound is None or bound >= t:
            v.status = Status.INCONCLUSIVE
            v.note += (f": better, but the {conf * 100:g}% interval widened by it reaches "
                       f"{_signed(bound)}, not under the {t * 100:g}% threshold")  # fmt: skip
        return
    if v.status != Status.UNCHANGED:
        return
    if _p(cell, method, best=True) >= 1 - level:  # not even every sign alike would be flagged
        v.detectable = math.inf
    compare.evidence(v, v.detectable, interval=judged, name=f"{conf * 100:g}% interval",
                     widen=moved, power=False)  # fmt: skip


def _signed(change: float | None) -> str:
    return "no finite bound" if change is None else f"{change * 100:+.1f}%"
