"""What a gate left without evidence, and how much measuring settles it.

A gate ends inconclusive where a cell's samples could not show its threshold (its interval
reached past it, too few samples, or the A/A arm of a paired cell moved more than half the
threshold), and a regression stands on one re-measurement. ``plan`` estimates from the observed
spread how many rounds each such cell needs: the half-width of an interval falls as
1/sqrt(samples), so a cell that could detect only ``d`` where its threshold is ``t`` needs
``(d/t)^2`` times the samples it had, and an A/A arm that moved ``m`` needs ``(m/(t/2))^2``
times the processes (each with a 25% margin, at most ``CAP`` times the first gate's). The gate's
JSON keeps the plan, its report ends with the command (``ragbench gate --settle FILE``), and
``gate.run_settle`` measures exactly those cells and merges their verdicts into the first
gate's, whose other cells passed there.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .compare import Comparison, Key, Verdict
from .verdicts import Status

MARGIN = 1.25  # the estimate is of a median's spread: a quarter more than it says
CAP = 8  # a settle run measures at most this many times the first gate's rounds or processes
SETTLED = (Status.REGRESSION, Status.INCONCLUSIVE)  # what a settle run measures again


def needed(v: Verdict, have: int) -> int:
    """The rounds (or, for a paired cell, processes) that ``v`` needs to reach its threshold's
    power, where the first gate had ``have``."""
    t = v.policy.threshold
    factor = 1.0  # a regression: measured again at the power that flagged it
    if v.status == Status.INCONCLUSIVE:
        d = v.detectable
        if d is None or not math.isfinite(d):  # too few samples to detect anything
            factor = 2.0
        elif d > t:
            factor = (d / t) ** 2
        if v.aa is not None and t > 0 and v.aa > t / 2:
            factor = max(factor, (v.aa / (t / 2)) ** 2)
        factor *= MARGIN
    return min(CAP * have, max(have + (v.status == Status.INCONCLUSIVE), math.ceil(have * factor)))


@dataclass
class Plan:
    """The cells a settle run measures: ``cells`` by asv in ``rounds`` alternating rounds,
    ``paired`` (host-time cells) in ``processes`` processes of base, A/A and head."""

    cells: list[Key]
    rounds: int
    paired: list[Key]
    processes: int

    def to_json(self) -> dict:
        return {"cells": [list(k) for k in self.cells], "rounds": self.rounds,
                "paired": [list(k) for k in self.paired],
                "processes": self.processes}  # fmt: skip

    @classmethod
    def from_json(cls, doc: object) -> Plan:
        """ValueError where ``doc`` is not a plan ``to_json`` wrote."""

        def keys(x) -> list[Key]:
            if not isinstance(x, list) or not all(
                isinstance(k, list) and len(k) == 3 and all(isinstance(p, str) for p in k)
                for k in x
            ):
                raise ValueError("a plan's cells are [benchmark, metric, param_key] lists")
            return [tuple(k) for k in x]

        if not isinstance(doc, dict):
            raise ValueError("no plan to settle (the gate left nothing without evidence)")
        counts = [doc.get(n) for n in ("rounds", "processes")]
        if not all(isinstance(n, int) and 1 <= n <= 1000 for n in counts):
            raise ValueError(f"a plan's rounds and processes are counts, got {counts}")
        plan = cls(keys(doc.get("cells")), counts[0], keys(doc.get("paired")), counts[1])
        if not plan.cells and not plan.paired:
            raise ValueError("the plan names no cell")
        return plan

    def describe(self) -> str:
        parts = []
        if self.cells:
            parts.append(f"{len(self.cells)} cell(s) in {self.rounds} alternating round(s)")
        if self.paired:
            parts.append(f"{len(self.paired)} host-time cell(s) in {self.processes} paired "
                         "process(es)")  # fmt: skip
        return " and ".join(parts)


def plan(c: Comparison, rounds: int, processes: int, flagged: bool = True) -> Plan | None:
    """What settles ``c`` (a gate's comparison of ``rounds`` rounds and ``processes`` paired
    processes): its inconclusive cells, and with ``flagged`` its regressions, with the rounds
    the least powered of them needs; None where nothing is left to settle. A settle run's
    regressions are settled (a third measurement that showed them): only its inconclusive
    cells are left."""
    wanted = SETTLED if flagged else (Status.INCONCLUSIVE,)
    todo = [v for v in c.verdicts if v.status in wanted]
    cells = [v for v in todo if not v.policy.paired]
    pairs = [v for v in todo if v.policy.paired]
    if not todo:
        return None
    # a cell re-measured once by the gate was judged on one round more than the gate's
    return Plan([v.key for v in cells],
                max((needed(v, rounds + v.rechecked) for v in cells), default=rounds),
                [v.key for v in pairs],
                max((needed(v, max(1, processes)) for v in pairs),
                    default=max(1, processes)))  # fmt: skip
