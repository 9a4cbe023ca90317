"""Read asv result files: one row per benchmark and parameter cell.

An asv result file (``results/<machine>/<commit>-<env>.json``) holds, per benchmark, columns
(``result_columns``) whose entries are lists over the cross product of the parameter axes, in
``itertools.product`` order; parameter values are stored as their ``repr``. A cell's identity
is its benchmark's name and those texts (``param_values``).
"""

from __future__ import annotations

import ast
import itertools
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from . import jsonfile


@dataclass(frozen=True)
class Cell:
    """One benchmark at one parameter cell, its entries as asv wrote them (ingest checks their
    types). ``failed``: asv recorded null, the benchmark (or its setup) raised. ``value`` is
    None where asv has no value: failed, or NaN (skipped: its setup raised NotImplementedError,
    or it returned NaN). ``samples`` is None where asv kept no raw samples. ``ci_99_a`` and
    ``ci_99_b``: asv's 99% confidence interval of the value (``stats_ci_99_a``/``_b``), None where
    asv has none or an infinite one (too few samples: asv's ``get_weight`` treats it as missing
    too); what ``asv compare`` judges a cell by where it has no raw samples."""

    benchmark: str
    params: dict[str, object]
    value: object
    samples: object
    q25: object
    q75: object
    version: str | None
    failed: bool = False
    stats_number: object = None  # asv's ``number`` and ``repeat`` for the cell (how it timed)
    stats_repeat: object = None
    ci_99_a: object = None
    ci_99_b: object = None


def load(path: Path) -> dict:
    """The parsed result file; ValueError if it is not one."""
    try:
        return check(jsonfile.read(path))
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def check(data) -> dict:
    """``data`` if it has the shape of an asv result file; ValueError saying what is off."""
    if not isinstance(data, dict) or not {"commit_hash", "results", "result_columns"} <= set(data):
        raise ValueError("not an asv result file (no commit_hash/results/result_columns)")
    if not isinstance(data["result_columns"], list) or "result" not in data["result_columns"]:
        raise ValueError("asv result file without a 'result' column: no measurements")
    if not isinstance(data["results"], dict):
        raise ValueError("asv result file whose 'results' is not an object")
    return data


def _literal(text) -> object:
    """The value a repr text stands for, where it is a plain value (str, number, bool, None)
    whose repr is that very text; else the text as asv wrote it (a tuple, an object, ...)."""
    if not isinstance(text, str):
        return text
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text
    plain = value is None or isinstance(value, (str, int, float, bool))
    return value if plain and repr(value) == text else text


def param_values(axis: list) -> list:
    """One axis's values as the cell identity uses them: the texts asv wrote, read as plain
    values where each reads back to its own text (``'triton'`` -> triton, ``64`` -> 64), so
    that this suite's cells keep their keys. Where two texts would then print alike (``'1'`` and
    ``1``, ``'None'`` and ``None``) the axis keeps asv's texts: two cells, never one."""
    values = [_literal(t) for t in axis]
    if len({str(v) for v in values}) < len({str(t) for t in axis}):
        return list(axis)
    return values


def _value(x):
    """asv's entry, None for null and NaN (no value)."""
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else x


def _finite(x):
    """An interval's bound, None where asv wrote none, NaN or infinity (no interval)."""
    x = _value(x)
    return None if isinstance(x, float) and math.isinf(x) else x


def cells(data: dict, param_names: dict[str, list[str]] | None = None) -> Iterator[Cell]:
    """Every cell of every benchmark. ``param_names`` (from asv's ``benchmarks.json``) names
    the axes; without it they are ``p0``, ``p1``, ..."""
    columns = data["result_columns"]
    for name, row in data["results"].items():
        if not isinstance(row, list):
            raise ValueError(f"{name}: malformed entry {str(row)[:80]}")
        col = dict(zip(columns, row, strict=False))
        axes = col.get("params") or []
        names = (param_names or {}).get(name) or [f"p{i}" for i in range(len(axes))]
        if not axes and col.get("result") is None:  # failed before asv knew its parameters
            names = []
        if not isinstance(axes, list) or not all(isinstance(a, list) for a in axes):
            raise ValueError(f"{name}: malformed params {str(axes)[:80]}")
        if len(set(map(str, names))) != len(names) or len(names) != len(axes):
            raise ValueError(f"{name}: parameter names {str(names)[:80]} for {len(axes)} axes")
        combos = list(itertools.product(*map(param_values, axes))) if axes else [()]
        results = col.get("result")
        if results is not None and not isinstance(results, list):
            raise ValueError(f"{name}: malformed result {str(results)[:80]}")
        if results is not None and len(results) != len(combos):
            raise ValueError(f"{name}: {len(results)} results for {len(combos)} cells")
        for i, combo in enumerate(combos):
            raw = results[i] if results is not None else None  # null: the whole benchmark failed
            yield Cell(
                benchmark=name,
                params=dict(zip(names, combo, strict=True)),
                value=_value(raw),
                samples=_entry(col, "samples", i),
                q25=_value(_entry(col, "stats_q_25", i)),
                q75=_value(_entry(col, "stats_q_75", i)),
                version=col.get("version"),
                failed=raw is None,
                stats_number=_entry(col, "stats_number", i),
                stats_repeat=_entry(col, "stats_repeat", i),
                ci_99_a=_finite(_entry(col, "stats_ci_99_a", i)),
                ci_99_b=_finite(_entry(col, "stats_ci_99_b", i)),
            )


def _entry(col: dict, key: str, i: int):
    """Cell ``i`` of a per-cell column; asv stores an all-None column as None."""
    values = col.get(key)
    return values[i] if isinstance(values, list) and i < len(values) else None


def _benchmarks(results_dir: Path) -> dict:
    path = Path(results_dir) / "benchmarks.json"
    if not path.exists():
        return {}
    data = jsonfile.read(path)
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not asv's benchmarks.json")
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def param_names(results_dir: Path) -> dict[str, list[str]]:
    """Axis names per benchmark from asv's ``benchmarks.json`` in a results directory."""
    return {k: v.get("param_names", []) for k, v in _benchmarks(results_dir).items()}


def units(results_dir: Path) -> dict[str, str | None]:
    """Unit per benchmark from ``benchmarks.json`` (``us``, ``img/s``, ...)."""
    return {k: v.get("unit") for k, v in _benchmarks(results_dir).items()}


def run_times(data: dict) -> tuple[float | None, float | None]:
    """(start, end) of the run in seconds since the epoch, from the benchmarks' own times."""
    columns = data["result_columns"]
    starts, ends = [], []
    for row in data["results"].values():
        col = dict(zip(columns, row, strict=False))
        if isinstance(col.get("started_at"), (int, float)):
            starts.append(col["started_at"] / 1e3)
            ends.append(starts[-1] + float(col.get("duration") or 0))
    return (min(starts), max(ends)) if starts else (None, None)
