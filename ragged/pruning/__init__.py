"""Token pruning methods: pure functions from tokens (and attention) to keep masks.

Each method module has the function (``threshold_l2``, ``dynamicvit``, ``evit``, ``ats``) and
a frozen pipeline step (``ThresholdL2``, ``DynamicViT``, ``EViT``, ``ATS``) with:

- ``uses_attention``: the step runs inside the prune block, after its attention, and reads
  the CLS attention (EViT, ATS); otherwise it runs before the block (Threshold-L2, DynamicViT);
- ``__call__(x [B, N, C], keep_mask [B, N] | None, attn: AttentionInfo | None) -> Pruned``;
- ``kept_tokens(num_tokens, alive)``: tokens per image afterwards when the host can know it
  without looking at the data (fixed ratios), else None.

Keep masks are bool [B, N] over the model's N token positions, CLS (column 0) always kept;
a later step keeps a subset of what an earlier one kept.
"""

from ._common import AttentionInfo, Pruned, cls_attention, top_k_mask
from .ats import ATS, ats
from .dynamicvit import DynamicViT, DynamicViTPredictor, build_predictor, dynamicvit
from .evit import EViT, evit
from .threshold_l2 import ThresholdL2, threshold_l2

METHODS = ("threshold_l2", "dynamicvit", "evit", "ats")

__all__ = [
    "ATS",
    "METHODS",
    "AttentionInfo",
    "DynamicViT",
    "DynamicViTPredictor",
    "EViT",
    "Pruned",
    "ThresholdL2",
    "ats",
    "build_predictor",
    "cls_attention",
    "dynamicvit",
    "evit",
    "threshold_l2",
    "top_k_mask",
]
