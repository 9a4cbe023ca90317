"""timm DeiT models by name: random weights from a seed, or a local state-dict file.

Nothing here downloads: ``pretrained`` is never passed to timm. Any timm
``VisionTransformer`` built elsewhere works with the pipeline too, as long as
``check_supported`` accepts it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import timm
import torch
from timm.layers import Mlp
from timm.models.vision_transformer import Attention, Block, VisionTransformer


@dataclass(frozen=True)
class ModelConfig:
    """One named DeiT geometry (timm's ``deit_*_patch16_*`` architectures)."""

    name: str
    timm_name: str
    img_size: int
    embed_dim: int
    depth: int
    num_heads: int

    @property
    def num_tokens(self) -> int:
        """Tokens per image entering the blocks: the patches plus CLS (197 at 224, 577 at 384)."""
        return (self.img_size // 16) ** 2 + 1


MODELS: dict[str, ModelConfig] = {
    c.name: c
    for c in (
        ModelConfig("deit_tiny_224", "deit_tiny_patch16_224", 224, 192, 12, 3),
        ModelConfig("deit_small_224", "deit_small_patch16_224", 224, 384, 12, 6),
        ModelConfig("deit_base_224", "deit_base_patch16_224", 224, 768, 12, 12),
        ModelConfig("deit_base_384", "deit_base_patch16_384", 384, 768, 12, 12),
    )
}


def get_config(name: str) -> ModelConfig:
    try:
        return MODELS[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown model {name!r}; expected one of {', '.join(MODELS)}") from None


def build_model(
    name: str,
    *,
    weights: str | Path | None = None,
    seed: int = 0,
    device: str | torch.device = "cpu",
    dtype: torch.dtype = torch.float32,
    attention_scale: float = 1.0,
) -> VisionTransformer:
    """The DeiT ``name`` (a key of ``MODELS``) in eval mode on ``device`` in ``dtype``.

    Weights: ``weights`` is a local file (``torch.save``'d state dict, optionally under a
    ``"model"`` key as DeiT's checkpoints store it, or ``.safetensors``); without it, timm's own
    initialisation drawn from ``seed`` on the CPU, so a seed gives the same model on any device.
    The global RNG state is left as it was.

    ``attention_scale`` multiplies every attention logit (q and k weights and biases each by
    its square root). timm's random initialisation gives near-uniform attention (CLS logits
    with a spread of ~0.1), so attention-based pruning has nothing to choose from: ATS keeps
    its full budget for every image. Trained DeiTs attend sharply; with random weights a scale
    of ~30 (``SHARP_ATTENTION``) makes ATS keep 48-81 of 196 patches per image at a 0.5
    budget (DeiT-Ti, ``ragged.testing.synthetic_images``). Leave it at 1 for loaded weights.
    """
    config = get_config(name)
    model = build_module(
        lambda: timm.create_model(config.timm_name, pretrained=False), weights, seed
    )
    if attention_scale != 1.0:
        scale_attention(model, attention_scale)
    return model.eval().to(device=device, dtype=dtype)


def build_module(make, weights: str | Path | None, seed: int) -> torch.nn.Module:
    """``make()`` with its random initialisation drawn from ``seed`` on the CPU (the global
    RNG state left as it was), then the weights of a local file over it when given."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = make()
    if weights is not None:
        module.load_state_dict(load_state_dict(weights, module))
    return module


SHARP_ATTENTION = 30.0


@torch.no_grad()
def scale_attention(model: VisionTransformer, factor: float) -> None:
    """Multiply every block's attention logits by ``factor`` > 0, in place."""
    if not factor > 0:
        raise ValueError(f"attention scale must be > 0, got {factor!r}")
    root = factor**0.5
    for blk in model.blocks:
        qk = 2 * blk.attn.num_heads * blk.attn.head_dim
        blk.attn.qkv.weight[:qk] *= root
        if blk.attn.qkv.bias is not None:
            blk.attn.qkv.bias[:qk] *= root


def load_state_dict(path: str | Path, model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """Read a local state-dict file for ``model``; clear errors for a missing file or keys."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"weights file {str(path)!r} does not exist")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        state = load_file(str(path))
    else:
        try:
            state = torch.load(path, map_location="cpu", weights_only=True)
        except Exception as e:
            raise ValueError(f"{str(path)!r} is not a readable torch state-dict file: {e}") from e
    if isinstance(state, dict) and isinstance(state.get("model"), dict):
        state = state["model"]
    if not isinstance(state, dict) or not all(isinstance(v, torch.Tensor) for v in state.values()):
        raise ValueError(f"{str(path)!r} does not hold a state dict of tensors")
    want = set(model.state_dict())
    missing, unexpected = sorted(want - set(state)), sorted(set(state) - want)
    if missing or unexpected:
        raise ValueError(
            f"{str(path)!r} does not fit {type(model).__name__}: "
            f"missing {missing[:5]}{'...' if len(missing) > 5 else ''}, "
            f"unexpected {unexpected[:5]}{'...' if len(unexpected) > 5 else ''}"
        )
    return state


def attention_flops(embed_dim: int, tokens):
    """FLOPs (2 per multiply-add) of a block's attention half for one image of ``tokens``
    tokens (int or tensor): qkv and proj projections, q k^T and attention @ v."""
    return 8 * tokens * embed_dim**2 + 4 * tokens**2 * embed_dim


def mlp_flops(embed_dim: int, tokens, mlp_ratio: float = 4.0):
    """FLOPs of a block's MLP half for one image of ``tokens`` tokens (int or tensor)."""
    return 4 * tokens * embed_dim * int(embed_dim * mlp_ratio)


def check_supported(model: torch.nn.Module) -> None:
    """Raise ``ValueError`` naming the feature if the pipeline cannot run ``model``.

    Supported: a timm ``VisionTransformer`` with one CLS token and no register tokens,
    ``global_pool='token'``, and standard pre-norm ``Block``s (``Attention`` with optional
    qk/scale norms and layer scale, ``Mlp``).
    """
    if not isinstance(model, VisionTransformer):
        raise ValueError(f"expected a timm VisionTransformer, got {type(model).__name__}")
    problems = []
    if model.cls_token is None or model.num_prefix_tokens != 1:
        problems.append(f"one CLS token and no register tokens (has {model.num_prefix_tokens})")
    if model.global_pool != "token":
        problems.append(f"global_pool='token' (has {model.global_pool!r})")
    if getattr(model, "attn_pool", None) is not None:
        problems.append("no attention pooling")
    for i, blk in enumerate(model.blocks):
        if type(blk) is not Block or type(blk.attn) is not Attention:
            problems.append(f"standard Block/Attention (block {i} is {type(blk).__name__})")
            break
        if getattr(blk.attn, "gate", None) is not None:
            problems.append(f"ungated attention (block {i} is gated)")
            break
        if not isinstance(blk.mlp, Mlp):
            problems.append(f"an Mlp (block {i} has {type(blk.mlp).__name__})")
            break
    if problems:
        raise ValueError("the pruned pipeline needs " + "; ".join(problems))
