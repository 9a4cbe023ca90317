"""Read asv result files: one row per benchmark and parameter cell.

An asv result file (``results/<machine>/<commit>-<env>.json``) holds, per benchmark, columns
(``result_columns``) whose entries are lists over the cross product of the parameter axes, in
``itertools.product`` order; parameter values are stored as their ``repr``.
"""

from __future__ import annotations

import ast
import itertools
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Cell:
    """One benchmark at one parameter cell. ``value`` is None where asv has none (skipped,
    failed or NaN); ``samples`` is None where asv kept no raw samples."""

    benchmark: str
    params: dict[str, object]
    value: float | None
    samples: list[float] | None
    q25: float | None
    q75: float | None
    version: str | None


def load(path: Path) -> dict:
    """The parsed result file; ValueError if it is not one."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable asv result file ({exc})") from None
    if not isinstance(data, dict) or not {"commit_hash", "results", "result_columns"} <= set(data):
        raise ValueError(f"{path}: not an asv result file (no commit_hash/results)")
    return data


def _literal(text: str) -> object:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


def _number(x) -> float | None:
    return None if x is None or (isinstance(x, float) and math.isnan(x)) else float(x)


def cells(data: dict, param_names: dict[str, list[str]] | None = None) -> Iterator[Cell]:
    """Every cell of every benchmark. ``param_names`` (from asv's ``benchmarks.json``) names
    the axes; without it they are ``p0``, ``p1``, ..."""
    columns = data["result_columns"]
    for name, row in data["results"].items():
        col = dict(zip(columns, row, strict=False))
        axes = col.get("params") or []
        names = (param_names or {}).get(name) or [f"p{i}" for i in range(len(axes))]
        if not isinstance(axes, list) or not all(isinstance(a, list) for a in axes):
            raise ValueError(f"{name}: malformed params {str(axes)[:80]}")
        combos = list(itertools.product(*axes)) if axes else [()]
        results = col.get("result")
        if isinstance(results, list) and len(results) != len(combos):
            raise ValueError(f"{name}: {len(results)} results for {len(combos)} cells")
        for i, combo in enumerate(combos):
            yield Cell(
                benchmark=name,
                params={n: _literal(v) for n, v in zip(names, combo, strict=True)},
                value=_number(results[i]) if isinstance(results, list) else None,
                samples=_entry(col, "samples", i),
                q25=_number(_entry(col, "stats_q_25", i)),
                q75=_number(_entry(col, "stats_q_75", i)),
                version=col.get("version"),
            )


def _entry(col: dict, key: str, i: int):
    """Cell ``i`` of a per-cell column; asv stores an all-None column as None."""
    values = col.get(key)
    return values[i] if isinstance(values, list) and i < len(values) else None


def _benchmarks(results_dir: Path) -> dict:
    path = Path(results_dir) / "benchmarks.json"
    if not path.exists():
        return {}
    data = json.loads(path.read_text())
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
