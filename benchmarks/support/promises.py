"""The API's launch promises, measured in one process: ``kernel.LaunchPromise`` (the suite,
``measure.promises``) and ``scripts/kernel_bench.py --launch-paths`` both call ``measure``.

  layout_over_launch  ``LayoutAttention``'s call over the bare launch of an empty kernel with
                      the attention kernel's 16 runtime parameters, one program, through the
                      C launcher (``c_launch.direct``: one cuLaunchKernel, as fastpath.cpp's
                      kept launch makes it): at most 1.5
  api_over_aten       ``varlen_attention(..., validate=False)`` over one aten op
                      (``x.add_(1)``): at most 1.0

Each is a list of per-round ratios of host time (``harness.host_us``: back-to-back calls,
one sync), the arms in a fresh random order every round (``harness.interleaved_rounds``):
host speed moves 1.6-2.1x between processes on the H100 VM, a ratio within one round does
not (docs/benchmarks.md). Informational, no promise: ``kept_over_launch``, the same empty
kernel through ``LayoutAttention``'s own kept launch (fastpath.cpp's ``layout``, the launch
spec swapped) over its bare launch: what the kept path's checks and reads cost.

This module reaches into ragged's kernels (the kept launch, the C launcher): a build of ragged
without them fails here, and asv records the cells as failed. Imported inside
``setup_cache`` only (it imports torch and triton).
"""

from __future__ import annotations

import random
from collections.abc import Callable

import torch
import triton

import ragged
from ragged.kernels import attention

from . import harness, workloads

# cell -> (numerator arm, denominator arm, the most the promise allows; None: no promise)
CELLS = {
    "layout_over_launch": ("layout", "empty_direct", 1.5),
    "api_over_aten": ("api", "aten", 1.0),
    "kept_over_launch": ("empty_kept", "empty_direct", None),
}
# What kernel_bench calls each arm (its launch-path names, where it has the same call)
ARM_NAMES = {
    "layout": "ragged.LayoutAttention call, packed qkv (launch kept)",
    "empty_kept": "empty kernel, 16 parameters, one program: LayoutAttention's kept launch",
    "empty_direct": "empty kernel, 16 parameters, one program: ragged C launcher direct",
    "api": "ragged.varlen_attention(validate=False)",
    "aten": "one aten op: x.add_(1)",
}
ROUNDS = 400  # of CALLS calls each: an A/A pair read 1.0009 [0.9986, 1.0060] (H100 VM)
CALLS = 50


@triton.jit(do_not_specialize=["cu", "heads", "m_blocks"], do_not_specialize_on_alignment=["cu"])
def empty16(Q, K, V, O, cu, scale, sqt, sqh, skt, skh, svt, svh, sot, soh, heads, m_blocks):
    pass  # varlen_fwd_kernel's runtime parameters, and nothing else


class OneProgram(ragged.LayoutAttention):
    """triton's kept launch with one program: the same host path, almost no GPU time."""

    def _checked(self, qkv):
        out = super()._checked(qkv)
        if self.kept is not None:
            # one program: a 1-D grid of one, also where the kept kernel's grid was 3-D
            kept = self.kept._replace(grid_x=1, grid3=False, **self._swap(qkv, self.kept))
            self.kept = attention.with_image(kept)
        return out

    def _swap(self, qkv, kept) -> dict:
        """Further fields of the kept launch to replace."""
        return {}


class KeptEmpty16(OneProgram):
    """triton's kept launch (fastpath.cpp: checks, cuLaunchKernel) of one program of an empty
    kernel with the attention kernel's 16 parameters: the kept path's host cost without the
    kernel. ``compiled`` is the empty kernel once a call was checked."""

    compiled = None

    def _swap(self, qkv, kept):
        md = (compiled := self._empty(qkv, kept)).metadata
        self.compiled = compiled
        return {"spec": (compiled.function, 32 * md.num_warps, md.shared)}

    def _empty(self, qkv, kept):
        q, k, v = qkv.unbind(1)
        return empty16[(1,)](q, k, v, kept.out, self.cu_seqlens, *kept.scalars)


def arms(q, k, v, cu_seqlens, max_seqlen: int) -> dict[str, Callable[[], object]]:
    """Zero-argument calls on ``varlen_attention``'s inputs (CUDA), by ``ARM_NAMES`` key; the
    kept launches checked once. RuntimeError where this machine keeps no launch (no C
    launcher, no C++ fast path): the promises are about that path."""
    qkv = torch.stack((q, k, v), dim=1)  # [T, 3, H, d], as the qkv projection lays it out
    layout = ragged.LayoutAttention(cu_seqlens, max_seqlen)
    empty_kept = KeptEmpty16(cu_seqlens, max_seqlen)
    for call in (layout, empty_kept):
        call(qkv)  # checked once: the launch is kept
        if call.kept is None or call.kept.image is None:
            raise RuntimeError("no kept launch here (the C launcher or the C++ fast path is "
                               "missing): the promises are about that path")  # fmt: skip
    kept, launch = empty_kept.kept, workloads.c_launcher(empty_kept.compiled)
    p = qkv.data_ptr()
    args = (p, p + kept.k_offset, p + kept.v_offset, kept.out_ptr, cu_seqlens.data_ptr(),
            *kept.scalars)  # fmt: skip
    stream, dev = torch._C._cuda_getCurrentRawStream, qkv.get_device()
    scratch = torch.zeros(16, device=q.device)
    return {
        "layout": lambda: layout(qkv),
        "empty_kept": lambda: empty_kept(qkv),
        "empty_direct": lambda: launch(1, 1, 1, stream(dev), *args),
        "api": workloads.attention("triton", q, k, v, cu_seqlens, max_seqlen),  # validate=False
        "aten": lambda: scratch.add_(1),
    }


def measure(q, k, v, cu_seqlens, max_seqlen: int, rounds: int = ROUNDS, seed: int = 0
            ) -> dict[str, list[float]]:  # fmt: skip
    """Per-round host-time ratios of every cell of ``CELLS`` on these inputs: the arms warmed
    up, then ``rounds`` rounds of ``CALLS`` back-to-back calls of each, in a random order."""
    calls = arms(q, k, v, cu_seqlens, max_seqlen)
    for fn in calls.values():
        harness.warmup(fn)

    def sampler(fn):
        return lambda: {"host_us": harness.host_us(fn, calls=CALLS, rounds=1).median}

    m = harness.interleaved_rounds({a: sampler(fn) for a, fn in calls.items()}, rounds,
                             random.Random(seed))  # fmt: skip
    for arm, values in m.items():
        if "error" in values:
            raise RuntimeError(f"{ARM_NAMES[arm]} failed: {values['error']}")
    return {
        cell: [a / b for a, b in zip(m[num]["host_us"], m[den]["host_us"], strict=True)]
        for cell, (num, den, _) in CELLS.items()
    }
