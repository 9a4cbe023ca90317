"""Where triton's share of the bound goes: the eager ragged pipeline with its attention call
replaced, part by part, all in one process, timed in turns (``pipeline_bench.turns_us``).

  fa2, triton, no_attention, launch_only   as in ``pipeline_bench --sections bound``
  grid1     triton's own kept launch with a grid of one program: its host path, ~no GPU time
  kept_empty1, kept_empty16   triton's kept launch through fastpath.cpp, one program of an
            empty kernel with one parameter (launch_only's kernel) or with triton's 16
  pydirect  triton's kernel with the kept arguments, launched from Python (no checks)
  empty16   an empty kernel with triton's 16 parameters, launched as pydirect launches

Per arm: its cost per attention call over no_attention (µs, median over rounds [95%
interval]), and triton's share of the bound that arm would set (``share_of_bound``; on
the rows of triton and of the triton pipelines below, their own share of no_attention's).
DeiT-B 224, Threshold-L2 keeping half the patches after block 4 (``--method ats``: ATS, whose
lengths and rows come from the data), fp16, BS 1 and 4.

``--base SRC`` adds the triton pipeline of another revision (``SRC/ragged``, e.g. a
``git worktree`` of the commit before a change, loaded as ``benchmarks.support.paired`` loads one)
as arm ``base``, and a second triton pipeline of this tree as ``head2``; then prints
triton - base and head2 - triton (what arm identity alone moves) per call, and the img/s
ratios: a change's A/B in one process, in the same turns as the bound.

``--compare-timings`` instead measures fa2, triton and no_attention three times with each
timing of ``pipeline_bench`` (40 ms rounds of back-to-back forwards, and turns), alternating
in one process: the share and how wide its interval is under each.

    python -m experiments.bound_parts [--rounds 101] [--batches 1 4] [--parts NAME ...]
        [--base SRC] [--method threshold_l2|ats] [--compare-timings]
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import torch
import triton

import ragged
from benchmarks.support import promises, workloads
from benchmarks.support import revision as _revision
from ragbench.stats import median_interval
from ragged.kernels import attention as kernel_attention
from ragged.models import SHARP_ATTENTION, build_model, get_config
from ragged.pipeline import PrunedViT, PruneStage
from ragged.testing import synthetic_images
from scripts.pipeline_bench import paired_speedup, share_cell, share_of_bound, throughput

_raw_stream = torch._C._cuda_getCurrentRawStream


Grid1 = promises.OneProgram  # triton's kept launch with one program
KeptEmpty16 = promises.KeptEmpty16


@triton.jit
def _empty1(x):
    pass  # launch_only's kernel


class KeptEmpty1(KeptEmpty16):
    """As KeptEmpty16, with launch_only's kernel (one parameter)."""

    def _empty(self, qkv, kept):
        return _empty1[(1,)](qkv)


class PyDirect(ragged.LayoutAttention):
    """The kept launch's kernel and arguments, launched from Python without a check."""

    def __call__(self, qkv):
        kept = self.kept
        if kept is None:
            return self._checked(qkv)
        p = qkv.data_ptr()
        gx, gy, gz, scalars = kernel_attention.kept_grid(kept, kept.max_seqlen)
        self._direct(kept)(gx, gy, gz, _raw_stream(0), p, p + kept.k_offset,
                           p + kept.v_offset, kept.out_ptr, self.cu_seqlens.data_ptr(),
                           *scalars)  # fmt: skip
        return kept.out

    def _direct(self, kept):
        return kept.direct


class Empty16(PyDirect):
    """As PyDirect, with an empty kernel of the same parameters (one program)."""

    _empty = None

    def _direct(self, kept):
        if Empty16._empty is None:
            scratch = torch.empty(16, device="cuda")
            cu = torch.zeros(2, device="cuda", dtype=torch.int32)
            scale, *ints = kept.scalars
            launch = workloads.c_launcher(promises.empty16[(1,)](*[scratch] * 4, cu, scale, *ints))
            Empty16._empty = lambda _grid, *args: launch(1, *args)
        return Empty16._empty


PARTS = {"launch_only": None, "grid1": Grid1, "kept_empty1": KeptEmpty1,
         "kept_empty16": KeptEmpty16, "pydirect": PyDirect, "empty16": Empty16}  # fmt: skip


def difference(a: dict, b: dict, calls: int) -> str:
    """a's time less b's per attention call, and b's forward time over a's (img/s a/b): the
    median over rounds of each round's value [95% interval]."""
    x, y = a["samples_us"], b["samples_us"]
    per_call = [(s - t) / calls for s, t in zip(x, y, strict=True)]
    ratio = [t / s for s, t in zip(x, y, strict=True)]
    (lo, hi), (rlo, rhi) = median_interval(per_call, 0.95), median_interval(ratio, 0.95)
    return (f"{statistics.median(per_call):+.2f} [{lo:+.2f}, {hi:+.2f}] µs per call; img/s "
            f"ratio {statistics.median(ratio):.4f} [{rlo:.4f}, {rhi:.4f}]")  # fmt: skip


def compare_timings(model, method, batches, rounds) -> None:
    print("| BS | timing | triton/fa2 (quartiles) | bound (quartiles) | share [95%] |")
    print("|---|---|---|---|---|")
    size = model.patch_embed.img_size[0]
    for batch in batches:
        images = synthetic_images(batch, size, seed=batch, device="cuda", dtype=torch.float16)
        pipes = {n: workloads.pipeline(model, method, n) for n in ("fa2", "triton", "no_attention")}
        for _ in range(3):
            for timing in ("rounds", "turns"):
                res = throughput(pipes, images, rounds, timing)
                cols = [paired_speedup(res[n], res["fa2"]) for n in ("triton", "no_attention")]
                print(f"| {batch} | {timing} | "
                      + " | ".join(f"{m:.3f} ({lo:.3f}-{hi:.3f})" for m, lo, hi in cols)
                      + f" | {share_cell(res, 'no_attention')} |", flush=True)  # fmt: skip


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rounds", type=int, default=101, help="timed rounds per measurement")
    p.add_argument("--batches", type=int, nargs="+", default=[1, 4], help="batch sizes")
    p.add_argument(
        "--parts",
        nargs="*",
        choices=list(PARTS),
        default=list(PARTS),
        help="arms besides fa2, triton, no_attention (default: all)",
    )
    p.add_argument(
        "--base",
        type=Path,
        metavar="SRC",
        help="a source tree whose triton pipeline is timed as arm base",
    )
    p.add_argument(
        "--method",
        choices=("threshold_l2", "ats"),
        default="threshold_l2",
        help="the pruning: half the patches (fixed lengths), or ATS (lengths from the data)",
    )
    p.add_argument(
        "--compare-timings",
        action="store_true",
        help="the share under both timings of pipeline_bench, 3 times each",
    )
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    cfg = get_config("deit_base_224")
    model = build_model(cfg.name, device="cuda", dtype=torch.float16,
                        attention_scale=SHARP_ATTENTION)  # fmt: skip
    method = workloads.make_method(args.method, model)
    if args.compare_timings:
        compare_timings(model, method, args.batches, args.rounds)
        return 0
    calls = len(model.blocks) - workloads.PRUNE_AT
    rows_vary = workloads.rows_vary(model, method)
    parts = {
        n: workloads.launch_only(rows_vary) if n == "launch_only" else PARTS[n] for n in args.parts
    }
    base = None
    if args.base is not None:
        try:
            base = _revision.workloads(_revision.load(args.base, "ragged_base"))
        except Exception as exc:  # the revision's own import error, whatever it is
            p.error(f"cannot load ragged from {args.base}: {exc}")
    print("| BS | arm | µs per call over no_attention [95%] | triton's share of its bound [95%] |")
    print("|---|---|---|---|")
    for batch in args.batches:
        images = synthetic_images(batch, cfg.img_size, seed=batch, device="cuda",
                                  dtype=torch.float16)  # fmt: skip
        pipes = {n: workloads.pipeline(model, method, n) for n in ("fa2", "triton", "no_attention")}
        for name, cls in parts.items():
            pipes[name] = PrunedViT(model, PruneStage(workloads.PRUNE_AT, method), mode="ragged",
                                    layout_attention=cls)  # fmt: skip
        if base is not None:
            pipes["base"] = base.pipeline(model, base.make_method(args.method, model), "triton")
            pipes["head2"] = workloads.pipeline(model, method, "triton")
        res = throughput(pipes, images, args.rounds, "turns")
        top = res["no_attention"]["samples_us"]
        for name, r in res.items():
            if name == "no_attention":
                continue
            extra = [(x - b) / calls for x, b in zip(r["samples_us"], top, strict=True)]
            lo, hi = median_interval(extra, 0.95)
            if name == "fa2":
                share = "-"
            elif name in ("triton", "base", "head2"):  # its own share of no_attention's
                share = "{:.2f} [{:.2f}, {:.2f}]".format(*share_of_bound(
                    res["fa2"]["samples_us"], r["samples_us"], top))  # fmt: skip
            else:
                share = share_cell(res, name)
            print(f"| {batch} | {name} | {statistics.median(extra):.1f} [{lo:.1f}, {hi:.1f}] | "
                  f"{share} |", flush=True)  # fmt: skip
        if base is not None:
            for a, b in (("triton", "base"), ("head2", "triton")):
                print(f"  BS {batch}: {a} - {b} " + difference(res[a], res[b], calls), flush=True)
    print(f"\n{torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}, {args.method}, {args.rounds} rounds")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
