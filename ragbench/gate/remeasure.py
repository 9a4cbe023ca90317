"""The gate's second look: the cells a comparison flagged or left inconclusive are measured
once more (``recheck_keys``), and judged again (``remeasured``): a regression on the
re-measurement alone, where it stands unless that shows, with the power to see the threshold,
that it is within it (``judge_flagged``); an inconclusive cell on the first samples and the new ones
pooled.
"""

from __future__ import annotations

from ..policies import Policies
from ..verdicts.comparison import Cell, Comparison, Key, Verdict, compare, pool
from ..verdicts.evidence import join_notes, powered
from ..verdicts.status import FAILING, Status

SIDES = ("base", "head")


def recheck_keys(c: Comparison) -> list[Key]:
    """The cells a gate measures once more: the regressions, to see them reproduce, and the
    inconclusive cells that runs in separate processes can settle (not the paired ones: only
    ``ragbench.gate.paired`` judges those)."""
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
    alone (``judge_flagged``); an inconclusive cell on the first samples and the new ones pooled.
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
            judge_flagged(v, judged.get(v.key))
        elif v.key in by_key:
            w = c.verdicts[i] = by_key[v.key]
            w.rechecked = True
            w.note = join_notes("first and re-measured samples pooled", w.note)
    return len(keys)


def judge_flagged(v: Verdict, again: Verdict | None) -> None:
    """A flagged cell after its re-measurement ``again``: it stays a regression unless
    ``again`` shows, with the power to see the threshold, that it is within it (then the
    re-measurement's figures are the cell's); a re-measurement without that power leaves it
    inconclusive, never unchanged."""
    v.rechecked = True
    flagged = f"flagged at {v.change * 100:+.1f}%"
    if again is None:
        v.note = join_notes(v.note, f"{flagged}; the re-measurement has no value of it")
    elif again.status == Status.REGRESSION:
        v.note = join_notes(v.note, "reproduced when re-measured")
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
