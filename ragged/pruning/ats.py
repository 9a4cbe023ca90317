"""ATS: adaptive token sampling by inverse-transform sampling of significance scores.

Reference: Fayyaz et al., "Adaptive Token Sampling for Efficient Vision Transformers",
ECCV 2022. Inside the prune block, after its attention: a patch's significance is the CLS
query's attention to it (summed over heads) times the L2 norm of its value vector,
normalised over the alive patches. The scores are sorted, their cumulative distribution
normalised to [0, 1], and a budget of ``K = max(1, floor(budget_ratio * alive patches))``
evenly spaced points from the CDF's first non-zero value to 1 is mapped back through the
inverse CDF (each point picks the patch whose CDF value is nearest). Patches picked more
than once count once, so the number kept is at most K and differs per image: a few
dominant patches absorb many samples.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch

from ._common import AttentionInfo, Pruned, candidates, check_ratio, floor_count, with_cls


def ats(
    attn: AttentionInfo, budget_ratio: float, keep_mask: torch.Tensor | None = None
) -> torch.Tensor:
    """attn of the prune block (cls_attn [B, H, N], v_norm [B, N]), keep_mask bool [B, N]
    (None: all alive) -> bool [B, N]. No host synchronisation."""
    batch, _, n = attn.cls_attn.shape
    device = attn.cls_attn.device
    cand = candidates(keep_mask, batch, n, device)
    score = torch.where(cand, attn.cls_attn.sum(1) * attn.v_norm, 0)
    score = score / score.sum(1, keepdim=True).clamp_min(torch.finfo(score.dtype).tiny)
    sorted_score, order = torch.sort(score, dim=1)  # ascending: the dropped (0) first
    cdf = sorted_score.cumsum(1)
    lo, hi = cdf[:, :1], cdf[:, -1:]
    cdf = ((cdf - lo) / (hi - lo).clamp_min(torch.finfo(cdf.dtype).tiny)).contiguous()
    # Sample points: K per row from the first non-zero CDF value to 1, padded to N - 1.
    budget = floor_count(budget_ratio, cand.sum(1)).clamp_min(1)  # [B]
    start = torch.where(cdf > 0, cdf, 2.0).amin(1, keepdim=True).clamp_max(1.0)
    i = torch.arange(n - 1, device=device, dtype=cdf.dtype)[None, :]
    ys = (start + i * (1 - start) / (budget[:, None] - 1).clamp_min(1)).contiguous()
    # Nearest CDF value: the insertion point or the one before it (ties: the lower index).
    right = torch.searchsorted(cdf, ys).clamp_max(n - 1)
    left = (right - 1).clamp_min(0)
    closer_left = (cdf.gather(1, left) - ys).abs() <= (cdf.gather(1, right) - ys).abs()
    picked = order.gather(1, torch.where(closer_left, left, right))  # token indices [B, N - 1]
    picked = torch.where(i < budget[:, None], picked, 0)  # unused samples land on CLS
    keep = torch.zeros_like(cand).scatter_(1, picked, True) & cand
    return with_cls(keep)


@dataclass(frozen=True)
class ATS:
    """ATS as a pipeline step (see ``ats``)."""

    budget_ratio: float = 0.5
    uses_attention: ClassVar[bool] = True
    name: ClassVar[str] = "ats"

    def __post_init__(self):
        check_ratio("budget_ratio", self.budget_ratio)

    def __call__(self, x, keep_mask, attn: AttentionInfo) -> Pruned:
        return Pruned(ats(attn, self.budget_ratio, keep_mask), x)

    def kept_tokens(self, num_tokens: int, alive: int | None) -> None:
        return None  # data-dependent
