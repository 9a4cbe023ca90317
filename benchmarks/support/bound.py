"""Triton's share of the bound in the pruned pipeline: how much of what any attention kernel
could gain over fa2 triton gains. ``pipeline.BoundShare`` (the suite, ``measure.bounds``) and
``scripts/pipeline_bench.py --sections bound`` both measure with it.

  share_of_bound         eager: triton/fa2 = 1 + share x (no_attention/fa2 - 1), no_attention
                         the ragged pipeline whose attention call launches nothing
  share_of_launch_bound  eager, over launch_only (no_attention plus one empty kernel launched
                         a call, through ragged's C launcher): the bound of a launched kernel
  graph_share_of_bound   under CUDA graphs: triton_graph and no_attention_graph against
                         fa2_graph (GPU time and the graph's own launch only)

Each from per-round µs of one forward of every pipeline in turns (``turns_us``), the two
speedups medians over rounds of the round's ratio (``share_of_bound``). Imported inside
``setup_cache`` (torch) or by the script.
"""

from __future__ import annotations

import math
import time

import numpy as np
import torch

from ragged.pipeline import PrunedViT, PruneStage

from . import workloads

# The bound's pipelines: _catalogue's, and launch_only (built here)
PIPELINES = ("fa2", "triton", "no_attention", "launch_only", "fa2_graph", "triton_graph",
             "no_attention_graph")  # fmt: skip
# metric -> (fa2 arm, triton arm, bound arm)
SHARES = {
    "share_of_bound": ("fa2", "triton", "no_attention"),
    "share_of_launch_bound": ("fa2", "triton", "launch_only"),
    "graph_share_of_bound": ("fa2_graph", "triton_graph", "no_attention_graph"),
}


def launch_only_pipeline(model, method) -> PrunedViT:
    """The ragged pipeline with one empty kernel launched in place of each attention call."""
    launch = workloads.launch_only(workloads.rows_vary(model, method))
    return PrunedViT(model, PruneStage(workloads.PRUNE_AT, method), mode="ragged",
                     layout_attention=launch)  # fmt: skip


def pipelines(model, method, names=PIPELINES) -> dict[str, PrunedViT]:
    """The catalogue's pipelines ``names``, and ``launch_only``."""
    return {n: launch_only_pipeline(model, method) if n == "launch_only"
            else workloads.pipeline(model, method, n) for n in names}  # fmt: skip


def forwards(model, method, images, names=PIPELINES) -> dict:
    """name -> one forward of that pipeline on ``images``."""
    return {n: (lambda p=p: p.forward(images, check_overflow=False))
            for n, p in pipelines(model, method, names).items()}  # fmt: skip


def turns_us(
    fns: dict,
    rounds: int,
    *,
    target_us: float = 40e3,
    sync=torch.cuda.synchronize,
    clock=time.perf_counter,
) -> dict[str, list[float]]:
    """µs per call of each function, one sample per round. A round is a number of turns (the
    slowest function gets ~``target_us`` a round); a turn calls every function once, in an
    order rotated every turn, each call timed alone from a synced device to its own sync.
    Calls of different functions are then a few ms apart, not ``img_per_s``'s 40 ms: on the
    H100 VM host speed moves within 40 ms rounds (docs/pipeline.md)."""

    def timed(fn) -> float:  # seconds, the device synced before and after
        t0 = clock()
        fn()
        sync()
        return clock() - t0

    names = list(fns)
    sync()
    for fn in fns.values():
        timed(fn)  # first call: compilation, graph capture
    slowest = max(1e-9, *(timed(fn) for fn in fns.values()))
    turns = max(1, int(target_us / 1e6 / slowest))
    out: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        spent = dict.fromkeys(names, 0.0)
        for turn in range(turns):
            k = turn % len(names)
            for n in names[k:] + names[:k]:
                spent[n] += timed(fns[n])
        for n in names:
            out[n].append(spent[n] / turns * 1e6)
    return out


def share_of_bound(fa2, triton, bound) -> tuple[float, float, float]:
    """The share of the bound from per-round µs samples (pipelines alternating within a round):
    triton/fa2 reaches 1 + share x (bound/fa2 - 1), the two speedups each the median over
    rounds of that round's ratio -> (share, and its 95% percentile-bootstrap interval over
    rounds). Each round's own share, (triton/fa2 - 1) / (bound/fa2 - 1), is no estimate: a
    round's bound/fa2 - 1 swings around 0 on the VM, and that ratio with it.

    NaN (all three) where the bound's own gain over fa2 is not resolved: its 95% interval
    reaches 0 or below, so a share of it means nothing (ATS under CUDA graphs: the bucketed
    graph mode runs no faster without attention than with fa2)."""
    import scipy.stats  # here, not with the module: gain and share run without it

    f, t, z = (np.asarray(x, float) for x in (fa2, triton, bound))

    def interval(statistic, *data):
        return scipy.stats.bootstrap(data, statistic, paired=True, vectorized=True,
                                     method="percentile", rng=np.random.default_rng(0),
                                     n_resamples=2000).confidence_interval  # fmt: skip

    if not gain(f, z) > 0 or not interval(gain, f, z).low > 0:
        return math.nan, math.nan, math.nan
    ci = interval(share, f, t, z)
    return float(share(f, t, z)), float(ci.low), float(ci.high)


def gain(fa2, bound, axis=-1):
    """The bound's speedup over fa2 less 1: the median over rounds of the round's ratio."""
    return np.median(np.asarray(fa2, float) / np.asarray(bound, float), axis=axis) - 1


def share(fa2, triton, bound, axis=-1):
    """``share_of_bound``'s point estimate, with no interval and no test that the bound's gain
    is resolved (a machine without scipy: experiments/graph_share.py)."""
    f, t = np.asarray(fa2, float), np.asarray(triton, float)
    return (np.median(f / t, axis=axis) - 1) / gain(fa2, bound, axis)


def shares(samples: dict[str, list[float]]) -> dict[str, float]:
    """Every ``SHARES`` metric whose three arms are in ``samples`` (per-round µs) -> its
    point estimate, and ``<metric>_low`` / ``_high``, its 95% interval."""
    out = {}
    for metric, arms in SHARES.items():
        if all(a in samples for a in arms):
            share, low, high = share_of_bound(*(samples[a] for a in arms))
            out |= {metric: share, f"{metric}_low": low, f"{metric}_high": high}
    return out
