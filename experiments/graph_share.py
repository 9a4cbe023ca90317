"""Triton's share of the graph bound (``graph_share_of_bound``'s point estimate) for several
models, methods and batches in one process, on a machine without scipy.

For each (model, method, batch) the three pipelines of the metric, ``fa2_graph``,
``triton_graph`` and ``no_attention_graph``, are captured and timed in turns
(``bound.turns_us``: one forward of each after the other, each from a synced device to its
own sync, the order rotated each turn); the share is ``bound.share_of_bound``'s point
estimate, (median of fa2/triton - 1) / (median of fa2/no_attention - 1) over rounds, NaN
where the bound's median gain over fa2 is not above 0. Its bootstrap interval needs scipy,
which the GPU machines lack: not computed here (``pipeline_bench`` computes it).

``--previous`` runs the kernel default before the 257-512-key short-batch class (above 256
keys the table's kernel, ``config.SHORT_BATCH_KEYS`` set back to 256 before anything
launches): run once with it and once without for a before/after of that class.

    python -m experiments.graph_share [--models deit_base_384] [--methods threshold_l2 ats]
        [--batches 1 4] [--rounds 31] [--previous] [--out share.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

from benchmarks.support import workloads
from benchmarks.support.bound import gain, share, turns_us
from ragged.kernels import config

ARMS = ("fa2_graph", "triton_graph", "no_attention_graph")
PREVIOUS_KEYS = 256  # the short-batch classes' longest max_seqlen before the 257-512 class


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", default=["deit_base_384"])
    p.add_argument("--methods", nargs="*", default=["threshold_l2", "ats"])
    p.add_argument("--batches", nargs="*", type=int, default=[1, 4])
    p.add_argument("--rounds", type=int, default=31)
    p.add_argument("--previous", action="store_true",
                   help="the kernel default before the 257-512-key class")  # fmt: skip
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("graph_share: needs a CUDA GPU; none here.", file=sys.stderr)
        return 2
    if args.previous:
        config.SHORT_BATCH_KEYS = PREVIOUS_KEYS
    rows = []
    for model_name in args.models:
        model = workloads.build(model_name)
        for method_name in args.methods:
            for batch in args.batches:
                images = workloads.images(model_name, batch)
                method = workloads.make_method(method_name, model)
                fns = {}
                for arm in ARMS:
                    pipe = workloads.pipeline(model, method, arm)
                    fns[arm] = lambda pipe=pipe, im=images: pipe.forward(im, check_overflow=False)
                samples = turns_us(fns, args.rounds)
                arms = [samples[a] for a in ARMS]  # fa2, triton, the bound
                point = share(*arms) if gain(arms[0], arms[2]) > 0 else float("nan")
                med = {a: statistics.median(samples[a]) for a in ARMS}
                rows.append({"model": model_name, "method": method_name, "batch": batch,
                             "previous": args.previous, "graph_share_of_bound": point,
                             "median_us": med, "samples_us": samples})  # fmt: skip
                print(f"{model_name} {method_name} BS {batch}"
                      f"{' (previous default)' if args.previous else ''}: graph_share_of_bound "
                      f"{point:.3f}; µs a forward: fa2_graph {med['fa2_graph']:.1f}, "
                      f"triton_graph {med['triton_graph']:.1f}, no_attention_graph "
                      f"{med['no_attention_graph']:.1f}", flush=True)  # fmt: skip
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
