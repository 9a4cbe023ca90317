"""A synthetic history: asv result files for many commits, to exercise the store at scale; and
a store of years of history written straight into DuckDB (``write_store``):

    .venv/bin/python -m ragbench.synth --store PATH --runs 10000 --cells 750 --machines 3

For the suite's own benchmarks (a store of 1,000 commits: ingest speed, query times) and the
dashboard's tests; ``big_result``: one large result file, for the store's write tests and
experiments/reader_wait.py. The files have the layout and columns of real asv results (with a
fingerprint beside each), so they go through the real ingest path. Machine ``synthetic``,
commit hashes derived from ``synthetic-<i>``: nothing here is a measurement, and the machine
name says so wherever the runs show.

The series carry known events: triton's kernel gets 10% faster at commit ``n // 2``, and the
environment moves from torch 2.10 to 2.11 at ``3n // 4`` (the host path 8% slower).
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np

MACHINE = "synthetic"
COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples", "profile"]  # fmt: skip
KERNEL_AXES = [["triton", "fa2", "padded_sdpa"], [1, 64], [0.8], ["deit_b"], ["uniform", "mixed"]]
KERNEL_NAMES = ["backend", "batch", "prune", "geometry", "lengths"]
# per backend: (gpu_us at BS 1, gpu_us at BS 64, host_us)
KERNEL_BASE = {
    "triton": (2.7, 7.2, 8.0),
    "fa2": (5.8, 12.9, 21.0),
    "padded_sdpa": (13.2, 71.2, 40.0),
}
PIPES = ["dense", "padded_full", "fa2", "triton"]
PIPE_BASE = {"dense": 900.0, "padded_full": 1000.0, "fa2": 1300.0, "triton": 1380.0}


def commit(i: int) -> str:
    return hashlib.sha1(f"synthetic-{i}".encode()).hexdigest()


def _benchmarks() -> dict:
    def entry(name, names, axes, unit):
        return {"name": name, "param_names": names, "params": [[repr(v) for v in a] for a in axes],
                "unit": unit, "type": "track", "version": "synthetic-1"}  # fmt: skip

    out = {}
    for m in ("call_us", "gpu_us", "host_us"):
        out[f"kernel.KernelLatency.track_{m}"] = entry(
            f"kernel.KernelLatency.track_{m}", KERNEL_NAMES, KERNEL_AXES, "us"
        )
    for m in ("floor_us", "dispatch_us"):
        out[f"kernel.DispatchFloor.track_{m}"] = entry(
            f"kernel.DispatchFloor.track_{m}", ["backend", "geometry"],
            [KERNEL_AXES[0], ["deit_b"]], "us",
        )  # fmt: skip
    out["pipeline.Throughput.track_img_per_s"] = entry(
        "pipeline.Throughput.track_img_per_s", ["pipeline", "model", "batch"],
        [PIPES, ["deit_base_224"], [1, 64]], "img/s",
    )  # fmt: skip
    for m, unit in (("max_abs_diff", "logit"), ("top1_agreement", "fraction"),
                    ("output_hash", "hash")):  # fmt: skip
        out[f"numerics.Drift.track_{m}"] = entry(
            f"numerics.Drift.track_{m}", ["backend", "model", "method"],
            [["triton", "fa2", "padded_full"], ["deit_base_224"], ["threshold_l2"]], unit,
        )  # fmt: skip
    return out


def _row(values, samples, t0: float) -> list:
    """asv's columns (COLUMNS) of one benchmark; the 99% interval stood in for by the samples'
    range (asv compare reads it)."""

    def stat(f):
        return [float(f(s)) if s is not None else None for s in samples]

    if not any(s is not None for s in samples):
        return [values, None, "synthetic-1", int(t0 * 1e3), 0.5] + [None] * 8
    return [values, None, "synthetic-1", int(t0 * 1e3), 0.5, stat(np.min), stat(np.max),
            stat(lambda s: np.percentile(s, 25)), stat(lambda s: np.percentile(s, 75)),
            stat(lambda s: 1), stat(len), [list(map(float, s)) if s is not None else None
                                           for s in samples], None]  # fmt: skip


def write_history(out: Path, commits: int = 1000, samples: int = 10, seed: int = 0,
                  machine: str = MACHINE, gpu_scale: float = 1.0) -> Path:  # fmt: skip
    """Write ``commits`` runs of ``machine`` under ``out`` (an asv results directory), its
    device times ``gpu_scale`` times the base's (another GPU); -> ``out``."""
    rng = np.random.default_rng(seed)
    out = Path(out)
    (out / machine).mkdir(parents=True, exist_ok=True)
    benchmarks = _benchmarks()
    (out / "benchmarks.json").write_text(json.dumps({**benchmarks, "version": 2}))
    t_start = 1.77e9
    for i in range(commits):
        sha = commit(i)
        faster = 0.9 if i >= commits // 2 else 1.0  # triton kernel: -10% device time
        new_env = i >= 3 * commits // 4  # torch 2.11: +8% host time
        t = t_start + i * 3600
        results = {}

        def noisy(center, spread, n=samples):
            return center * (1 + spread * rng.standard_normal(n))

        per_metric = {"call_us": [], "gpu_us": [], "host_us": []}
        for backend, batch, _, _, lengths in itertools.product(*KERNEL_AXES):
            g1, g64, host = KERNEL_BASE[backend]
            gpu = (g1 if batch == 1 else g64) * (1.3 if lengths == "mixed" else 1.0)
            gpu *= (faster if backend == "triton" else 1.0) * gpu_scale
            host *= 1.08 if new_env else 1.0
            per_metric["gpu_us"].append(noisy(gpu, 0.005))
            per_metric["host_us"].append(noisy(host, 0.05))
            per_metric["call_us"].append(noisy(gpu + host + 15, 0.08))
        for m, cells in per_metric.items():
            results[f"kernel.KernelLatency.track_{m}"] = _row(
                [float(np.median(s)) for s in cells], cells, t
            )
        floors = [per_metric["call_us"][j] for j in (0, 4, 8)]  # BS 1, uniform, per backend
        gpus = [per_metric["gpu_us"][j] for j in (0, 4, 8)]
        dispatch = [f - np.median(g) for f, g in zip(floors, gpus, strict=True)]
        for m, cells in (("floor_us", floors), ("dispatch_us", dispatch)):
            results[f"kernel.DispatchFloor.track_{m}"] = _row(
                [float(np.median(s)) for s in cells], cells, t
            )
        thr = [noisy(PIPE_BASE[p] * (8.0 if b == 64 else 1.0), 0.02, 5)
               for p, b in itertools.product(PIPES, [1, 64])]  # fmt: skip
        results["pipeline.Throughput.track_img_per_s"] = _row(
            [float(np.median(s)) for s in thr], thr, t
        )
        drift = [0.0083 + 0.0004 * (i // 250), 0.0063, 0.0089]
        results["numerics.Drift.track_max_abs_diff"] = _row(drift, [None] * 3, t)
        results["numerics.Drift.track_top1_agreement"] = _row([1.0] * 3, [None] * 3, t)
        hashes = [float(int(sha[:12], 16) if i % 250 == 0 else 17 + i // 250), 23.0, 29.0]
        results["numerics.Drift.track_output_hash"] = _row(hashes, [None] * 3, t)
        for name, row in results.items():
            row[1] = benchmarks[name]["params"]
        data = {"commit_hash": sha, "env_name": "synthetic", "date": int(t * 1e3),
                "params": {"machine": machine}, "python": "3.12", "requirements": {},
                "env_vars": {}, "result_columns": COLUMNS, "results": results,
                "durations": {}, "version": 2}  # fmt: skip
        path = out / machine / f"{sha[:8]}-synthetic.json"
        path.write_text(json.dumps(data))
        fp = {"commit": sha, "machine": machine, "mode": "quick", "harness_version": 1,
              "gpu": "Synthetic GPU" if machine == MACHINE else f"Synthetic GPU ({machine})",
              "driver": "580.00", "cuda": "13.0",
              "torch": "2.11.0" if new_env else "2.10.0", "triton": "3.6.0", "timm": "1.0.29",
              "python": "3.12.3"}  # fmt: skip
        path.with_suffix(".fingerprint").write_text(json.dumps(fp))
    return out


# --- a store at scale, written directly in DuckDB -------------------------------------------
#
#   .venv/bin/python -m ragbench.synth --store PATH --runs 10000 --cells 750 --machines 3
#
# writes ``runs`` commits x ``cells`` cells x ``machines`` machines straight into a new store's
# tables (the real schema; the SQL in ``ragbench/store/synthetic.py``): 22.5M measurement rows in
# minutes, where ingesting as many result files would take hours. The cells are the suite's
# benchmarks over a larger parameter grid (``scale_cells``); no raw samples are kept (``n`` 10,
# quartiles from the noise): detection and the dashboard read medians. Known events
# (``scale_events``), so that detection can be checked on it:
#
#   step-triton   every triton ``gpu_us`` cell 10% faster from commit ``runs // 2``, all machines
#   step-fa2      fa2 ``gpu_us`` cells of geometry deit_b 6% slower from ``4 * runs // 5``, on
#                 the first machine only
#   env-torch     the environment moves from torch 2.10 to 2.11 at ``3 * runs // 4`` (a new
#                 ``env_key``) on every machine: ``host_us`` 8% slower, padded_sdpa ``gpu_us``
#                 4% slower
#   newest        on the first machine's newest commit, the two triton ``gpu_us`` cells of
#                 batch 64, prune 0.8, deit_b (uniform and mixed lengths) 20% slower: a
#                 regression ``detect`` must flag
#
# Noise: ``gpu_us`` 0.5% (normal), ``host_us`` 5%, dispatch floors 8%; one ``gpu_us`` value in
# 500 is an outlier 30% slow. Random numbers come from DuckDB's ``hash`` of (machine, commit,
# cell), so the store is the same whatever the number of threads.

SCALE_MACHINES = [("synthetic-h100", 1.0), ("synthetic-ada", 2.4), ("synthetic-h200", 0.9)]
SCALE_GRID = {
    "backend": ["triton", "fa2", "padded_sdpa"],
    "batch": [1, 8, 32, 64, 128],
    "prune": [0.0, 0.5, 0.8],
    "geometry": ["deit_t", "deit_s", "deit_b", "deit_b_384"],
    "lengths": ["uniform", "mixed"],
}
GEOMETRY_SCALE = {"deit_t": 0.35, "deit_s": 0.6, "deit_b": 1.0, "deit_b_384": 2.6}
SCALE_ENV = [  # (from commit fraction, fingerprint fields)
    (0.0, {"driver": "580.00", "cuda": "13.0", "torch": "2.10.0", "triton": "3.6.0",
           "python": "3.12.3"}),
    (0.75, {"driver": "580.00", "cuda": "13.0", "torch": "2.11.0", "triton": "3.6.0",
            "python": "3.12.3"}),
]  # fmt: skip
MAX_SCALE_CELLS = 750


BIG_BENCH = "kernel.Big.track_gpu_us"


def big_result(out: Path, cells: int, index: int = 0, refuse: bool = False) -> Path:
    """An asv results directory under ``out`` holding one result file of ``cells`` cells of one
    benchmark (two axes), each a value and its quartiles; ``refuse``: the last cell's value is
    negative, so the file is refused only after all of it was read and checked. -> the file."""
    side = int(cells**0.5)
    axes = [list(range(side)), list(range(cells // side))]
    n = len(axes[0]) * len(axes[1])
    (out / MACHINE).mkdir(parents=True, exist_ok=True)
    bench = {"name": BIG_BENCH, "param_names": ["batch", "tokens"], "unit": "us", "type": "track",
             "params": [[repr(v) for v in a] for a in axes], "version": "big-1"}  # fmt: skip
    (out / "benchmarks.json").write_text(json.dumps({BIG_BENCH: bench, "version": 2}))
    values = [round(10 + (i * 7919 % 1000) / 100, 2) for i in range(n)]
    if refuse:
        values[-1] = -1.0
    t = 1.77e9 + index * 3600
    row = [values, bench["params"], "big-1", int(t * 1e3), 1.0, None, None,
           [round(v * 0.98, 2) for v in values], [round(v * 1.02, 2) for v in values],
           None, None, None, None]  # fmt: skip
    data = {"commit_hash": commit(100_000 + index), "env_name": "big", "date": int(t * 1e3),
            "params": {"machine": MACHINE}, "python": "3.12", "requirements": {},
            "env_vars": {}, "result_columns": COLUMNS, "results": {BIG_BENCH: row},
            "durations": {}, "version": 2}  # fmt: skip
    path = out / MACHINE / f"{data['commit_hash'][:8]}-big.json"
    path.write_text(json.dumps(data, separators=(",", ":")))
    return path


def scale_cells(n: int = MAX_SCALE_CELLS) -> list[dict]:
    """The first ``n`` (at most 750) cells of the scale store: each with its benchmark, metric,
    params, unit, base value, relative noise and the events it takes part in. The gpu_us cells
    come first (360: the ones detection judges), then host_us (360, paired: no change points),
    dispatch floors (24) and drift (6)."""
    if not 1 <= n <= MAX_SCALE_CELLS:
        raise ValueError(f"the scale store has 1 to {MAX_SCALE_CELLS} cells a run, not {n}")
    out = []
    grid = [dict(zip(SCALE_GRID, v, strict=True)) for v in itertools.product(*SCALE_GRID.values())]
    for metric in ("gpu_us", "host_us"):
        for p in grid:
            g1, g64, host = KERNEL_BASE[p["backend"]]
            gpu = (g1 + (g64 - g1) * (p["batch"] - 1) / 63) * GEOMETRY_SCALE[p["geometry"]]
            gpu *= (1 - 0.6 * p["prune"]) * (1.3 if p["lengths"] == "mixed" else 1.0)
            gpu_cell = metric == "gpu_us"
            out.append({
                "benchmark": "kernel.KernelLatency", "metric": metric, "params": p, "unit": "us",
                "base": gpu if gpu_cell else host, "noise": 0.005 if gpu_cell else 0.05,
                "device": gpu_cell,
                "triton": gpu_cell and p["backend"] == "triton",
                "fa2": gpu_cell and p["backend"] == "fa2" and p["geometry"] == "deit_b",
                "env": 1.08 if not gpu_cell else 1.04 if p["backend"] == "padded_sdpa" else 1.0,
                "newest": gpu_cell and p["backend"] == "triton" and p["batch"] == 64
                and p["prune"] == 0.8 and p["geometry"] == "deit_b",
            })  # fmt: skip
    for metric in ("floor_us", "dispatch_us"):
        for backend, geometry in itertools.product(SCALE_GRID["backend"], SCALE_GRID["geometry"]):
            host = KERNEL_BASE[backend][2]
            out.append({"benchmark": "kernel.DispatchFloor", "metric": metric,
                        "params": {"backend": backend, "geometry": geometry}, "unit": "us",
                        "base": host + (15 if metric == "floor_us" else 12), "noise": 0.08,
                        "device": False, "triton": False, "fa2": False, "env": 1.08,
                        "newest": False})  # fmt: skip
    for metric, unit, value in (("max_abs_diff", "logit", 0.0083), ("output_hash", "hash", 17.0)):
        for backend in ("triton", "fa2", "padded_full"):
            out.append({"benchmark": "numerics.Drift", "metric": metric,
                        "params": {"backend": backend, "model": "deit_base_224",
                                   "method": "threshold_l2"}, "unit": unit,
                        "base": value, "noise": 0.0, "device": False, "triton": False,
                        "fa2": False, "env": 1.0, "newest": False})  # fmt: skip
    return out[:n]


def scale_events(runs: int, machines: int = 3) -> dict[tuple, list[int]]:
    """The known change points of the scale store: ``(machine, benchmark, metric, param_key)``
    -> the commit indices (0 = oldest) where a new level starts, for the gpu_us and host_us
    series (the ones ``scale_cells`` gives events). The ``newest`` regression is one point,
    not a level: it is not listed."""
    from .store import param_key

    out: dict[tuple, list[int]] = {}
    env_at = int(SCALE_ENV[1][0] * runs)
    for m in range(min(machines, len(SCALE_MACHINES))):
        name = SCALE_MACHINES[m][0]
        for c in scale_cells():
            if c["benchmark"] != "kernel.KernelLatency":
                continue
            at = []
            if c["triton"]:
                at.append(runs // 2)
            if c["fa2"] and m == 0:
                at.append(4 * runs // 5)
            if c["env"] != 1.0:
                at.append(env_at)
            out[(name, c["benchmark"], c["metric"], param_key(c["params"]))] = sorted(at)
    return out


def write_store(path: Path, runs: int = 10_000, cells: int = MAX_SCALE_CELLS,
                machines: int = 3, *, chunk: int = 500) -> dict:  # fmt: skip
    """A new store at ``path`` holding ``runs`` commits of ``cells`` cells on ``machines``
    machines (module notes above); -> rows per table. ``chunk`` commits per insert (bounded
    memory: the primary key's index grows with each)."""
    from .store import Run as _Run
    from .store import Store, env_key, param_key, synthetic
    from .suite_views import SUITE_VIEWS

    path = Path(path)
    if path.exists():
        raise ValueError(f"{path} exists: the scale store is written into a new file only")
    if not 1 <= machines <= len(SCALE_MACHINES):
        raise ValueError(f"1 to {len(SCALE_MACHINES)} machines, not {machines}")
    Store(path, views=SUITE_VIEWS)  # the schema, as every store of this suite gets it
    cell_rows = []
    for j, c in enumerate(scale_cells(cells)):
        p = c["params"]
        variant = p.get("backend")
        group = {k: v for k, v in p.items() if k != "backend"}
        cell_rows.append((j, c["benchmark"], c["metric"], json.dumps(p, sort_keys=True),
                          param_key(p), variant, param_key(group), c["unit"], c["base"],
                          c["noise"], c["device"], c["triton"], c["fa2"], c["env"],
                          c["newest"]))  # fmt: skip
    t0 = 1.70e9
    env_at = int(SCALE_ENV[1][0] * runs)
    machine_rows = []
    for m, (name, scale) in enumerate(SCALE_MACHINES[:machines]):
        keys = []
        for _, fields in SCALE_ENV:
            fp = {**fields, "gpu": f"Synthetic GPU ({name})"}
            keys.append((env_key(fp), fp))
        machine_rows.append((m, name, scale, *keys[0], *keys[1]))
    # one run per machine and commit; run ids as ingest derives them (``Run.run_id``)
    run_rows = []
    for m, name, *_ in machine_rows:
        for i in range(runs):
            t = t0 + i * 3600
            run = _Run(source="asv", commit_hash=commit(i), machine=name, started_at=t + 60,
                       branch="main", env_name="synthetic")  # fmt: skip
            run_rows.append((run.run_id, m, i, run.commit_hash))
    return synthetic.write_scale(
        path, cell_rows, machine_rows, run_rows, runs=runs, env_at=env_at, t0=t0, chunk=chunk
    )


def main(argv: list[str] | None = None) -> int:
    import argparse
    import time

    ap = argparse.ArgumentParser(prog=".venv/bin/python -m ragbench.synth", description=(
        "Write the scale store: RUNS commits x CELLS cells x MACHINES machines straight into a "
        "new DuckDB store (known events: ragbench/synth.py)."))  # fmt: skip
    ap.add_argument("--store", type=Path, required=True, help="a new file")
    ap.add_argument("--runs", type=int, default=10_000)
    ap.add_argument("--cells", type=int, default=MAX_SCALE_CELLS)
    ap.add_argument("--machines", type=int, default=3)
    args = ap.parse_args(argv)
    start = time.monotonic()
    try:
        counts = write_store(args.store, args.runs, args.cells, args.machines)
    except ValueError as exc:
        print(f"ragbench.synth: error: {exc}")
        return 2
    print(f"{args.store}: {counts['runs']:,} runs, {counts['measurements']:,} measurements "
          f"in {time.monotonic() - start:.0f} s")  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
