"""The suite's cells as asv names and selects them.

A cell is ``(benchmark, metric, param_key)`` as the store keys it; asv names its benchmark
``benchmark.track_metric`` (``time_``, ``peakmem_`` and ``mem_`` metrics keep their prefix)
and, for ``--bench``, a parameterized one as ``name(param0, param1, ...)``: each value the
``repr`` asv wrote, in the order of the benchmark's ``param_names``. ``bench_regex`` gives the
patterns that select exactly some cells, without knowing that order: each of the cell's
values must be one of the call's arguments. ``discover`` lists the benchmarks asv finds in
this checkout's suite for a grid mode, and ``check_cell`` refuses a cell that is not one of
them (an unknown benchmark, metric, parameter or value), before anything is measured.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
from pathlib import Path

from .asv_results import param_values
from .verdicts.comparison import Key

# this checkout, whose suite ``discover`` lists (never another repository a command's git
# works in)
HERE = Path(__file__).resolve().parent.parent
PREFIXES = ("time_", "peakmem_", "mem_")  # asv's kinds whose metric keeps its prefix


class CellError(ValueError):
    """A cell the suite does not have (exit 2)."""


def cell_text(key: Key) -> str:
    """A cell as the reports, alerts and commands name it: ``bench.metric params`` (no
    parameters: no space); ``parse_cell`` reads it back."""
    return f"{key[0]}.{key[1]} {key[2]}".rstrip()


def parse_cell(text: str, flag: str = "--cell") -> Key:
    """``"benchmark.metric params"`` (``cell_text``) -> its key; CellError naming ``flag``
    where it is not one."""
    name, _, params = text.strip().partition(" ")
    benchmark, _, metric = name.rpartition(".")
    if not benchmark or not metric:
        raise CellError(f"{flag} {text!r}: expected 'benchmark.metric params', as the reports "
                        "and ragbench alerts name a cell")  # fmt: skip
    return (benchmark, metric, params.strip())


def asv_name(key: Key) -> str:
    """The asv benchmark of a cell: ``kernel.KernelLatency.track_gpu_us``."""
    benchmark, metric, _ = key
    method = metric if metric.startswith(PREFIXES) else f"track_{metric}"
    return method if benchmark == metric else f"{benchmark}.{method}"


# a comma that starts the next ``name=``: a value's own commas stay in it (asv's tuple
# parameter ``shape=(10, 10)``, pytest's id ``param=a,b``)
_NEXT_PARAM = re.compile(r",(?=[^,=]+=)")


def parse_params(param_key: str) -> dict[str, str]:
    """``"backend=triton,batch=1"`` -> ``{"backend": "triton", "batch": "1"}``; a value keeps
    its commas (``"shape=(10, 10)"`` -> ``{"shape": "(10, 10)"}``)."""
    if not param_key:
        return {}
    out = {}
    for part in _NEXT_PARAM.split(param_key):
        name, eq, value = part.partition("=")
        if not eq or not name:
            raise CellError(f"params {param_key!r}: expected name=value,... (as the report "
                            "names them)")  # fmt: skip
        out[name.strip()] = value.strip()
    return out


def _argument(text: str) -> str:
    """A pattern of one argument in asv's name: the text as the store keeps it, or the
    ``repr`` of that text (a string axis: ``triton`` was ``'triton'``)."""
    forms = sorted({re.escape(text), re.escape(repr(text))})
    return f"(?:{'|'.join(forms)})"


def selects(bench, key: Key) -> bool:
    """Whether asv ``--bench`` patterns (``bench``; none: every cell) select the cell ``key``:
    one searched in its benchmark's name, or, for a parameterized one, in that name with its
    arguments (``name(a, b)``, the values as the store keeps them or as their ``repr``), as asv
    selects one combination of a parameterized benchmark."""
    if not bench:
        return True
    name = asv_name(key)
    values = list(parse_params(key[2]).values())
    names = [name]
    if values:
        names += [f"{name}({', '.join(values)})", f"{name}({', '.join(map(repr, values))})"]
    return any(re.search(b, n) for b in bench for n in names)


def bench_regex(keys: list[Key]) -> list[str]:
    """asv ``--bench`` patterns that select exactly these cells: one a cell, its benchmark's
    name and, for a parameterized one, each of its values as one whole argument of
    ``name(...)`` (in whatever order the benchmark declares its axes; the name ends at ``(``,
    so ``track_gpu_us`` never selects ``track_gpu_us_total``)."""
    out = []
    for key in keys:
        name = re.escape(asv_name(key))
        values = parse_params(key[2]).values()
        if not values:
            out.append(rf"^{name}$")
            continue
        args = "".join(rf"(?=(?:.*, )?{_argument(v)}(?:, .*)?\)$)" for v in values)
        out.append(rf"^{name}\({args}")
    return list(dict.fromkeys(out))


@functools.cache
def discover(mode: str = "quick") -> dict[str, dict]:
    """The benchmarks asv discovers in this checkout's suite under ``RAGBENCH_MODE=mode``:
    ``{name: {"params": [[repr, ...], ...], "param_names": [...]}}`` (asv_runner's own
    discovery, in a fresh process: the grids are read at import). CellError where it fails."""
    from .project import asv_config

    code = ("import sys; from asv_runner.discovery import list_benchmarks; "
            "list_benchmarks(sys.argv[1], sys.stdout)")  # fmt: skip
    conf = asv_config(HERE / "asv.conf.json")
    root = str(HERE / conf.get("benchmark_dir", "benchmarks"))
    env = {**os.environ, "RAGBENCH_MODE": mode}
    out = subprocess.run([sys.executable, "-c", code, root], cwd=HERE, env=env,
                         capture_output=True, text=True)  # fmt: skip
    try:
        found = json.loads(out.stdout) if out.returncode == 0 else None
    except ValueError:
        found = None
    if not isinstance(found, list):
        last = (out.stderr.strip().splitlines() or ["no output"])[-1][:200]
        raise CellError(f"asv's discovery of the suite failed (exit {out.returncode}): {last}")
    return {b["name"]: {"params": b.get("params") or [], "param_names": b.get("param_names")
                        or []} for b in found if "name" in b}  # fmt: skip


def check_cell(key: Key, benchmarks: dict[str, dict], mode: str = "quick") -> None:
    """CellError, one line, where the suite (``discover``'s listing) has no such cell: its
    benchmark, its metric, its parameter names, or one of its values (in ``mode``'s grid)."""
    benchmark, metric, param_key = key
    name = asv_name(key)
    info = benchmarks.get(name)
    if info is None:
        metrics = sorted(n.rpartition(".")[2].removeprefix("track_") for n in benchmarks
                         if n.rpartition(".")[0] == benchmark)  # fmt: skip
        if metrics:
            raise CellError(f"{benchmark} has no metric {metric!r} (its metrics: "
                            f"{', '.join(metrics)})")  # fmt: skip
        raise CellError(f"no benchmark {benchmark!r} in this suite (asv discovers "
                        f"{len({n.rpartition('.')[0] for n in benchmarks})} benchmarks; "
                        "name it as the gate's report does)")  # fmt: skip
    given = parse_params(param_key)
    names = list(info["param_names"])
    if sorted(given) != sorted(names):
        takes, got = (", ".join(sorted(n)) or "none" for n in (names, given))
        raise CellError(f"{benchmark}.{metric} takes the params {takes}, not {got}")
    for axis_name, axis in zip(names, info["params"], strict=True):
        values = [str(v) for v in param_values(axis)]
        if given[axis_name] not in values:
            full = "; --mode full measures the full grid" if mode == "quick" else ""
            raise CellError(f"{benchmark}.{metric}: {axis_name}={given[axis_name]} is not in "
                            f"the {mode} grid (its values: {', '.join(values)}){full}")  # fmt: skip
