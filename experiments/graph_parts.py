"""Where the CUDA-graph pipelines' GPU time goes: every kernel of one replayed forward of
``triton_graph``, ``fa2_graph`` and ``no_attention_graph`` (the graph bound), by kind.

For each (model, method, batch) the three pipelines are built and captured, then replayed
``--forwards`` times under ``torch.profiler`` (CUPTI records every kernel of a graph replay);
kernels are grouped by kind (attention: the ragged kernels or FA2's; pack/unpack/gather:
ragged's packing kernels; gemm: cuBLAS; the rest: elementwise, norms, softmax of the
pruning step), their GPU µs per forward summed, and the forward's own GPU span (first kernel
start to last kernel end) and wall µs per replay (host synced) printed beside them. What
separates triton from the graph bound is then readable kernel by kernel: what the attention
kernels cost against FA2's, and whether anything else differs.

    python -m experiments.graph_parts [--models deit_base_224 deit_base_384]
        [--methods threshold_l2] [--batches 1 4] [--forwards 50] [--out parts.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

from benchmarks.support import workloads

ARMS = ("triton_graph", "fa2_graph", "no_attention_graph")


def kind_of(name: str) -> str:
    """A kernel's kind from its name."""
    n = name.lower()
    if any(s in n for s in ("varlen_fwd", "onetile", "specloop", "flash")):
        return "attention"
    if any(s in n for s in ("pack", "gather", "scatter", "index")):
        return "pack/unpack/gather"
    if any(s in n for s in ("gemm", "sm90_xmma", "cutlass", "cublas", "nvjet")):
        return "gemm"
    if "layer_norm" in n or "norm" in n:
        return "norm"
    return "other"


def profile(fn, forwards: int) -> tuple[dict, list[float], float]:
    """(kernel name -> GPU µs per forward, each forward's wall µs, GPU span µs per forward)."""
    fn()
    torch.cuda.synchronize()
    walls = []
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(forwards):
            t0 = time.perf_counter()
            fn()
            torch.cuda.synchronize()
            walls.append((time.perf_counter() - t0) * 1e6)
    per_name = defaultdict(float)
    spans = []
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA and e.device_time > 0:
            per_name[e.name] += e.device_time / forwards
            spans.append((e.time_range.start, e.time_range.end))
    span = (max(b for _, b in spans) - min(a for a, _ in spans)) / forwards if spans else 0.0
    return dict(per_name), walls, span


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--models", nargs="*", default=["deit_base_224", "deit_base_384"])
    p.add_argument("--methods", nargs="*", default=["threshold_l2"])
    p.add_argument("--batches", nargs="*", type=int, default=[1, 4])
    p.add_argument("--forwards", type=int, default=50)
    p.add_argument("--out", type=Path)
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("graph_parts: needs a CUDA GPU; none here.", file=sys.stderr)
        return 2
    rows = []
    for model_name in args.models:
        model = workloads.build(model_name)
        for method_name in args.methods:
            for batch in args.batches:
                images = workloads.images(model_name, batch)
                method = workloads.make_method(method_name, model)
                for arm in ARMS:
                    pipe = workloads.pipeline(model, method, arm)
                    per_name, walls, span = profile(
                        lambda pipe=pipe, images=images: pipe.forward(images, check_overflow=False),
                        args.forwards,
                    )
                    kinds = defaultdict(float)
                    for name, us in per_name.items():
                        kinds[kind_of(name)] += us
                    rows.append({"model": model_name, "method": method_name, "batch": batch,
                                 "arm": arm, "wall_us": statistics.median(walls),
                                 "span_us": span, "kinds": dict(kinds),
                                 "kernels": per_name})  # fmt: skip
                    r = rows[-1]
                    parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(kinds.items()))
                    print(f"{model_name} {method_name} BS {batch} {arm}: wall "
                          f"{r['wall_us']:.1f} µs, GPU span {span:.1f}, busy "
                          f"{sum(kinds.values()):.1f}: {parts}", flush=True)  # fmt: skip
                    top = sorted(per_name.items(), key=lambda kv: -kv[1])
                    for name, us in top:
                        if kind_of(name) in ("attention", "pack/unpack/gather") or us > 20:
                            print(f"    {us:8.2f} µs  {name[:110]}", flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
