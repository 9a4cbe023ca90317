"""The pruned pipeline against padded_max and the timm model (CPU: Triton interpreter)."""

import itertools

import pytest
import torch

from ragged.models import SHARP_ATTENTION, build_model
from ragged.pipeline import CapacityOverflowError, PrunedViT, PruneStage
from ragged.pruning import ATS, DynamicViT, EViT, ThresholdL2, build_predictor
from ragged.testing import synthetic_images

TOL = 1e-4  # fp32 on the CPU


@pytest.fixture(scope="module")
def tiny():
    """DeiT-Ti in fp32, on the GPU when there is one (the Triton kernel runs there only)."""
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = build_model("deit_tiny_224", seed=0, attention_scale=SHARP_ATTENTION, device=device)
    return model, synthetic_images(4, 224, seed=1, device=device)


def methods(model):
    predictor = build_predictor(model.embed_dim, seed=2, device=model.head.weight.device)
    return {
        "threshold_l2": ThresholdL2(keep_ratio=0.5),
        "threshold_l2_per_image": ThresholdL2(threshold=1.0),
        "dynamicvit": DynamicViT(predictor, 0.5),
        "evit": EViT(0.5),
        "ats": ATS(0.5),
    }


def assert_matches(logits, masks, ref, ref_masks, tol=TOL):
    assert (logits - ref).abs().max().item() < tol
    assert torch.equal(logits.argmax(1), ref.argmax(1))
    assert len(masks) == len(ref_masks)
    for a, b in zip(masks, ref_masks, strict=True):
        assert torch.equal(a, b)


@pytest.mark.parametrize(
    "name", ["threshold_l2", "threshold_l2_per_image", "dynamicvit", "evit", "ats"]
)
def test_every_method_ragged_matches_padded_max(tiny, name):
    model, images = tiny
    stage = PruneStage(4, methods(model)[name])
    ref, ref_masks = PrunedViT(model, stage, mode="padded_max").forward(images, return_masks=True)
    for mode in ("ragged", "padded_full"):
        logits, masks = PrunedViT(model, stage, mode=mode).forward(images, return_masks=True)
        assert_matches(logits, masks, ref, ref_masks)
    kept = ref_masks[0].sum(1)
    assert bool(ref_masks[0][:, 0].all())  # CLS kept
    assert int(kept.max()) < 197
    if name in ("threshold_l2_per_image", "ats"):
        assert len(set(kept.tolist())) > 1, f"{name} kept {kept.tolist()}: not ragged"
    else:
        assert set(kept.tolist()) == {PrunedViT(model, stage).kept_lengths[0]}


def test_multi_stage(tiny):
    model, images = tiny
    dev = images.device
    p1, p2 = build_predictor(192, seed=3, device=dev), build_predictor(192, seed=4, device=dev)
    for stages in (
        [PruneStage(3, DynamicViT(p1, 0.7)), PruneStage(6, DynamicViT(p2, 0.49))],
        [PruneStage(3, EViT(0.7)), PruneStage(6, EViT(0.7)), PruneStage(9, EViT(0.7))],
        [
            PruneStage(2, ATS(0.8)),
            PruneStage(5, ThresholdL2(threshold=1.0)),
            PruneStage(8, EViT(0.5)),
        ],
    ):
        ref, ref_masks = PrunedViT(model, stages, mode="padded_max").forward(
            images, return_masks=True
        )
        logits, masks = PrunedViT(model, stages).forward(images, return_masks=True)
        assert_matches(logits, masks, ref, ref_masks)
        for before, after in itertools.pairwise(ref_masks):
            assert not bool((after & ~before).any()), "a later stage kept a dropped token"
            assert bool((after.sum(1) < before.sum(1)).all())


def test_all_kept_reproduces_timm(tiny):
    model, images = tiny
    with torch.inference_mode():
        dense = model(images)
    for mode in ("ragged", "padded_full", "padded_max"):
        p = PrunedViT(model, PruneStage(4, ThresholdL2(keep_ratio=1.0)), mode=mode)
        logits = p(images)
        assert (logits - dense).abs().max().item() < TOL
        assert torch.equal(logits.argmax(1), dense.argmax(1))
    logits = PrunedViT(model, PruneStage(0, EViT(1.0)))(images)
    assert (logits - dense).abs().max().item() < TOL


def test_capacity(tiny):
    model, images = tiny
    stage = PruneStage(4, ATS(0.5))
    exact, masks = PrunedViT(model, stage).forward(images, return_masks=True)
    total = int(masks[0].sum())
    logits = PrunedViT(model, stage, capacity=total + 5)(images)
    assert (logits - exact).abs().max().item() < TOL
    small = PrunedViT(model, stage, capacity=total - 1)
    with pytest.raises(CapacityOverflowError, match=f"capacity={total - 1}"):
        small(images)
    small.forward(images, check_overflow=False)
    assert small.overflowed()


def test_flops(tiny):
    model, images = tiny
    p = PrunedViT(model, PruneStage(4, ThresholdL2(keep_ratio=0.5)))
    _, masks = p.forward(images, return_masks=True)
    ideal = p.flops_per_image([]) / p.flops_per_image(masks)
    assert bool((ideal > 1.3).all()) and bool((ideal < 2).all())
    full = PrunedViT(model, PruneStage(4, ThresholdL2(keep_ratio=1.0)))
    _, all_masks = full.forward(images, return_masks=True)
    torch.testing.assert_close(full.flops_per_image(all_masks), full.flops_per_image([]).expand(4))


def test_bad_arguments(tiny):
    model, images = tiny
    stage = PruneStage(4, EViT(0.5))
    with pytest.raises(ValueError, match="unknown mode"):
        PrunedViT(model, stage, mode="sparse")
    with pytest.raises(ValueError, match="unknown ragged backend"):
        PrunedViT(model, stage, backend="cudnn")
    with pytest.raises(ValueError, match="increase"):
        PrunedViT(model, [PruneStage(6, EViT(0.5)), PruneStage(3, EViT(0.5))])
    with pytest.raises(ValueError, match="increase"):
        PrunedViT(model, PruneStage(12, EViT(0.5)))
    with pytest.raises(ValueError, match="capacity"):
        PrunedViT(model, stage, capacity=0)
    with pytest.raises(ValueError, match="exact packing"):
        PrunedViT(model, stage, backend="nested_sdpa", capacity=100)
    with pytest.raises(ValueError, match="cuda_graph"):
        PrunedViT(model, PruneStage(4, ATS(0.5)), mode="padded_max", cuda_graph=True)
    with pytest.raises(ValueError, match="VisionTransformer"):
        PrunedViT(torch.nn.Linear(2, 2), stage)
    with pytest.raises(ValueError, match="images must be"):
        PrunedViT(model, stage)(images.half())
    with pytest.raises(ValueError, match="images must be"):
        PrunedViT(model, stage)(images[0])
    with pytest.raises(ValueError, match="keep_ratio"):
        EViT(1.5)
    with pytest.raises(ValueError, match="exactly one"):
        ThresholdL2()
