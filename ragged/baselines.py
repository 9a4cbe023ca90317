"""Baseline attention backends behind ``varlen_attention``'s signature.

Each ``*_attention(q, k, v, cu_seqlens, max_seqlen, softmax_scale)`` takes validated packed
inputs (q, k, v: [total_tokens, heads, head_dim]; cu_seqlens: int32 [batch + 1]) and returns
[total_tokens, heads, head_dim] in q's dtype. Each ``*_unavailable(...)`` returns ``None``
when the backend can run the given inputs here, else the reason it cannot (the dtypes a
backend takes are declared with it in ``ragged.attention.BACKENDS``).
"""

from __future__ import annotations

import functools
import importlib.util

import torch
import torch.nn.functional as F

HALF = (torch.float16, torch.bfloat16)  # the dtypes of the FA2 kernels


NO_CUDA = "no CUDA device is available"


def _needs_cuda(device: torch.device | None) -> str | None:
    if device is None:
        return None if torch.cuda.is_available() else NO_CUDA
    if device.type != "cuda":
        return f"the inputs are on {device}, not on a CUDA device"
    return None


# --- FlashAttention-2 varlen ---------------------------------------------------------------


# Looked up once: a find_spec per call scans sys.path (measured: +145 us host per call, H100).
@functools.cache
def _fa2_kernel():
    """(callable, name) of the FA2 varlen kernel used here, or (None, reason)."""
    if importlib.util.find_spec("flash_attn") is not None:
        from flash_attn import flash_attn_varlen_func

        return flash_attn_varlen_func, "flash_attn.flash_attn_varlen_func"
    op = getattr(torch.ops.aten, "_flash_attention_forward", None)
    if op is None:
        return None, "flash_attn is not installed and this PyTorch build has no bundled FA2"
    return op.default, "torch.ops.aten._flash_attention_forward"


def fa2_implementation() -> str:
    """Which FA2 varlen kernel the ``fa2`` backend calls on this machine."""
    return _fa2_kernel()[1]


def fa2_unavailable(device=None, dtype=None, head_dim=None) -> str | None:
    reason = _needs_cuda(device)
    if reason:
        return reason
    fn, name = _fa2_kernel()
    if fn is None:
        return name
    if head_dim is not None and (head_dim % 8 or head_dim > 256):
        return f"FlashAttention-2 needs head_dim a multiple of 8 and at most 256, got {head_dim}"
    return None


def fa2_attention(q, k, v, cu_seqlens, max_seqlen, softmax_scale):
    fn, name = _fa2_kernel()
    if name.startswith("flash_attn"):
        return fn(
            q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
            dropout_p=0.0, softmax_scale=softmax_scale, causal=False,
        )  # fmt: skip
    return fn(
        q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, 0.0, False, False,
        scale=softmax_scale,
    )[0]  # fmt: skip


# --- torch.nn.attention.varlen.varlen_attn -------------------------------------------------


@functools.cache
def _varlen_attn():
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:
        return None
    return varlen_attn


def torch_varlen_unavailable(device=None, dtype=None, head_dim=None) -> str | None:
    if _varlen_attn() is None:
        return f"torch {torch.__version__} has no torch.nn.attention.varlen"
    return _needs_cuda(device)


def torch_varlen_attention(q, k, v, cu_seqlens, max_seqlen, softmax_scale):
    return _varlen_attn()(
        q, k, v, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen, scale=softmax_scale
    )


# --- PyTorch's memory-efficient attention (CUTLASS), varlen ----------------------------------


def _efficient_op():
    return getattr(torch.ops.aten, "_efficient_attention_forward", None)


def mem_efficient_unavailable(device=None, dtype=None, head_dim=None) -> str | None:
    if _efficient_op() is None:
        return f"torch {torch.__version__} has no aten._efficient_attention_forward"
    reason = _needs_cuda(device)
    # 16..256 in steps of 8 run in every dtype (H100, torch 2.11); 20 and 36 find no fp16 kernel
    if reason is None and head_dim is not None and head_dim % 8:
        reason = f"the memory-efficient kernel needs head_dim a multiple of 8, got {head_dim}"
    return reason


def mem_efficient_attention(q, k, v, cu_seqlens, max_seqlen, softmax_scale):
    """The kernel behind SDPA's memory-efficient backend, on the packed rows as one batch of
    ``total_tokens`` with ``cu_seqlens`` as its sequence starts (no mask, no dropout)."""
    return _efficient_op().default(
        q[None], k[None], v[None], None, cu_seqlens, cu_seqlens, max_seqlen, max_seqlen,
        0.0, 0, False, scale=softmax_scale,
    )[0][0]  # fmt: skip


# --- jagged NestedTensor + SDPA -------------------------------------------------------------


def nested_sdpa_unavailable(device=None, dtype=None, head_dim=None) -> str | None:
    # torch 2.14's jagged SDPA reaches for CUDA even with CPU inputs (measured: it raises
    # "CUDA driver version is insufficient" on a CPU-only machine).
    return _needs_cuda(device)


def nested_sdpa_attention(q, k, v, cu_seqlens, max_seqlen, softmax_scale):
    offsets = cu_seqlens.long()

    def jagged(t):  # [T, H, D] -> nested [B, H, j, D]
        nt = torch.nested.nested_tensor_from_jagged(t, offsets=offsets, max_seqlen=max_seqlen)
        return nt.transpose(1, 2)

    out = F.scaled_dot_product_attention(jagged(q), jagged(k), jagged(v), scale=softmax_scale)
    return out.transpose(1, 2).values()


# --- padded SDPA with a key-padding mask -------------------------------------------------------


def padded_sdpa_attention(q, k, v, cu_seqlens, max_seqlen, softmax_scale):
    """Scatter each sequence into [B, max_seqlen], mask padded keys, SDPA, gather back.

    Index arithmetic stays on the device (``output_size`` avoids a sync in repeat_interleave).
    """
    total, heads, head_dim = q.shape
    batch = cu_seqlens.shape[0] - 1
    starts = cu_seqlens[:-1].long()
    lengths = cu_seqlens[1:].long() - starts
    seq_id = torch.repeat_interleave(
        torch.arange(batch, device=q.device), lengths, output_size=total
    )
    dest = seq_id * max_seqlen + torch.arange(total, device=q.device) - starts[seq_id]

    def pad(t):  # [T, H, D] -> [B, H, L, D]
        padded = t.new_zeros(batch * max_seqlen, heads, head_dim).index_copy_(0, dest, t)
        return padded.view(batch, max_seqlen, heads, head_dim).transpose(1, 2)

    key_ok = torch.arange(max_seqlen, device=q.device)[None, :] < lengths[:, None]  # [B, L]
    out = F.scaled_dot_product_attention(
        pad(q), pad(k), pad(v), attn_mask=key_ok[:, None, None, :], scale=softmax_scale
    )
    return out.transpose(1, 2).reshape(batch * max_seqlen, heads, head_dim)[dest]
