"""The attention kernel's GPU time against the GPU's own floor, in one process:
``kernel.GpuFloor`` (the suite, ``measure.floors``) calls ``measure``.

  gpu_us      the triton call (``ragged.varlen_attention(..., validate=False)``, what the
              default path launches) replayed from a CUDA graph of ``CALLS`` calls: µs a call
  empty_us    an empty Triton kernel, one program, replayed the same way: the launch floor
              of a graph's kernel node on this GPU
  over_empty  gpu_us / empty_us of the same round: what the kernel costs in units of the
              floor. The GPU's clock and the VM's neighbours move both arms of a round alike;
              the ratio is what a commit's history compares

Each round replays both graphs ``REPLAYS`` times, in a fresh random order (a round's figure is
the median of its replays): the same rounds as ``experiments.kernel_floor``, which times the
candidate kernels the same way. Imported inside ``setup_cache`` only (torch and triton).
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable

import torch
import triton

from . import harness

CALLS = 20  # calls captured a graph (experiments.kernel_floor's)
ROUNDS = 30
REPLAYS = 10  # timed replays of each graph a round


@triton.jit
def empty_kernel(x):
    pass


def empty_call(device: str = "cuda") -> Callable[[], object]:
    """One launch of ``empty_kernel``, one program."""
    x = torch.zeros(16, device=device)
    return lambda: empty_kernel[(1,)](x)


def measure(
    kernel: Callable[[], object],
    empty: Callable[[], object] | None = None,
    rounds: int = ROUNDS,
    seed: int = 0,
) -> dict[str, list[float]]:
    """-> {"gpu_us", "empty_us", "over_empty"}: one value a round, ``kernel``'s and the empty
    kernel's graphs replayed in the same round, the ratio of that round's two medians."""
    graphs = {
        "kernel": harness.capture(kernel, CALLS),
        "empty": harness.capture(empty or empty_call(), CALLS),
    }
    for graph in graphs.values():  # clocks up, caches warm
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < 0.02:
            graph.replay()
        torch.cuda.synchronize()
    rng = random.Random(seed)
    order = list(graphs)
    out: dict[str, list[float]] = {"gpu_us": [], "empty_us": [], "over_empty": []}
    for _ in range(rounds):
        rng.shuffle(order)
        med = {n: statistics.median(harness.replay_us(graphs[n], CALLS, REPLAYS)) for n in order}
        out["gpu_us"].append(med["kernel"])
        out["empty_us"].append(med["empty"])
        out["over_empty"].append(med["kernel"] / med["empty"])
    return out
