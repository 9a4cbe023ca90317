"""What every pruning method shares: the result type, CLS attention, per-row top-k."""

from __future__ import annotations

import math
from typing import NamedTuple

import torch


class AttentionInfo(NamedTuple):
    """What the attention-based methods (EViT, ATS) read from the prune block's attention.

    cls_attn: float32 [B, H, N], the CLS query's softmax over the keys alive (0 elsewhere).
    v_norm:   float32 [B, N], L2 norm of each token's value vector over all heads.
    """

    cls_attn: torch.Tensor
    v_norm: torch.Tensor


class Pruned(NamedTuple):
    """A pruning step's result.

    keep_mask: bool [B, N], CLS (column 0) always True; a subset of the tokens alive before.
    x:         [B, N, C], the tokens to keep from: the input itself, or (EViT) a copy with
               the fused token written into one kept slot.
    """

    keep_mask: torch.Tensor
    x: torch.Tensor


def cls_attention(
    q_cls: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    keep_mask: torch.Tensor | None,
    scale: float,
) -> AttentionInfo:
    """q_cls [B, H, d], k and v [B, N, H, d] (any float dtype), keep_mask bool [B, N] or None
    (all alive) -> ``AttentionInfo`` in float32. Costs B*H*N*d: nothing next to the block."""
    logits = torch.einsum("bhd,bnhd->bhn", q_cls.float(), k.float()) * scale
    if keep_mask is not None:
        logits = logits.masked_fill(~keep_mask[:, None, :], float("-inf"))
    return AttentionInfo(logits.softmax(-1), v.float().flatten(2).norm(dim=-1))


def candidates(keep_mask: torch.Tensor | None, batch: int, n: int, device) -> torch.Tensor:
    """bool [B, N]: the tokens a method may drop, i.e. those alive except CLS."""
    if keep_mask is None:
        cand = torch.ones(batch, n, dtype=torch.bool, device=device)
    else:
        cand = keep_mask.clone()
    cand[:, 0] = False
    return cand


def with_cls(keep_mask: torch.Tensor) -> torch.Tensor:
    keep_mask[:, 0] = True
    return keep_mask


def floor_count(ratio: float, alive: torch.Tensor) -> torch.Tensor:
    """floor(ratio * alive) per row, int64; float64 so it equals ``math.floor`` on the host."""
    return torch.floor(alive.double() * ratio).long()


def ceil_count(ratio: float, alive: torch.Tensor) -> torch.Tensor:
    return torch.ceil(alive.double() * ratio).long()


def check_ratio(name: str, ratio: float) -> float:
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise ValueError(f"{name} must be a number in (0, 1], got {ratio!r}")
    if not math.isfinite(ratio):
        raise ValueError(f"{name} must be finite, got {ratio!r}")
    return float(ratio)


def check_tokens(x: torch.Tensor, keep_mask: torch.Tensor | None) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 3:
        raise ValueError(f"x must be a tensor [B, N, C], got {getattr(x, 'shape', type(x))}")
    if keep_mask is not None and (keep_mask.dtype != torch.bool or keep_mask.shape != x.shape[:2]):
        raise ValueError(
            f"keep_mask must be bool {list(x.shape[:2])}, got {keep_mask.dtype} "
            f"{list(keep_mask.shape)}"
        )


def top_k_mask(scores: torch.Tensor, cand: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Per row, the ``k[b]`` highest-scoring candidates (ties: the lower index).

    scores float [B, N]; cand bool [B, N]; k int64 [B] -> bool [B, N]. Sort-based, so k may
    differ per row, with no host synchronisation.
    """
    batch, n = scores.shape
    s = scores.float().masked_fill(~cand, float("-inf"))
    order = torch.sort(s, dim=1, descending=True, stable=True).indices
    rank = torch.empty_like(order).scatter_(
        1, order, torch.arange(n, device=scores.device).expand(batch, n)
    )
    return (rank < k[:, None]) & cand
