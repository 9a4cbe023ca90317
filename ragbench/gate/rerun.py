"""What a gate left without evidence, and how much measuring settles it.

A gate ends inconclusive where a cell's samples could not show its threshold (its interval
reached past it, too few samples, or the A/A arm of a paired cell moved more than half the
threshold), and a regression stands on one re-measurement. ``plan`` estimates from the observed
spread how many rounds each such cell needs: the half-width of an interval falls as
1/sqrt(samples), so a cell that could detect only ``d`` where its threshold is ``t`` needs
``(d/t)^2`` times the samples it had, and an A/A arm that moved ``m`` needs ``(m/(t/2))^2``
times the processes (each with a 25% margin, at most ``CAP`` times the first gate's). The gate's
JSON keeps the plan; the gate's store keeps the JSON's verdict, blocking cells and plan under
its digest (``record``); the report ends with the command (``ragbench gate --settle ID``), and
``gate.rerun_gate`` measures exactly those cells and merges their verdicts into the first
gate's, whose other cells passed there. What it settles is read from the store (``recorded``,
``planned``), never from a file: a JSON is only a way to name the recorded gate whose digest
it has, and a plan is held to ``CAP`` times the recorded gate's rounds where it is read.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from .. import jsonfile
from ..verdicts.comparison import Comparison, Key, Verdict
from ..verdicts.status import Status, canonical, digest

ID = re.compile(r"[0-9a-f]{16}|[0-9a-f]{64}")  # a recorded gate's id, or its whole digest
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

    def check(self, rounds: int, processes: int) -> Plan:
        """This plan, or ValueError where it asks for more than ``limits`` allows a gate of
        ``rounds`` rounds and ``processes`` paired processes."""
        most = limits(rounds, processes)
        asked = (("round(s)", self.rounds, most[0], rounds),
                 ("paired process(es)", self.processes, most[1], processes))  # fmt: skip
        for what, n, cap, had in asked:
            if n > cap:
                raise ValueError(f"its plan asks for {n} {what}, more than {CAP}x the gate's "
                                 f"{had} allow ({cap})")  # fmt: skip
        return self

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


def limits(rounds: int, processes: int) -> tuple[int, int]:
    """The most rounds and paired processes a plan of a gate of ``rounds`` rounds and
    ``processes`` paired processes may ask for: ``CAP`` times them (a cell the gate re-measured
    was judged on one round more; ``needed`` never asks for more)."""
    return CAP * (rounds + 1), CAP * max(1, processes)


def record(store, doc: dict, *, source: str, machine: str | None = None, pr: int | None = None,
           settles: str | None = None, most: tuple[int, int] | None = None) -> str:  # fmt: skip
    """Record ``doc`` (a gate's document, ``gate_json.to_json``, checked by
    ``verdicts.read_gate_document``) in ``store``: its verdict, blocking cells and plan, under
    the id its ``digest`` gives; -> that id. ``source``: ``gate`` (the gate that wrote it),
    ``settle`` (a settle run, of the gate ``settles``) or ``verdict`` (the trusted job, which
    read it as pull request ``pr``'s artifact: ``machine`` as it names it, and the rounds and
    processes it claims held to ``most``)."""
    d = digest(doc)
    rounds, processes = doc.get("rounds", 1), doc.get("processes", 0)
    if most is not None:
        rounds, processes = min(rounds, most[0]), min(processes, most[1])
    plan = doc.get("settle")

    def text(x):
        return x if isinstance(x, str) else None

    cells = [
        {"benchmark": f["benchmark"], "metric": f["metric"], "param_key": f["param_key"],
         "status": f["status"], "words": text(f.get("words")), "note": text(f.get("note")),
         "change": float(f["change"]) if isinstance(f.get("change"), int | float)
         and not isinstance(f.get("change"), bool) else None}
        for f in doc["failures"]
    ]  # fmt: skip
    store.record_gate_verdict({
        "gate_id": d[:16], "digest": d, "base": doc["base"], "head": doc["head"],
        "machine": machine or str(doc.get("machine") or ""), "verdict": doc["verdict"],
        "mode": doc.get("mode", "quick"), "rounds": rounds, "processes": processes,
        "plan": None if plan is None else json.dumps(plan, sort_keys=True),
        "document": canonical(doc), "source": source, "pr": pr, "settles": settles,
    }, cells)  # fmt: skip
    return d[:16]


def recorded(store, ref: str) -> dict:
    """The gate ``store`` recorded that ``ref`` names: its id (or whole digest), or a JSON file
    whose document has the digest of one it recorded (byte for byte, or the same document
    indented otherwise). ValueError saying why none: a JSON edited, of another store, or
    written by hand is no recorded gate."""
    if ID.fullmatch(ref) and not Path(ref).exists():
        found = store.gate_verdict(**({"gate_id": ref} if len(ref) == 16 else {"digest": ref}))
        if found is None:
            raise ValueError(f"{store.name} recorded no gate {ref}")
        return found
    try:
        doc = jsonfile.read(Path(ref), limit=8 * 2**20)
    except ValueError as exc:
        raise ValueError(str(exc)) from None
    if not isinstance(doc, dict):
        raise ValueError("not a gate's JSON")
    found = store.gate_verdict(digest=digest(doc))
    if found is None:
        raise ValueError(f"no gate recorded in {store.name} wrote this JSON (sha256 "
                         f"{digest(doc)[:16]}): edited, another store's, or written by hand; "
                         "settle a recorded gate by the id its report names")  # fmt: skip
    return found


def planned(gate: dict) -> Plan:
    """What the recorded ``gate`` (``recorded``) left to settle: its plan, held to ``CAP``
    times its rounds and processes, naming only its own inconclusive or flagged cells.
    ValueError where it left none or the plan is not that."""
    doc = None if gate["plan"] is None else json.loads(gate["plan"])
    plan = Plan.from_json(doc).check(gate["rounds"], gate["processes"])
    left = {(c["benchmark"], c["metric"], c["param_key"]) for c in gate["cells"]
            if c["status"] in SETTLED}  # fmt: skip
    for k in plan.cells + plan.paired:
        if k not in left:
            raise ValueError(f"its plan names {' '.join(k).strip()}, which the gate did not "
                             "leave inconclusive or flagged")  # fmt: skip
    return plan
