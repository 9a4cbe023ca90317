"""DynamicViT: a learned prediction module scores each token; keep the top scores.

Reference: Rao et al., "DynamicViT: Efficient Vision Transformers with Dynamic Token
Sparsification", NeurIPS 2021. The prediction module (the paper's Eq. 1-3, ``PredictorLG`` in
its code) projects each token, splits the features into a local half and a global half
averaged over the tokens still alive, concatenates them and maps them through an MLP to
(keep, drop) log-probabilities. At inference each image keeps its
``floor(keep_ratio * (N - 1))`` highest keep scores (N - 1 patches: the ratio is relative to
the original patch count, as the paper's rho, rho^2, rho^3 schedule at three prune points is).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

import torch
from torch import nn

from ._common import (
    AttentionInfo,
    Pruned,
    candidates,
    check_ratio,
    check_tokens,
    top_k_mask,
    with_cls,
)


class DynamicViTPredictor(nn.Module):
    """DynamicViT's prediction module for tokens of width ``embed_dim``."""

    def __init__(self, embed_dim: int):
        super().__init__()
        c = embed_dim
        self.in_conv = nn.Sequential(nn.LayerNorm(c), nn.Linear(c, c), nn.GELU())
        self.out_conv = nn.Sequential(
            nn.Linear(c, c // 2),
            nn.GELU(),
            nn.Linear(c // 2, c // 4),
            nn.GELU(),
            nn.Linear(c // 4, 2),
            nn.LogSoftmax(dim=-1),
        )

    def forward(self, x: torch.Tensor, policy: torch.Tensor) -> torch.Tensor:
        """x [B, M, C] patch tokens, policy [B, M, 1] (1 alive, 0 dropped) -> [B, M, 2]
        log-probabilities of (keep, drop)."""
        x = self.in_conv(x)
        batch, m, c = x.shape
        local_x = x[:, :, : c // 2]
        global_x = (x[:, :, c // 2 :] * policy).sum(1, keepdim=True) / policy.sum(
            1, keepdim=True
        ).clamp_min(1)
        return self.out_conv(torch.cat([local_x, global_x.expand(batch, m, c // 2)], dim=-1))


def build_predictor(
    embed_dim: int,
    *,
    weights: str | Path | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
) -> DynamicViTPredictor:
    """A prediction module in eval mode: weights from a local state-dict file, or PyTorch's
    default initialisation drawn from ``seed`` on the CPU (global RNG state untouched)."""
    from ..models import build_module

    predictor = build_module(lambda: DynamicViTPredictor(embed_dim), weights, seed)
    return predictor.eval().to(device=device, dtype=dtype)


def dynamicvit(
    x: torch.Tensor,
    predictor: DynamicViTPredictor,
    keep_ratio: float,
    keep_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """x [B, N, C] (CLS first), keep_mask bool [B, N] (None: all alive) -> bool [B, N]."""
    check_tokens(x, keep_mask)
    batch, n, _ = x.shape
    cand = candidates(keep_mask, batch, n, x.device)
    policy = cand[:, 1:, None].to(x.dtype)
    keep_score = predictor(x[:, 1:], policy)[:, :, 0]  # [B, N - 1]
    scores = torch.cat([keep_score.new_zeros(batch, 1), keep_score], dim=1)
    k = cand.sum(1).clamp_max(math.floor(keep_ratio * (n - 1)))
    return with_cls(top_k_mask(scores, cand, k))


@dataclass(frozen=True, eq=False)
class DynamicViT:
    """DynamicViT as a pipeline step: one prediction module per prune point."""

    predictor: DynamicViTPredictor = field(repr=False)
    keep_ratio: float = 0.7
    uses_attention: ClassVar[bool] = False
    name: ClassVar[str] = "dynamicvit"

    def __post_init__(self):
        check_ratio("keep_ratio", self.keep_ratio)
        if not isinstance(self.predictor, DynamicViTPredictor):
            raise TypeError(
                f"predictor must be a DynamicViTPredictor, got {type(self.predictor).__name__}"
            )

    def __call__(self, x, keep_mask, attn: AttentionInfo | None = None) -> Pruned:
        return Pruned(dynamicvit(x, self.predictor, self.keep_ratio, keep_mask), x)

    def kept_tokens(self, num_tokens: int, alive: int | None) -> int | None:
        if alive is None:
            return None
        return 1 + min(math.floor(self.keep_ratio * (num_tokens - 1)), alive - 1)
