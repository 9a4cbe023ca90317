"""Ragged-length factories and error-budget assertions, shared by tests and benchmarks."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from .reference import varlen_attention_reference


def kept_tokens(num_tokens: int, prune_ratio: float) -> int:
    """Tokens left after pruning ``prune_ratio`` of ``num_tokens`` (197 at 80% -> 40, as in
    the paper)."""
    return max(1, math.ceil(num_tokens * (1.0 - prune_ratio) - 1e-9))


def mixed_lengths(
    batch: int, total: int, max_len: int, *, seed: int = 0, min_len: int = 1
) -> list[int]:
    """``batch`` lengths in [min_len, max_len] that sum to ``total``, spread widely.

    Lengths are drawn from a seeded exponential split of ``total`` and then nudged into bounds,
    so a batch with the same total tokens as a uniform one is truly ragged.
    """
    if not batch * min_len <= total <= batch * max_len:
        raise ValueError(
            f"cannot split {total} tokens into {batch} lengths in [{min_len}, {max_len}]"
        )
    g = torch.Generator().manual_seed(seed)
    weights = torch.empty(batch).exponential_(generator=g)
    lengths = (weights / weights.sum() * total).round().long().clamp(min_len, max_len).tolist()
    # Move the rounding/clamping excess onto lengths that still have room, in a seeded order.
    order = torch.randperm(batch, generator=g).tolist()
    diff = total - sum(lengths)
    while diff:
        step = 1 if diff > 0 else -1
        for i in order:
            if diff and min_len <= lengths[i] + step <= max_len:
                lengths[i] += step
                diff -= step
    return lengths


def cu_seqlens_from_lengths(lengths: Sequence[int], device=None) -> torch.Tensor:
    """int32 [len(lengths) + 1]: 0 then the running total."""
    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device)


def packed_qkv(
    lengths: Sequence[int], heads: int, head_dim: int, *, dtype=torch.float16, device=None, seed=0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Random q, k, v as strided views of one packed qkv [T, 3, heads, head_dim] (as a ViT's
    qkv projection produces them), with cu_seqlens and max_seqlen."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(sum(lengths), 3, heads, head_dim, generator=g).to(dtype=dtype, device=device)
    q, k, v = qkv.unbind(1)
    return q, k, v, cu_seqlens_from_lengths(lengths, device), max(lengths, default=0)


def attention_error_budget(q, k, v, cu_seqlens, softmax_scale=None) -> tuple[torch.Tensor, float]:
    """The float64 oracle and the largest error a kernel may have against it.

    The budget is 2x the max abs error of eager PyTorch at the inputs' dtype (the same math
    in that dtype) plus one unit of that dtype's rounding at the output's magnitude.
    """
    oracle = varlen_attention_reference(
        q.double(), k.double(), v.double(), cu_seqlens, softmax_scale, compute_dtype=torch.float64
    )
    eager = varlen_attention_reference(q, k, v, cu_seqlens, softmax_scale, compute_dtype=q.dtype)
    eager_err = (eager.double() - oracle).abs().max().item() if oracle.numel() else 0.0
    scale = oracle.abs().max().item() if oracle.numel() else 0.0
    return oracle, 2.0 * eager_err + torch.finfo(q.dtype).eps * max(scale, 1.0)


def assert_attention_close(out, q, k, v, cu_seqlens, softmax_scale=None) -> float:
    """Assert ``out`` is within the error budget of the oracle; return the max abs error."""
    oracle, budget = attention_error_budget(q, k, v, cu_seqlens, softmax_scale)
    assert out.shape == q.shape and out.dtype == q.dtype, (out.shape, out.dtype)
    assert torch.isfinite(out).all(), "output has non-finite values"
    err = (out.double().cpu() - oracle.cpu()).abs().max().item() if out.numel() else 0.0
    assert err <= budget, f"max abs error {err:.3g} exceeds budget {budget:.3g} (2x eager + eps)"
    return err


def synthetic_images(
    batch: int, img_size: int, *, seed: int = 0, device="cpu", dtype=torch.float32
) -> torch.Tensor:
    """Images [B, 3, S, S] with content that differs per image: a smooth, faint background
    and one textured rectangle covering 5-80% of the image at a random place.

    Random-weight models keep the contrast between textured and flat patches in their token
    norms and attention, so content-dependent pruning (Threshold-L2 with a threshold, ATS)
    keeps a different number of tokens per image, as it would on real photos.
    """
    g = torch.Generator().manual_seed(seed)
    ramp = torch.linspace(-1, 1, img_size)
    tilt = torch.rand(batch, 3, 2, generator=g) - 0.5
    images = 0.3 * (tilt[..., 0, None, None] * ramp[:, None] + tilt[..., 1, None, None] * ramp)
    images = images + 0.05 * torch.randn(batch, 3, img_size, img_size, generator=g)
    for b in range(batch):
        area = 0.05 + 0.75 * torch.rand((), generator=g).item()
        aspect = math.exp((torch.rand((), generator=g).item() - 0.5) * 1.0)
        h = max(16, min(img_size, round(img_size * math.sqrt(area * aspect))))
        w = max(16, min(img_size, round(img_size * math.sqrt(area / aspect))))
        top = int(torch.randint(0, img_size - h + 1, (), generator=g))
        left = int(torch.randint(0, img_size - w + 1, (), generator=g))
        images[b, :, top : top + h, left : left + w] += 1.5 * torch.randn(3, h, w, generator=g)
    return images.to(device=device, dtype=dtype)
