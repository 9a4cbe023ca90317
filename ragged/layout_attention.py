"""``LayoutAttention``: attention over one packed layout, called once per block on packed qkv.

After a prune step every later block of a ViT attends over the same packed layout
(``cu_seqlens``, ``max_seqlen``) with a ``qkv`` of the same shape, strides, dtype and device:
only its data changes. ``varlen_attention`` checks and plans every call from scratch;
``LayoutAttention`` checks the first call of a ``qkv`` layout through it and launches later
calls of the same layout with the launch arguments it kept: a metadata compare, one data
pointer and the launch. Inside the pipeline's forward, where every Python step costs 2-3x
what it costs in a hot loop, that is what matters (docs/pipeline.md).
"""

from __future__ import annotations

import torch

from . import attention
from .kernels import attention as kernel_attention


class LayoutAttention:
    """``varlen_attention`` over one packed layout, for many calls on packed qkv.

    Args:
        cu_seqlens: int32 ``[batch + 1]``, max_seqlen: int, as ``varlen_attention`` takes them
            with ``validate=False`` (trusted values: see there); ``rebind`` changes them.
        backend, softmax_scale: as ``varlen_attention``'s.

    ``call(qkv)``: ``qkv`` ``[total_tokens, 3, heads, head_dim]``, e.g. a qkv projection's
    output unflattened, unit stride in ``head_dim`` -> ``[total_tokens, heads, head_dim]`` in
    qkv's dtype. Backends that write into an output (triton) return the same tensor from every
    call, written again by the next one: read it before the next call (on the same stream, as
    a ViT's next block does).

    What a call checks: when qkv's (shape, strides, dtype, device) or ``cu_seqlens``' (length,
    dtype, stride, device) differ from those of the call whose launch was kept, or
    ``max_seqlen`` is beyond qkv's rows or of another span than the kept one's (a span shares
    one compiled kernel: ``kernels.config.length_span``), everything, through
    ``varlen_attention(*qkv.unbind(1), ..., validate=False)``; otherwise that no launch hook is
    installed, the device is current and qkv's data pointer is 16-byte aligned, and else takes
    that same checked call. A new ``max_seqlen`` of the span (data-dependent pruning: a new
    longest image each forward) launches the kept kernel over its own grid, with no check,
    plan or compile more. Other backends always take the checked call.
    ``rebind`` (once per forward in the pipeline) drops the kept launch when the triton
    backend was replaced in ``ragged.BACKENDS`` or the Triton plans were dropped
    (``kernels.attention.forget_plans``, after a sweep) since it was kept: a launch that is
    still correct, but no longer what ``varlen_attention`` would run.
    """

    def __init__(self, cu_seqlens, max_seqlen, *, backend="triton", softmax_scale=None):
        self.cu_seqlens, self.max_seqlen, self.backend = cu_seqlens, max_seqlen, backend
        self.softmax_scale = softmax_scale
        # the kept launch: what kernels.attention.kept_launch and fastpath.cpp's layout launch
        self.kept: kernel_attention.KeptLaunch | None = None
        self._out = None

    def rebind(self, cu_seqlens: torch.Tensor, max_seqlen: int) -> None:
        """Point later calls at a new layout. Each call compares its layout with the kept
        launch's (``cu_seqlens``' length, dtype, stride and device, and ``max_seqlen``'s span)
        and launches that with the new ``cu_seqlens`` and ``max_seqlen``; a call of another
        layout is checked, and kept again. Here the launch is only dropped when it is no longer what
        ``varlen_attention`` would run (see the class docstring)."""
        self.cu_seqlens, self.max_seqlen = cu_seqlens, max_seqlen
        launch = self.kept
        if launch is not None and (
            launch.epoch != kernel_attention.epoch
            or attention.BACKENDS["triton"].run is not attention.TRITON_RUN
        ):
            self.kept = None

    def __call__(self, qkv: torch.Tensor) -> torch.Tensor:
        out = kernel_attention.layout_call(
            self, qkv
        )  # fastpath.cpp's, else kernels.attention's kept_launch
        if out is not None:
            return out
        return self._checked(qkv)

    def _checked(self, qkv: torch.Tensor) -> torch.Tensor:
        """The call through ``varlen_attention``; keeps its launch for the next calls."""
        if not isinstance(qkv, torch.Tensor) or qkv.dim() != 4 or qkv.shape[1] != 3:
            got = tuple(qkv.shape) if isinstance(qkv, torch.Tensor) else type(qkv).__name__
            raise ValueError(f"qkv must be [total_tokens, 3, heads, head_dim], got {got}")
        q, k, v = qkv.unbind(1)
        out = self._out
        if out is not None and (out.shape, out.dtype, out.device) != (q.shape, q.dtype, q.device):
            out = None
        o = attention.varlen_attention(
            q, k, v, self.cu_seqlens, self.max_seqlen,
            backend=self.backend, softmax_scale=self.softmax_scale, out=out, validate=False,
        )  # fmt: skip
        self.kept = None
        if not attention.BACKENDS[self.backend].writes_out:
            return o
        self._out = o
        if self.backend == "triton" and attention.BACKENDS["triton"].run is attention.TRITON_RUN:
            scale = attention.default_scale(q.shape[2], self.softmax_scale)
            prepared = kernel_attention.prepare(q, k, v, o, self.cu_seqlens, self.max_seqlen, scale)
            k_offset, v_offset = k.data_ptr() - q.data_ptr(), v.data_ptr() - q.data_ptr()
            if prepared is not None and not (k_offset | v_offset) & 15:
                direct, grid_x, scalars, block_m, span, grid3 = prepared
                key = (qkv.shape, qkv.stride(), qkv.dtype, qkv.get_device())
                kernels = kernel_attention
                self.kept = kernels.with_image(kernels.KeptLaunch(
                    direct, kernels.launch_spec(direct), key, grid_x, k_offset, v_offset, o,
                    o.data_ptr(), self.cu_seqlens.shape[0], scalars, self.max_seqlen, kernels.epoch,
                    block_m, span, grid3,
                ))  # fmt: skip
        return o
