"""How a harness timed a cell (its measurement settings), and whether a step of a series or a
gate's pair moved them.

asv times a cell in ``repeat`` samples of ``number`` calls each (the store's ``stats_number``
and ``stats_repeat``); pytest-benchmark in ``rounds`` of ``iterations`` calls each (kept in
the same columns: iterations as the calls per sample, rounds as the samples). Another number
of calls per sample moves the figure by itself (caches, warm-up, the timer's own cost):
django's published asv results went from ``number`` ~89,000 to 1 between two nights, and 43
cells stepped up by up to 14,000% with no change of the code. A change of a setting by
``FACTOR`` or more is a **measurement setting change**, not a code change, except where the
harness's own calibration explains it: asv (and pytest-benchmark) choose the calls per sample
so that a sample takes about the same time, so code that got 3x slower is timed with a third
of the calls, and the sample's duration (calls x value) stays put. Such a move is the code's,
and so is one to a single call a sample whose call takes longer than the other side's whole
sample (calibration stops at one call).
Below ``FACTOR`` (form_clean: 412 to 427 calls over 400 runs) it is calibration jitter.

asv also keeps each benchmark's ``version``, a hash of its code (its source, or what the
benchmark sets): a new version is a new benchmark, whose figures asv's own graphs do not join
to the old ones. It is kept here as a setting (``version``) and any change of it is a
measurement setting change: the step it makes is the benchmark's, not the project's code's.
"""

from __future__ import annotations

import json
import statistics

FACTOR = 2
# The words of each harness's settings: calls per sample, then samples.
NAMES = {"asv": ("number", "repeat"), "pytest-benchmark": ("iterations", "rounds")}
CALLS = ("number", "iterations")
WORDS = "measurement setting changed"


def of(source: str | None, number, repeat, version: str | None = None) -> dict:
    """A point's settings as the store keeps them (``timing`` columns): ``{"number": 100,
    "repeat": 10, "version": "9f2c..."}`` for asv, ``{"iterations": 10, "rounds": 5}`` for
    pytest-benchmark; {} where the harness recorded none."""
    calls, samples = NAMES.get(source or "asv", NAMES["asv"])
    out = {k: int(v) for k, v in ((calls, number), (samples, repeat)) if v is not None}
    if version and calls == "number":
        out["version"] = str(version)
    return out


def parse(stored) -> dict:
    """Settings as a ``timing`` column holds them (JSON text, or parsed), without the ones the
    harness left out; {} for none."""
    if isinstance(stored, str):
        stored = json.loads(stored)
    return {k: v if k == "version" else int(v) for k, v in (stored or {}).items()
            if v is not None}  # fmt: skip


def typical(settings: list[dict]) -> dict:
    """Each setting over several points (a lookback's), {} where none has it: the median of a
    count, the most frequent version (of those as frequent, the latest)."""
    out = {}
    for k in sorted({k for s in settings for k in s}):
        values = [s[k] for s in settings if k in s]
        if k == "version":
            out[k] = max(reversed(values), key=values.count)  # max keeps the first of ties
        else:
            out[k] = statistics.median_low(values)
    return out


def _harness(settings: dict) -> str:
    return "asv" if {"number", "repeat", "version"} & set(settings) else "pytest-benchmark"


def changed(before: dict | None, after: dict | None, before_value=None,
            after_value=None) -> str | None:  # fmt: skip
    """The settings that moved between two points: a count by ``FACTOR`` or more (``asv number
    89287 -> 1``) where the harness's calibration does not explain the move (see the module),
    asv's benchmark version at all (``asv version 1a2b3c4d -> 9f2c0e51``); None where none did,
    or where either side recorded none. ``before_value``, ``after_value``: the figures measured
    with them (without them no move counts as calibration)."""
    if not before or not after:
        return None
    moved = []
    if "version" in before and "version" in after and before["version"] != after["version"]:
        moved.append(f"version {before['version'][:8]} -> {after['version'][:8]}")
    calls_before = next((before[k] for k in CALLS if k in before), 1)
    calls_after = next((after[k] for k in CALLS if k in after), 1)
    counts = (set(before) & set(after)) - {"version"}
    for key in sorted(counts, key=lambda k: k not in CALLS):
        a, b = before[key], after[key]
        if not a or not b or max(a, b) < FACTOR * min(a, b):
            continue
        # the time a sample takes (calls x value), or a run of them (samples x calls x value)
        scale = (1, 1) if key in CALLS else (calls_before, calls_after)
        if _calibrated(a * scale[0], b * scale[1], before_value, after_value,
                       floor=key in CALLS):  # fmt: skip
            continue
        moved.append(f"{key} {a} -> {b}")
    return f"{_harness(before)} " + ", ".join(moved) if moved else None


def _calibrated(a, b, before_value, after_value, floor: bool = False) -> bool:
    """Whether settings ``a`` -> ``b`` kept the time they take within ``FACTOR``: the harness
    chose them for the figure, as its calibration does. ``floor``: they are the calls per
    sample, which calibration never takes below 1, so a side at 1 whose sample is the longer
    one is calibrated too (one call already takes longer than the sample the harness aims at:
    kedro's published asv results, ``number`` 39 -> 1 where one call went from 0.28 to 98 ms,
    357x slower code)."""
    if not before_value or not after_value or before_value <= 0 or after_value <= 0:
        return False
    x, y = a * before_value, b * after_value
    if max(x, y) < FACTOR * min(x, y):
        return True
    return floor and ((a == 1 and x > y) or (b == 1 and y > x))


def words(moved: str) -> str:
    """``measurement setting changed: asv number 89287 -> 1``."""
    return f"{WORDS}: {moved}"
