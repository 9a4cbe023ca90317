"""Eager oracles: plain PyTorch, any device, no Triton import.

They serve the tests (the error budget is measured against ``varlen_attention_reference`` in
float64) and the ``reference`` backend (float32). They loop over sequences on the host, so
they synchronise and are slow: never use them on a hot path.
"""

from __future__ import annotations

import itertools
import math

import torch


def varlen_attention_reference(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    softmax_scale: float | None = None,
    *,
    compute_dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """Bidirectional attention of each packed sequence with itself.

    q, k, v: [total_tokens, heads, head_dim]; cu_seqlens: integer [batch + 1].
    Computes in ``compute_dtype`` (float32 for the backend, float64 for the oracle, the input
    dtype for "eager PyTorch at the same dtype") and returns ``q.dtype``
    [total_tokens, heads, head_dim].
    """
    scale = 1.0 / math.sqrt(q.shape[-1]) if softmax_scale is None else softmax_scale
    out = torch.zeros(q.shape, dtype=compute_dtype, device=q.device)
    bounds = cu_seqlens.tolist()
    for start, end in itertools.pairwise(bounds):
        if end == start:
            continue
        qi, ki, vi = (t[start:end].to(compute_dtype).transpose(0, 1) for t in (q, k, v))
        scores = (qi @ ki.transpose(-1, -2)) * scale  # [heads, L, L]
        out[start:end] = (torch.softmax(scores, dim=-1) @ vi).transpose(0, 1)
    return out.to(q.dtype)


def pack_reference(
    x: torch.Tensor, keep_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """x [B, N, C], keep_mask bool [B, N] -> (packed [T, C], cu_seqlens int32 [B + 1],
    max_seqlen)."""
    lengths = keep_mask.sum(1)
    cu_seqlens = torch.zeros(x.shape[0] + 1, dtype=torch.int32, device=x.device)
    cu_seqlens[1:] = lengths.cumsum(0)
    max_seqlen = int(lengths.max()) if x.shape[0] else 0
    return x[keep_mask], cu_seqlens, max_seqlen


def unpack_reference(
    packed: torch.Tensor, cu_seqlens: torch.Tensor, keep_mask: torch.Tensor
) -> torch.Tensor:
    """packed [T, C] -> [B, N, C], kept positions in order, dropped positions zero."""
    out = packed.new_zeros((*keep_mask.shape, packed.shape[-1]))
    out[keep_mask] = packed[: int(cu_seqlens[-1])]
    return out


def gather_cls_reference(packed: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """The first token of each sequence [B, C]; zeros for empty sequences."""
    starts, ends = cu_seqlens[:-1].long(), cu_seqlens[1:].long()
    first = packed[starts.clamp(max=max(packed.shape[0] - 1, 0))] if packed.shape[0] else None
    out = packed.new_zeros((starts.shape[0], packed.shape[-1]))
    if first is not None:
        out[ends > starts] = first[ends > starts]
    return out
