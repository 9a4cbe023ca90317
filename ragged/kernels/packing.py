"""Fused pack / unpack / CLS gather: kernels -> launchers.

pack:   one ``torch.cumsum`` over the flattened keep mask gives every kept token its
        destination row; one Triton launch copies the kept tokens and writes ``cu_seqlens``
        (and the overflow flag when packing into a fixed capacity). The paper computes the
        indices with several PyTorch ops and reads the total back to the host twice.
unpack: one Triton launch; each program ranks its positions within the row itself
        (``tl.cumsum`` over the row's keep mask), so no index tensor is materialised.
gather: one Triton launch, one program per sequence, zeros for empty sequences.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .launch import Launcher, specializable

# Unspecialized: sizes, mask strides and pointers read one element at a time. C and the
# token-row strides stay specializable (divisible by 16 -> 16-byte copies), see launch.py.
_SIZES = ["N", "capacity", "batch", "stride_kb", "stride_kn"]
_SCALAR_PTRS = ["keep", "ranks", "cu_seqlens", "overflow"]


@triton.jit(
    do_not_specialize=[*_SCALAR_PTRS, *_SIZES],
    do_not_specialize_on_alignment=_SCALAR_PTRS,
)
def _pack_kernel(
    X, keep, ranks, P, cu_seqlens, overflow,
    N, C, capacity, batch, stride_xb, stride_xn, stride_kb, stride_kn, stride_pt,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
    HAS_OVERFLOW: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    t = tl.program_id(1)
    offs_t = t * BLOCK_T + tl.arange(0, BLOCK_T)
    in_row = offs_t < N
    kept = tl.load(keep + b * stride_kb + offs_t * stride_kn, mask=in_row, other=0) != 0
    # ranks: inclusive cumulative count over the flattened [B, N] mask -> destination + 1
    dest = tl.load(ranks + b * N + offs_t, mask=in_row, other=0) - 1
    ok = kept & (dest < capacity)
    src = X + b.to(tl.int64) * stride_xb + offs_t.to(tl.int64)[:, None] * stride_xn
    dst = P + dest.to(tl.int64)[:, None] * stride_pt
    for c0 in range(0, C, BLOCK_C):
        offs_c = c0 + tl.arange(0, BLOCK_C)
        m = ok[:, None] & (offs_c < C)[None, :]
        tl.store(dst + offs_c[None, :], tl.load(src + offs_c[None, :], mask=m), mask=m)
    if t == 0:
        row_end = tl.load(ranks + b * N + N - 1)
        tl.store(cu_seqlens + b + 1, tl.minimum(row_end, capacity))
        if b == 0:
            tl.store(cu_seqlens, 0)
        if HAS_OVERFLOW:
            if b == batch - 1:
                tl.store(overflow, (row_end > capacity).to(tl.int8))


@triton.jit(
    do_not_specialize=["keep", "cu_seqlens", *_SIZES],
    do_not_specialize_on_alignment=["keep", "cu_seqlens"],
)
def _unpack_kernel(
    P, keep, cu_seqlens, OUT,
    N, C, stride_kb, stride_kn, stride_pt, stride_ob, stride_on,
    BLOCK_T: tl.constexpr,
    BLOCK_C: tl.constexpr,
    BLOCK_ROW: tl.constexpr,
):  # fmt: skip
    b = tl.program_id(0)
    t = tl.program_id(1)
    t0 = t * BLOCK_T
    # This program's positions get rank = (kept before t0) + (kept before them within the block).
    offs_row = tl.arange(0, BLOCK_ROW)
    row = tl.load(keep + b * stride_kb + offs_row * stride_kn, mask=offs_row < N, other=0) != 0
    before = tl.sum(tl.where(offs_row < t0, row, 0).to(tl.int32), 0)
    offs_t = t0 + tl.arange(0, BLOCK_T)
    in_row = offs_t < N
    kept = tl.load(keep + b * stride_kb + offs_t * stride_kn, mask=in_row, other=0) != 0
    kept_i = kept.to(tl.int32)
    rank = before + tl.cumsum(kept_i, 0) - kept_i
    start = tl.load(cu_seqlens + b)
    end = tl.load(cu_seqlens + b + 1)
    src_row = start + rank
    ok = kept & (src_row < end)
    src = P + src_row.to(tl.int64)[:, None] * stride_pt
    dst = OUT + b.to(tl.int64) * stride_ob + offs_t.to(tl.int64)[:, None] * stride_on
    for c0 in range(0, C, BLOCK_C):
        offs_c = c0 + tl.arange(0, BLOCK_C)
        c_ok = (offs_c < C)[None, :]
        x = tl.load(src + offs_c[None, :], mask=ok[:, None] & c_ok, other=0.0)
        tl.store(dst + offs_c[None, :], x, mask=in_row[:, None] & c_ok)


@triton.jit(do_not_specialize=["cu_seqlens"], do_not_specialize_on_alignment=["cu_seqlens"])
def _gather_first_kernel(P, cu_seqlens, OUT, C, stride_pt, stride_ob, BLOCK_C: tl.constexpr):
    b = tl.program_id(0)
    start = tl.load(cu_seqlens + b)
    # an empty sequence reads nothing: its row is zeros. A block mask, not ``c_ok & nonempty``:
    # Triton 3.9's interpreter refuses a block-and-scalar mask ("mask has unsupported dtype")
    c_read = tl.where(tl.load(cu_seqlens + b + 1) > start, C, 0)
    src = P + start.to(tl.int64) * stride_pt
    dst = OUT + b.to(tl.int64) * stride_ob
    for c0 in range(0, C, BLOCK_C):
        offs_c = c0 + tl.arange(0, BLOCK_C)
        c_ok = offs_c < C
        tl.store(dst + offs_c, tl.load(src + offs_c, mask=offs_c < c_read, other=0.0), mask=c_ok)


_pack = Launcher(_pack_kernel)
_unpack = Launcher(_unpack_kernel)
_gather = Launcher(_gather_first_kernel)

# 32 tokens x 128 channels per step: 16-byte accesses in fp16, few programs at ViT sizes.
BLOCK_T = 32
BLOCK_C = 128


def pack_launch(
    x: torch.Tensor,
    keep_mask: torch.Tensor,
    ranks: torch.Tensor,
    packed: torch.Tensor,
    cu_seqlens: torch.Tensor,
    overflow: torch.Tensor | None,
) -> None:
    """x [B, N, C], keep_mask [B, N] bool, ranks int32 [B*N] (inclusive cumsum of the mask),
    packed [capacity, C] (unit stride in C), cu_seqlens int32 [B + 1], overflow int8 [] or None."""
    batch, n, c = x.shape
    if batch == 0:
        cu_seqlens.zero_()
        return
    dev = x.get_device()
    has_overflow = overflow is not None
    constexprs = {"BLOCK_T": BLOCK_T, "BLOCK_C": BLOCK_C, "HAS_OVERFLOW": has_overflow}
    _pack.launch(
        (dev, x.dtype, has_overflow),
        (batch, triton.cdiv(max(n, 1), BLOCK_T), 1),
        (x, keep_mask, ranks, packed, cu_seqlens, overflow if has_overflow else cu_seqlens),
        (n, c, packed.shape[0], batch, x.stride(0), x.stride(1), keep_mask.stride(0),
         keep_mask.stride(1), packed.stride(0)),
        constexprs, 4, 1, dev, specializable(c, x.stride(0), x.stride(1), packed.stride(0)),
    )  # fmt: skip


def unpack_launch(
    packed: torch.Tensor, cu_seqlens: torch.Tensor, keep_mask: torch.Tensor, out: torch.Tensor
) -> None:
    """packed [T, C], cu_seqlens int32 [B + 1], keep_mask [B, N] bool, out [B, N, C]."""
    batch, n, c = out.shape
    if batch == 0 or n == 0:
        return
    dev = out.get_device()
    block_row = max(BLOCK_T, triton.next_power_of_2(n))
    constexprs = {"BLOCK_T": BLOCK_T, "BLOCK_C": BLOCK_C, "BLOCK_ROW": block_row}
    _unpack.launch(
        (dev, out.dtype, block_row),
        (batch, triton.cdiv(n, BLOCK_T), 1),
        (packed, keep_mask, cu_seqlens, out),
        (n, c, keep_mask.stride(0), keep_mask.stride(1), packed.stride(0), out.stride(0),
         out.stride(1)),
        constexprs, 4, 1, dev, specializable(c, packed.stride(0), out.stride(0), out.stride(1)),
    )  # fmt: skip


def gather_first_launch(packed: torch.Tensor, cu_seqlens: torch.Tensor, out: torch.Tensor) -> None:
    """packed [T, C], cu_seqlens int32 [B + 1], out [B, C]."""
    batch, c = out.shape
    if batch == 0:
        return
    dev = out.get_device()
    _gather.launch(
        (dev, out.dtype),
        (batch, 1, 1),
        (packed, cu_seqlens, out),
        (c, packed.stride(0), out.stride(0)),
        {"BLOCK_C": BLOCK_C}, 4, 1, dev, specializable(c, packed.stride(0), out.stride(0)),
    )  # fmt: skip
