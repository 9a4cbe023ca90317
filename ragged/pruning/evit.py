"""EViT: keep the tokens the CLS token attends to most; fuse the rest into one token.

Reference: Liang et al., "Not All Patches are What You Need: Expediting Vision Transformers
via Token Reorganizations", ICLR 2022. Inside the prune block, after its attention: the
attentiveness of a patch is the CLS query's attention to it averaged over heads; each image
keeps ``ceil(keep_ratio * alive patches)`` most attentive patches, and the inattentive ones
are fused into one extra token, their sum weighted by those attention values (unnormalised,
as in the paper's code). The block's MLP and all later blocks see the kept tokens plus the
fused one; a later EViT step may fuse the fused token again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch

from ._common import (
    AttentionInfo,
    Pruned,
    candidates,
    ceil_count,
    check_ratio,
    check_tokens,
    top_k_mask,
    with_cls,
)


def evit(
    x: torch.Tensor,
    attn: AttentionInfo,
    keep_ratio: float,
    keep_mask: torch.Tensor | None = None,
    *,
    fuse: bool = True,
) -> Pruned:
    """x [B, N, C] (CLS first), attn of the prune block, keep_mask bool [B, N] (None: all)
    -> ``Pruned``. With ``fuse`` the fused token takes the slot of the first inattentive
    patch (token order does not matter past the position embedding); x is then copied."""
    check_tokens(x, keep_mask)
    batch, n, _ = x.shape
    cand = candidates(keep_mask, batch, n, x.device)
    score = attn.cls_attn.mean(1)  # [B, N]
    top = top_k_mask(score, cand, ceil_count(keep_ratio, cand.sum(1)))
    keep = with_cls(top.clone())
    if not fuse:
        return Pruned(keep, x)
    rest = cand & ~top
    weights = torch.where(rest, score, 0)  # [B, N]
    fused = torch.bmm(weights[:, None, :], x.float())[:, 0].to(x.dtype)  # [B, C]
    slot = rest.to(torch.int8).argmax(1)  # first inattentive patch
    has_rest = rest.any(1)
    rows = torch.arange(batch, device=x.device)
    x = x.clone()
    x[rows, slot] = torch.where(has_rest[:, None], fused, x[rows, slot])
    keep[rows, slot] |= has_rest
    return Pruned(keep, x)


@dataclass(frozen=True)
class EViT:
    """EViT as a pipeline step (see ``evit``)."""

    keep_ratio: float = 0.7
    fuse: bool = True
    uses_attention: ClassVar[bool] = True
    name: ClassVar[str] = "evit"

    def __post_init__(self):
        check_ratio("keep_ratio", self.keep_ratio)

    def __call__(self, x, keep_mask, attn: AttentionInfo) -> Pruned:
        return evit(x, attn, self.keep_ratio, keep_mask, fuse=self.fuse)

    def kept_tokens(self, num_tokens: int, alive: int | None) -> int | None:
        if alive is None:
            return None
        top = math.ceil(self.keep_ratio * (alive - 1))
        return 1 + top + int(self.fuse and top < alive - 1)
