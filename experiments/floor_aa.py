"""An A/A calibration of ``kernel.GpuFloor.over_empty``: the suite's measurement
(``benchmarks.support.floor.measure`` on the default triton call, DeiT-B heads, uniform
lengths) in one process, printed as one JSON line of per-workload medians. Run it N times as N
processes: the spread of the medians between processes is the run-to-run noise a commit's
over_empty moves by with no change, which the policy's threshold must clear.

    for i in 1 2 3; do python -m experiments.floor_aa --out $OUT/aa$i.json; done
    python -m experiments.floor_aa --summarize $OUT/aa*.json

Exit codes: 0 measured (or summarized), 2 no GPU / unreadable input.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

WORKLOADS = ((1, 0.8), (8, 0.5), (1, 0.5), (32, 0.8), (64, 0.0))


def measure(rounds: int) -> dict:
    import torch

    from benchmarks.support import floor, harness, workloads

    harness.spin_up(0.5)
    out = {"device": torch.cuda.get_device_name(), "rounds": rounds, "cells": {}}
    for batch, prune in WORKLOADS:
        inputs = workloads.kernel_inputs(batch, prune, "deit_b", "uniform")
        call = workloads.attention("triton", *inputs)
        call()  # the checked call: plans, compiles, remembers
        m = floor.measure(call, rounds=rounds)
        out["cells"][f"{batch} / {prune:.0%}"] = {k: statistics.median(v) for k, v in m.items()}
    return out


def summarize(paths: list[Path]) -> dict:
    runs = [json.loads(p.read_text()) for p in paths]
    rows = {}
    for label in runs[0]["cells"]:
        vals = [r["cells"][label]["over_empty"] for r in runs]
        gpu = [r["cells"][label]["gpu_us"] for r in runs]
        rows[label] = {"over_empty": vals, "gpu_us": gpu,
                       "spread": (max(vals) - min(vals)) / statistics.median(vals)}  # fmt: skip
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path)
    p.add_argument("--rounds", type=int, default=30)
    p.add_argument("--summarize", nargs="+", type=Path)
    args = p.parse_args(argv)
    if args.summarize:
        try:
            rows = summarize(args.summarize)
        except (OSError, ValueError, KeyError) as exc:
            print(f"floor_aa: cannot read the runs: {exc}", file=sys.stderr)
            return 2
        for label, r in rows.items():
            print(
                f"{label}: over_empty {' '.join(f'{v:.3f}' for v in r['over_empty'])} "
                f"(spread {r['spread']:.1%}); gpu_us {' '.join(f'{v:.2f}' for v in r['gpu_us'])}"
            )
        return 0
    import torch

    if not torch.cuda.is_available():
        print("floor_aa: needs a CUDA GPU", file=sys.stderr)
        return 2
    doc = measure(args.rounds)
    print(json.dumps(doc))
    if args.out:
        args.out.write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
