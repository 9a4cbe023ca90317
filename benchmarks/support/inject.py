"""Kernel slowdowns of known size, injected to calibrate ragbench's detector.

Only the calibration (``python -m scripts.calibrate``) sets ``RAGBENCH_INJECT_SLOWDOWN``, a
fraction such as ``0.05``. The kernel table's ``triton`` cells then call the kernel's launcher
directly with an explicit ``AttentionConfig`` whose ``delay_cycles`` makes every program spin
before it exits, sized per workload so that ``gpu_us`` grows by that fraction: a slower kernel,
not a slower ruler. ``0`` runs the same path without a delay, the A side of an A/A comparison.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics

ENV = "RAGBENCH_INJECT_SLOWDOWN"


def fraction() -> float | None:
    """The slowdown the calibration asks for, or None (the normal suite)."""
    value = os.environ.get(ENV)
    if value is None:
        return None
    try:
        x = float(value)
    except ValueError:
        raise ValueError(f"{ENV} must be a fraction such as 0.05, got {value!r}") from None
    if not 0 <= x < 1:
        raise ValueError(f"{ENV} must be in [0, 1), got {x}")
    return x


def _gpu_us(fn, replays: int) -> float:
    from . import harness

    graph = harness.capture(fn, 50)
    graph.replay()
    return statistics.median(harness.replay_us(graph, 50, replays))


def _quantise(cycles: float) -> int:
    """Four significant bits, so that processes reuse compiled variants (the delay is a
    constexpr: each new value is a compilation); within 3% of ``cycles``."""
    if cycles < 16:
        return max(0, round(cycles))
    step = 2 ** (math.floor(math.log2(cycles)) - 4)
    return int(round(cycles / step) * step)


def triton_fn(q, k, v, cu_seqlens, max_seqlen: int, slowdown: float):
    """-> (fn, info): the triton kernel on these inputs, slowed by ``slowdown`` of its device
    time; ``info`` has the delay in cycles and the slowdown measured when sizing it."""
    import torch

    from ragged.kernels.attention import varlen_attention_triton
    from ragged.kernels.tuning import config_for

    cfg = config_for(q.shape[2], max_seqlen, q.dtype, q.get_device())
    out = torch.empty_like(q)
    scale = 1.0 / math.sqrt(q.shape[2])

    def make(delay: int):
        config = dataclasses.replace(cfg, delay_cycles=delay)
        return functools.partial(
            varlen_attention_triton, q, k, v, cu_seqlens, max_seqlen, scale, out, config
        )

    if slowdown == 0:
        return make(0), {"delay_cycles": 0, "sized_slowdown": 0.0}
    base = _gpu_us(make(0), replays=40)
    # Spin time adds once per wave of programs; start from one wave at ~2 GHz and correct
    # the delay from what the previous guess achieved. A small kernel in a graph replay sits
    # on the launch floor (BS=1: ~2.7 us per call), which hides the first cycles of delay:
    # there the delay doubles until the slowdown shows.
    delay = _quantise(slowdown * base * 2000)
    for attempt in range(10):
        achieved = _gpu_us(make(delay), replays=40) / base - 1
        if abs(achieved - slowdown) < 0.1 * slowdown or attempt == 9:
            break
        if achieved < 0.25 * slowdown:
            delay = _quantise(delay * 2)
        else:
            delay = _quantise(delay * slowdown / achieved)
    return make(delay), {"delay_cycles": delay, "sized_slowdown": round(achieved, 5)}
