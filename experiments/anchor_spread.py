"""How much main's dispatch-floor series moves when one commit is run again and again.

    python -m experiments.anchor_spread [--processes 20] [--out FILE]     # on a CUDA GPU

Each fresh process measures the triton call at the dispatch floor's workload (BS 1, 80%
pruned, ``grids.GEOMETRIES``) as the kernel table does (``call_us`` and ``host_us`` medians)
and then ``kernel.AnchoredFloor``'s ratios to the anchor revision (``measure.anchor_table``, the
code the suite runs). The spread of each over the processes (max / min of their medians) is
what a history of that metric would see for a commit that did not change.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path


def child() -> dict:
    from benchmarks.support import grids, harness, workloads
    from benchmarks.support import measure as _measure

    harness.spin_up()
    batch, prune, lengths = grids.FLOOR
    out = {}
    for geometry in grids.GEOMETRIES:
        fn = workloads.attention(
            "triton", *workloads.kernel_inputs(batch, prune, geometry, lengths)
        )
        harness.warmup(fn)
        out[geometry] = {
            "floor_us": harness.call_us(fn, 200).median,
            "host_us": harness.host_us(fn).median,
        }
    for (geometry,), cell in _measure.anchor_table(workloads).items():
        if "skip" in cell:
            raise RuntimeError(cell["skip"])
        out[geometry] |= {k: statistics.median(v) for k, v in cell.items()}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--processes", type=int, default=20)
    ap.add_argument("--out", type=Path, default=None, help="also write the raw medians (JSON)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child()))
        return 0
    from benchmarks.support.harness import ANCHOR
    from benchmarks.support.measure import ANCHOR_ENV
    from ragbench import git

    runs = []
    with tempfile.TemporaryDirectory() as tmp, git.worktree(ANCHOR, Path(tmp)) as anchor:
        env = {**os.environ, ANCHOR_ENV: str(anchor)}
        for i in range(args.processes):
            res = subprocess.run([sys.executable, "-m", "experiments.anchor_spread", "--child"],
                                 env=env, capture_output=True, text=True)  # fmt: skip
            if res.returncode != 0:
                print(res.stderr[-2000:], file=sys.stderr)
                return 1
            runs.append(json.loads(res.stdout.strip().splitlines()[-1]))
            print(f"process {i + 1}/{args.processes}: {runs[-1]}", file=sys.stderr, flush=True)
    if args.out:
        args.out.write_text(json.dumps(runs, indent=1))
    print(f"{len(runs)} fresh processes of one commit; spread = max / min of their medians\n")
    print("| geometry | floor_us | host_us | AnchoredFloor.floor_ratio | host_ratio |")
    print("|---|---|---|---|---|")
    for geometry in runs[0]:
        cols = []
        for metric in ("floor_us", "host_us", "floor_ratio", "host_ratio"):
            v = [r[geometry][metric] for r in runs]
            cols.append(f"{max(v) / min(v):.3f} (median {statistics.median(v):.4g})")
        print(f"| {geometry} | {' | '.join(cols)} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
