"""A synthetic history: asv result files for many commits, to exercise the store at scale.

For the suite's own benchmarks (a store of 1,000 commits: ingest speed, query times) and the
dashboard's tests. The files have the layout and columns of real asv results (with a
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
