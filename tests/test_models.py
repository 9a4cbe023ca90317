"""Model building: seeded, local weight files, supported-model checks."""

import pytest
import torch
from timm.models.vision_transformer import VisionTransformer

from ragged.models import MODELS, build_model, check_supported, get_config, scale_attention


def test_configs_match_timm():
    for name in ("deit_tiny_224", "deit_base_384"):
        cfg = get_config(name)
        model = build_model(name)
        assert model.embed_dim == cfg.embed_dim and len(model.blocks) == cfg.depth
        assert model.patch_embed.num_patches + 1 == cfg.num_tokens
        assert model.blocks[0].attn.num_heads == cfg.num_heads
    assert set(MODELS) == {"deit_tiny_224", "deit_small_224", "deit_base_224", "deit_base_384"}
    with pytest.raises(ValueError, match="unknown model"):
        get_config("vit_huge")


def test_seeded_and_rng_untouched():
    state = torch.random.get_rng_state()
    a, b, c = (build_model("deit_tiny_224", seed=s) for s in (1, 1, 2))
    assert torch.equal(torch.random.get_rng_state(), state)
    assert torch.equal(a.head.weight, b.head.weight)
    assert not torch.equal(a.head.weight, c.head.weight)
    assert not a.training


def test_weights_file_round_trip(tmp_path):
    src = build_model("deit_tiny_224", seed=5)
    path = tmp_path / "deit.pth"
    torch.save({"model": src.state_dict()}, path)
    loaded = build_model("deit_tiny_224", seed=0, weights=path)
    for (k, v), w in zip(src.state_dict().items(), loaded.state_dict().values(), strict=True):
        assert torch.equal(v, w), k
    with pytest.raises(FileNotFoundError, match="does not exist"):
        build_model("deit_tiny_224", weights=tmp_path / "missing.pth")
    torch.save({"model": {"head.weight": torch.zeros(1)}}, tmp_path / "bad.pth")
    with pytest.raises(ValueError, match="missing"):
        build_model("deit_tiny_224", weights=tmp_path / "bad.pth")
    (tmp_path / "junk.pth").write_text("not a checkpoint")
    with pytest.raises(ValueError, match="not a readable"):
        build_model("deit_tiny_224", weights=tmp_path / "junk.pth")


def test_attention_scale_scales_q_and_k_only():
    a = build_model("deit_tiny_224", seed=0)
    b = build_model("deit_tiny_224", seed=0, attention_scale=4.0)
    wa, wb = a.blocks[0].attn.qkv.weight, b.blocks[0].attn.qkv.weight
    torch.testing.assert_close(wb[:384], 2 * wa[:384])
    assert torch.equal(wb[384:], wa[384:])
    with pytest.raises(ValueError, match="> 0"):
        scale_attention(a, 0.0)


def test_unsupported_models_are_named():
    check_supported(build_model("deit_tiny_224"))
    reg = VisionTransformer(img_size=32, patch_size=16, embed_dim=64, depth=1, num_heads=2,
                            reg_tokens=2)  # fmt: skip
    with pytest.raises(ValueError, match="register tokens"):
        check_supported(reg)
    pooled = VisionTransformer(img_size=32, patch_size=16, embed_dim=64, depth=1, num_heads=2,
                               global_pool="avg")  # fmt: skip
    with pytest.raises(ValueError, match="global_pool"):
        check_supported(pooled)
