"""Calibrate the regression gate: false alarms on A/A runs, detection of injected slowdowns.

    python -m scripts.calibrate collect --out DIR [--seconds 540]   # on a CUDA GPU
    python -m scripts.calibrate analyze DIR [DIR ...] [--write docs/calibration.md]

``collect`` runs the quick grid's kernel benchmarks (the PR gate's latency cells) in separate
processes, one per run as the gate's asv runs are, in blocks that mimic a gate job: base and
head alternating for the gate's rounds, then one more pair for the re-measurement. The head of
a block is the same code (A/A) or the triton kernel slowed by 2%, 5% or 10% of its device time
(``benchmarks/_inject.py``); blocks cycle through those conditions until ``--seconds`` pass.
Each run is one JSON file of the values asv would record, read through the suite's own classes.

``analyze`` feeds the blocks to ``ragbench.detect`` with the policies in force and reports the
false-alarm rate per gate run (A/A blocks) and the detection rate of each injected slowdown.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

CONDITIONS = (0.0, 0.02, 0.05, 0.10)  # head's injected slowdown: 0 is A/A
ROUNDS = 2  # base/head pairs per gate run (ragbench gate --rounds)
BLOCK = ROUNDS + 1  # + the re-measurement of flagged cells


def _classes():
    from benchmarks import kernel

    return (kernel.KernelLatency, kernel.DispatchFloor)


def measure(inject: float) -> dict:
    """One run: the kernel grid measured in this process, as asv's cells would hold it."""
    os.environ["RAGBENCH_INJECT_SLOWDOWN"] = str(inject)
    from benchmarks import _measure

    t0 = time.time()
    cache = _measure.kernels(None)
    cells = []
    for cls in _classes():
        for params in itertools.product(*cls.params):
            bench = cls()
            try:
                bench.setup(cache, *params)
            except NotImplementedError:
                continue
            for name in dir(cls):
                if not name.startswith("track_"):
                    continue
                value = getattr(bench, name)(cache, *params)
                if isinstance(value, dict):
                    value = value["samples"]
                elif value != value:  # NaN: no such metric for this cell
                    continue
                cells.append({
                    "benchmark": f"kernel.{cls.__name__}.{name}",
                    "params": dict(zip(cls.param_names, params, strict=True)),
                    "samples": value,
                    "injected": bench.cell.get("injected"),
                })  # fmt: skip
    return {"inject": inject, "started": t0, "seconds": time.time() - t0, "cells": cells}


def collect(out: Path, seconds: float) -> int:
    out.mkdir(parents=True, exist_ok=True)
    t_end = time.time() + seconds
    run = len(list(out.glob("run-*.json")))
    for block in itertools.count(run // (2 * BLOCK)):
        condition = CONDITIONS[block % len(CONDITIONS)]
        if time.time() + 2 * BLOCK * 12 > t_end:  # ~12 s a run on the H100 VM
            break
        for i in range(2 * BLOCK):
            inject = condition if i % 2 else 0.0
            path = out / f"run-{run:04d}.json"
            cmd = [sys.executable, "-m", "scripts.calibrate", "measure", "--inject", str(inject)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stderr[-3000:], file=sys.stderr)
                return 1
            data = json.loads(res.stdout)
            data.update(block=block, condition=condition, side="head" if i % 2 else "base")
            path.write_text(json.dumps(data))
            print(f"run {run} block {block} {data['side']} inject {inject}: "
                  f"{data['seconds']:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
            run += 1
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="one run (a separate process): JSON on stdout")
    m.add_argument("--inject", type=float, default=0.0, help="slowdown of the triton kernel")
    c = sub.add_parser("collect", help="blocks of runs into DIR (CUDA GPU)")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--seconds", type=float, default=540, help="stop starting blocks after this")
    args = ap.parse_args(argv)
    if args.command == "measure":
        print(json.dumps(measure(args.inject)))
        return 0
    return collect(args.out, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
