"""Threshold-L2: keep the tokens with the largest L2 norms.

Reference: the pruning rule of "Dispatch-Aware Ragged Attention for Pruned Vision
Transformers" (Section V: "Threshold-L2 pruning at a fixed ratio"): a token's importance is
the L2 norm of its hidden state. Two ways to cut:

- ``keep_ratio``: top-k, k = floor(keep_ratio * alive patches) per image (the paper's fixed
  ratio: every image gets the same length);
- ``threshold``: keep a patch when its norm is at least ``threshold`` times the mean norm of
  that image's alive patches. The cut is per image and scale-free, so lengths differ per
  image with its content (truly ragged batches).
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
    check_ratio,
    check_tokens,
    floor_count,
    top_k_mask,
    with_cls,
)


def threshold_l2(
    x: torch.Tensor,
    keep_mask: torch.Tensor | None = None,
    *,
    keep_ratio: float | None = None,
    threshold: float | None = None,
) -> torch.Tensor:
    """x [B, N, C] (CLS first), keep_mask bool [B, N] of the tokens alive (None: all) ->
    bool [B, N] keep mask. Give exactly one of ``keep_ratio`` and ``threshold``."""
    check_tokens(x, keep_mask)
    batch, n, _ = x.shape
    cand = candidates(keep_mask, batch, n, x.device)
    norms = torch.linalg.vector_norm(x.float(), dim=-1)  # [B, N]
    if keep_ratio is not None:
        keep = top_k_mask(norms, cand, floor_count(keep_ratio, cand.sum(1)))
    else:
        alive = cand.sum(1, keepdim=True).clamp_min(1)
        mean = torch.where(cand, norms, 0).sum(1, keepdim=True) / alive
        keep = cand & (norms >= threshold * mean)
    return with_cls(keep)


@dataclass(frozen=True)
class ThresholdL2:
    """Threshold-L2 as a pipeline step (see ``threshold_l2``)."""

    keep_ratio: float | None = None
    threshold: float | None = None
    uses_attention: ClassVar[bool] = False
    name: ClassVar[str] = "threshold_l2"

    def __post_init__(self):
        if (self.keep_ratio is None) == (self.threshold is None):
            raise ValueError("ThresholdL2 needs exactly one of keep_ratio and threshold")
        if self.keep_ratio is not None:
            check_ratio("keep_ratio", self.keep_ratio)
        elif isinstance(self.threshold, bool) or not (
            isinstance(self.threshold, (int, float)) and self.threshold >= 0
        ):
            raise ValueError(f"threshold must be a number >= 0, got {self.threshold!r}")

    def __call__(self, x, keep_mask, attn: AttentionInfo | None = None) -> Pruned:
        mask = threshold_l2(x, keep_mask, keep_ratio=self.keep_ratio, threshold=self.threshold)
        return Pruned(mask, x)

    def kept_tokens(self, num_tokens: int, alive: int | None) -> int | None:
        """Tokens per image after this step (CLS included) when known on the host, else None."""
        if self.keep_ratio is None or alive is None:
            return None
        return 1 + math.floor(self.keep_ratio * (alive - 1))
