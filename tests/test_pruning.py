"""Pruning methods: each rule against a direct computation, CLS kept, subsets, host counts."""

import math

import pytest
import torch

from ragged.pruning import (
    ATS,
    AttentionInfo,
    DynamicViT,
    EViT,
    ThresholdL2,
    ats,
    build_predictor,
    cls_attention,
    dynamicvit,
    evit,
    threshold_l2,
    top_k_mask,
)


def tokens(batch=3, n=17, c=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, n, c, generator=g)


def attention(batch=3, heads=2, n=17, seed=0, sharp=4.0):
    g = torch.Generator().manual_seed(seed)
    cls_attn = (sharp * torch.randn(batch, heads, n, generator=g)).softmax(-1)
    return AttentionInfo(cls_attn, torch.rand(batch, n, generator=g) + 0.5)


def test_top_k_mask_per_row_k():
    scores = torch.tensor([[5.0, 1, 3, 2], [0.0, 4, 4, 1]])
    cand = torch.tensor([[False, True, True, True], [True, True, True, False]])
    keep = top_k_mask(scores, cand, torch.tensor([2, 1]))
    assert keep.tolist() == [[False, False, True, True], [False, True, False, False]]


def test_threshold_l2_ratio_and_threshold():
    x = tokens()
    keep = threshold_l2(x, keep_ratio=0.5)
    norms = x.norm(dim=-1)
    for b in range(3):
        kept = keep[b, 1:].nonzero().flatten() + 1
        assert len(kept) == 8 and bool(keep[b, 0])
        dropped = (~keep[b, 1:]).nonzero().flatten() + 1
        assert norms[b, kept].min() >= norms[b, dropped].max()
    keep = threshold_l2(x, threshold=1.1)
    want = norms[:, 1:] >= 1.1 * norms[:, 1:].mean(1, keepdim=True)
    assert torch.equal(keep[:, 1:], want) and bool(keep[:, 0].all())


def test_dynamicvit_matches_its_predictor():
    x = tokens(c=16)
    predictor = build_predictor(16, seed=1)
    alive = torch.ones(3, 17, dtype=torch.bool)
    alive[:, 5:9] = False
    keep = dynamicvit(x, predictor, 0.5, alive)
    with torch.no_grad():
        score = predictor(x[:, 1:], alive[:, 1:, None].float())[:, :, 0]
    for b in range(3):
        cands = [i for i in range(1, 17) if alive[b, i]]
        best = sorted(cands, key=lambda i: -score[b, i - 1].item())[:8]
        assert sorted(keep[b].nonzero().flatten().tolist()) == sorted([0, *best])
    # the global feature averages over alive tokens only: dropped tokens do not matter
    y = x.clone()
    y[:, 5:9] = 100.0
    assert torch.equal(dynamicvit(y, predictor, 0.5, alive), keep)


def test_evit_fuses_the_inattentive_tokens():
    x, info = tokens(), attention()
    pruned = evit(x, info, 0.5)
    score = info.cls_attn.mean(1)
    for b in range(3):
        order = sorted(range(1, 17), key=lambda i: -score[b, i].item())
        top, rest = order[:8], sorted(order[8:])
        slot = rest[0]
        assert sorted(pruned.keep_mask[b].nonzero().flatten().tolist()) == sorted([0, *top, slot])
        fused = (x[b, rest] * score[b, rest, None]).sum(0)
        torch.testing.assert_close(pruned.x[b, slot], fused)
        others = [i for i in range(17) if i != slot]
        assert torch.equal(pruned.x[b, others], x[b, others])
    assert torch.equal(evit(x, info, 0.5, fuse=False).keep_mask.sum(1), torch.full((3,), 9))


def test_ats_samples_unique_tokens_within_budget():
    info = attention(batch=6, n=50, sharp=3.0)
    keep = ats(info, 0.5)
    kept = keep.sum(1)
    assert bool(keep[:, 0].all())
    assert bool((kept <= 1 + 24).all()) and bool((kept >= 2).all())
    assert len(set(kept.tolist())) > 1  # peaked scores: duplicates collapse, lengths differ
    # uniform scores: every sample lands on its own token -> exactly the budget
    flat = AttentionInfo(torch.full((2, 1, 50), 1 / 50), torch.ones(2, 50))
    assert ats(flat, 0.5).sum(1).tolist() == [25, 25]
    # the highest-significance token is always sampled
    sig = info.cls_attn.sum(1)[:, 1:] * info.v_norm[:, 1:]
    assert bool(keep[torch.arange(6), sig.argmax(1) + 1].all())


def test_later_steps_keep_subsets():
    x, info = tokens(), attention()
    alive = threshold_l2(x, keep_ratio=0.6)
    for step in (ThresholdL2(keep_ratio=0.5), EViT(0.5), ATS(0.5)):
        keep = step(x, alive, info).keep_mask
        assert not bool((keep & ~alive).any()) and bool(keep[:, 0].all())


@pytest.mark.parametrize("ratio", [0.1, 0.25, 0.3, 0.5, 0.7, 0.9, 1.0])
def test_kept_tokens_on_the_host_match_the_device(ratio):
    n = 197
    x, info = tokens(n=n), attention(n=n)
    predictor = build_predictor(8, seed=0)
    for step in (ThresholdL2(keep_ratio=ratio), EViT(ratio), DynamicViT(predictor, ratio)):
        keep = step(x, None, info).keep_mask
        assert keep.sum(1).tolist() == [step.kept_tokens(n, n)] * 3
    assert EViT(ratio).kept_tokens(n, n) == 1 + math.ceil(ratio * 196) + (ratio < 1)


def test_cls_attention_masks_dropped_keys():
    g = torch.Generator().manual_seed(0)
    q, k, v = torch.randn(2, 3, 4, generator=g), *torch.randn(2, 2, 5, 3, 4, generator=g)
    keep = torch.tensor([[True, True, False, True, True], [True] * 5])
    info = cls_attention(q, k, v, keep, 0.5)
    assert info.cls_attn.shape == (2, 3, 5)
    assert bool((info.cls_attn[0, :, 2] == 0).all())
    torch.testing.assert_close(info.cls_attn.sum(-1), torch.ones(2, 3))
    torch.testing.assert_close(info.v_norm, v.flatten(2).norm(dim=-1))


def test_bad_arguments():
    with pytest.raises(ValueError, match="budget_ratio"):
        ATS(0)
    with pytest.raises(ValueError, match="threshold"):
        ThresholdL2(threshold=-1)
    with pytest.raises(TypeError, match="DynamicViTPredictor"):
        DynamicViT(torch.nn.Linear(2, 2), 0.5)
    with pytest.raises(ValueError, match="keep_mask"):
        threshold_l2(tokens(), torch.ones(3, 5, dtype=torch.bool), keep_ratio=0.5)
