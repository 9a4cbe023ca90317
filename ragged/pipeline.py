"""Pruned ViT inference: front blocks -> prune -> pack -> ragged blocks -> CLS -> head.

``PrunedViT(model, stages, mode=..., backend=...)`` runs a timm ``VisionTransformer``:

1. patch embedding and the blocks before the first prune point, unchanged (timm's own code);
2. at each prune point a method from ``ragged.pruning`` makes a keep mask. Threshold-L2 and
   DynamicViT prune before their block; EViT and ATS inside it, after its attention (as in
   their papers: the block's MLP already runs on the kept tokens);
3. the remaining blocks, computed from each timm block's own modules (norm1, qkv, q/k norms,
   proj, layer scales, norm2, mlp), on the tokens laid out by ``mode``:

   ``ragged``       packed [T, C] + ``cu_seqlens``; attention by ``backend`` (one of
                    ``ragged_backends()``: ``ragged.BACKENDS`` with ``pipeline=True``) through
                    ``ragged.LayoutAttention``, one per packed layout (``varlen_attention``
                    checked once, then launched);
   ``padded_full``  all N positions stay; pruned keys are masked in SDPA (the paper's
                    baseline, with the mask on the fused SDPA path instead of eager softmax);
   ``padded_max``   kept tokens gathered to the longest kept length, the rest masked (no mask,
                    and no sync, when every image keeps the same known count);
   ``dense``        the unpruned timm model (stages ignored);
4. the CLS token of each image, the final norm and the head.

Host synchronisation in the ragged path: none when the kept lengths are known on the host
(fixed-ratio methods: the buffers are sized exactly) or when ``capacity`` is given (fixed
``capacity``-row buffers, device-side ``cu_seqlens``, overflow flagged on the device and
checked after the logits). Otherwise one per prune point, to size the packed buffer.
``cuda_graph=True`` captures the sync-free forward per input shape and replays it (any mode;
the dense model too, for like-for-like comparisons); for ragged data-dependent lengths without
``capacity`` it packs into capacity buckets (eighths of B*N), one graph per bucket over
pack + late blocks + head, after one sync to pick the bucket.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from .attention import BACKENDS
from .layout_attention import LayoutAttention
from .layouts import Padded, Ragged, padded
from .models import attention_flops, check_supported, mlp_flops
from .packing import pack, pack_fixed
from .pruning import AttentionInfo, Pruned

MODES = ("ragged", "padded_full", "padded_max", "dense")
_BUCKETS = 8  # capacity buckets per B*N in cuda_graph mode with data-dependent lengths


def ragged_backends() -> list[str]:
    """The attention backends ``mode="ragged"`` takes: ``ragged.BACKENDS`` with ``pipeline``."""
    return [name for name, b in BACKENDS.items() if b.pipeline]


class CapacityOverflowError(RuntimeError):
    """The kept tokens did not fit the ``capacity`` given to ``PrunedViT``."""


@dataclass(frozen=True)
class PruneStage:
    """Prune with ``method`` at block ``block`` (0-based): before it, or inside it after its
    attention when ``method.uses_attention``. The paper prunes at block 4 (after 4 blocks)."""

    block: int
    method: Any  # a step from ragged.pruning: ThresholdL2, DynamicViT, EViT, ATS


def _unless_identity(m: nn.Module) -> nn.Module | None:
    return None if isinstance(m, nn.Identity) else m


class _BlockOps:
    """One timm ``Block``'s computation from its own modules, on tokens [..., C] of any
    layout; identity modules are skipped (each module call is ~1 us host, BS=1 is host-bound).
    """

    def __init__(self, blk: nn.Module):
        a = blk.attn
        self.norm1, self.norm2, self.qkv_proj, self.proj, self.mlp = (
            blk.norm1, blk.norm2, a.qkv, a.proj, blk.mlp,
        )  # fmt: skip
        self.q_norm, self.k_norm = _unless_identity(a.q_norm), _unless_identity(a.k_norm)
        self.attn_norm = _unless_identity(a.norm)
        self.ls1, self.ls2 = _unless_identity(blk.ls1), _unless_identity(blk.ls2)
        self.heads, self.head_dim, self.scale = a.num_heads, a.head_dim, a.scale

    def qkv(self, x: torch.Tensor) -> torch.Tensor:
        """x [..., C] -> qkv [..., 3, H, d] (a view of the projection unless qk-normed)."""
        qkv = self.qkv_proj(self.norm1(x)).unflatten(-1, (3, self.heads, self.head_dim))
        if self.q_norm is not None:
            q, k, v = qkv.unbind(-3)
            qkv = torch.stack((self.q_norm(q), self.k_norm(k), v), dim=-3)
        return qkv

    def attn_residual(self, x: torch.Tensor, o: torch.Tensor) -> torch.Tensor:
        """x [..., C], attention output o [..., H, d] -> x + ls1(proj(norm(o)))."""
        o = o.flatten(-2)
        if self.attn_norm is not None:
            o = self.attn_norm(o)
        o = self.proj(o)
        return x + (o if self.ls1 is None else self.ls1(o))

    def mlp_residual(self, x: torch.Tensor) -> torch.Tensor:
        h = self.mlp(self.norm2(x))
        return x + (h if self.ls2 is None else self.ls2(h))


# --- the pipeline ------------------------------------------------------------------------------


class PrunedViT:
    """A timm ViT run with token pruning; see the module docstring.

    Args:
        model: a timm ``VisionTransformer`` (``ragged.models.build_model``); put in eval mode.
        stages: ``PruneStage``s (or one), at increasing blocks; empty runs every block on the
            layout with nothing pruned.
        mode: ``"ragged"``, ``"padded_full"``, ``"padded_max"`` or ``"dense"``.
        backend: the ragged attention backend (one of ``ragged_backends()``).
        capacity: packed rows per batch for data-dependent lengths (Threshold-L2 with a
            threshold, ATS): no host sync, overflow checked after the logits. Ignored where the
            lengths are known (then the buffers are exact).
        cuda_graph: capture the forward in CUDA graphs and replay them (CUDA device; every
            mode, padded_max only with lengths known on the host, ragged only with a backend
            whose ``capture`` is set in ``ragged.BACKENDS``).
        layout_attention: the class that runs each packed layout's attention in ragged mode
            (``LayoutAttention`` or a subclass: the benchmarks' attention-free bound passes
            one that launches nothing).

    Call with images [B, 3, H, W] in the model's dtype and device -> logits [B, classes].
    """

    def __init__(
        self,
        model: nn.Module,
        stages: PruneStage | Sequence[PruneStage] = (),
        *,
        mode: str = "ragged",
        backend: str = "triton",
        capacity: int | None = None,
        cuda_graph: bool = False,
        layout_attention: type[LayoutAttention] = LayoutAttention,
    ):
        check_supported(model)
        if mode not in MODES:
            raise ValueError(f"unknown mode {mode!r}; expected one of {', '.join(MODES)}")
        if mode == "ragged" and backend not in ragged_backends():
            raise ValueError(
                f"unknown ragged backend {backend!r}; expected one of "
                + ", ".join(ragged_backends())
            )
        stages = (stages,) if isinstance(stages, PruneStage) else tuple(stages)
        depth = len(model.blocks)
        blocks = [s.block for s in stages]
        if any(not isinstance(s, PruneStage) for s in stages):
            raise TypeError("stages must be PruneStage objects")
        if blocks != sorted(set(blocks)) or any(not 0 <= b < depth for b in blocks):
            raise ValueError(f"stage blocks must increase within 0..{depth - 1}, got {blocks}")
        if capacity is not None and (
            isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1
        ):
            raise ValueError(f"capacity must be a positive int or None, got {capacity!r}")
        if mode == "ragged" and capacity is not None and BACKENDS[backend].exact_total:
            raise ValueError(f"backend {backend!r} needs exact packing: pass capacity=None")
        if mode == "ragged" and cuda_graph and not BACKENDS[backend].capture:
            raise ValueError(f"backend {backend!r} synchronises: it cannot be captured")
        self.model = model.eval()
        self.stages, self.mode, self.backend = stages, mode, backend
        self.capacity, self.cuda_graph = capacity, cuda_graph
        self.layout_attention = layout_attention
        self.num_tokens = model.patch_embed.num_patches + 1
        self._ops = [_BlockOps(b) for b in model.blocks]
        # Tokens per image after each stage when the host knows it (fixed ratios), else None.
        self.kept_lengths: list[int | None] = []
        alive: int | None = self.num_tokens
        for s in stages:
            alive = s.method.kept_tokens(self.num_tokens, alive)
            self.kept_lengths.append(alive)
        if cuda_graph and mode == "padded_max" and None in self.kept_lengths:
            raise ValueError(
                "cuda_graph=True with padded_max needs kept lengths known on the host "
                "(fixed ratios): with data-dependent lengths it reads the longest one back"
            )
        self._graphs: dict[tuple, tuple] = {}
        # The attention of each stage's ragged layout. A LayoutAttention keeps its launch for
        # the next call on a layout like the last one, and shares one output between its calls
        # (a block's proj reads it before the next block's attention writes it, on one stream;
        # forward runs under inference_mode), so eager forwards keep one per stage: every call
        # after the first forward's first skips the checks and the planning. In graph mode
        # each forward gets its own, so that a captured output lives in the graph's pool.
        self._calls: dict[int, LayoutAttention] = {}

    # -- public ------------------------------------------------------------------------------

    def __call__(self, images: torch.Tensor) -> torch.Tensor:
        return self.forward(images)

    @torch.inference_mode()
    def forward(
        self, images: torch.Tensor, *, return_masks: bool = False, check_overflow: bool = True
    ):
        """images [B, 3, H, W] -> logits [B, classes] (and, with ``return_masks``, the keep
        mask bool [B, N] after each stage). ``check_overflow=False`` skips reading the
        capacity overflow flag (one sync after the logits); ``overflowed()`` reads it later.
        """
        self._check_images(images)
        if (self.mode == "dense" or not self.stages) and not self.cuda_graph:
            return (self.model(images), []) if return_masks else self.model(images)
        if self.cuda_graph:
            if return_masks:
                raise ValueError("return_masks needs cuda_graph=False")
            logits, overflow = self._graphed_forward(images)
        else:
            logits, overflow, masks = self._forward(images, collect=return_masks)
        self._overflow = overflow
        if check_overflow and overflow is not None and self.overflowed():
            raise CapacityOverflowError(self._overflow_message())
        return (logits, masks) if return_masks else logits

    def overflowed(self) -> bool:
        """Whether the last call's kept tokens overflowed ``capacity`` (reads a device flag)."""
        flag = getattr(self, "_overflow", None)
        return flag is not None and bool(flag)

    def flops_per_image(self, masks: Sequence[torch.Tensor]) -> torch.Tensor:
        """FLOPs of each image's forward, float64 [B], given the keep masks of every stage
        (``forward(..., return_masks=True)``; none: the unpruned model). Counts the blocks'
        matmuls and attention, the patch embedding and the head; norms and adds are left out.
        """
        m = self.model
        c = m.embed_dim
        patch = m.patch_embed.proj.weight[0].numel()  # 3 * P * P
        n = self.num_tokens
        fixed = 2 * (n - 1) * patch * c + 2 * c * m.num_classes
        if not masks:
            blocks = len(self._ops) * (attention_flops(c, n) + mlp_flops(c, n))
            return torch.tensor([float(fixed + blocks)], dtype=torch.float64)
        lengths = [mask.sum(1).double().cpu() for mask in masks]
        at = {s.block: (i, s.method.uses_attention) for i, s in enumerate(self.stages)}
        alive = torch.full_like(lengths[0], float(n))
        total = torch.full_like(alive, float(fixed))
        for b in range(len(self._ops)):
            before = alive
            if b in at:
                i, mid_block = at[b]
                alive = lengths[i]
                if mid_block:  # attention over the tokens alive before, MLP over the kept
                    total += attention_flops(c, before) + mlp_flops(c, alive)
                    continue
            total += attention_flops(c, alive) + mlp_flops(c, alive)
        return total

    # -- the four parts, also timed separately by scripts/pipeline_bench.py -------------------

    def front(self, images: torch.Tensor) -> tuple[torch.Tensor, AttentionInfo | None]:
        """Patch embedding, the blocks before the first prune point, and (EViT, ATS) the
        attention half of the prune block -> tokens [B, N, C] and the attention info."""
        m = self.model
        x = m.norm_pre(m.patch_drop(m._pos_embed(m.patch_embed(images))))
        first = self.stages[0]
        for blk in m.blocks[: first.block]:
            x = blk(x)
        if not first.method.uses_attention:
            return x, None
        ops = self._ops[first.block]
        qkv = ops.qkv(x)
        layout = Padded(x, None, x.shape[1])
        x = ops.attn_residual(x, layout.attention(qkv, ops.scale))
        return x, layout.attention_info(qkv, ops.scale)

    def prune_pack(self, x, info, capacity: int | None = None):
        """First prune step, then lay the kept tokens out for ``mode``."""
        pruned = self.stages[0].method(x, None, info)
        return self._layout(pruned, 0, x.shape[0], capacity=capacity)

    def late(self, tokens, masks: list | None = None):
        """The blocks after the first prune point, pruning again at later stages (their keep
        masks appended to ``masks`` when given)."""
        stage_at = {s.block: (i, s.method) for i, s in enumerate(self.stages) if i > 0}
        first = self.stages[0]
        batch = tokens.batch
        for i in range(first.block, len(self._ops)):
            ops = self._ops[i]
            if i == first.block and first.method.uses_attention:
                tokens.x = ops.mlp_residual(tokens.x)  # its attention ran in front()
                continue
            s, method = stage_at.get(i, (None, None))
            if method is not None and not method.uses_attention:
                x, keep = tokens.tokens()
                tokens = self._layout(method(x, keep, None), s, batch)
                if masks is not None:
                    masks.append(tokens.keep_mask())
            qkv = ops.qkv(tokens.x)
            x = ops.attn_residual(tokens.x, tokens.attention(qkv, ops.scale))
            if method is not None and method.uses_attention:
                info = tokens.attention_info(qkv, ops.scale)
                tokens.x = x
                x_all, keep = tokens.tokens()
                tokens = self._layout(method(x_all, keep, info), s, batch)
                if masks is not None:
                    masks.append(tokens.keep_mask())
            else:
                tokens.x = x
            tokens.x = ops.mlp_residual(tokens.x)
        return tokens

    def head(self, tokens) -> torch.Tensor:
        m = self.model
        return m.head(m.head_drop(m.fc_norm(m.norm(tokens.cls()))))

    # -- internals ---------------------------------------------------------------------------

    def _forward(self, images, collect=False):
        masks = [] if collect else None
        x, info = self.front(images)
        tokens = self.prune_pack(x, info)
        # Only the first pack can overflow: later stages keep a subset of its tokens.
        overflow = getattr(tokens, "overflow", None)
        if collect:
            masks.append(tokens.keep_mask())
        logits = self.head(self.late(tokens, masks))
        return logits, overflow, masks

    def _layout(self, pruned: Pruned, stage: int, batch: int, capacity=None):
        """The kept tokens of stage ``stage`` in this mode's layout; ``capacity`` overrides
        ``self.capacity``."""
        length = self.kept_lengths[stage]
        keep, x = pruned
        if self.mode != "ragged":
            return padded(pruned, self.mode == "padded_max", length)
        capacity = self.capacity if capacity is None else capacity
        if length is not None:  # exact sizes known on the host: no sync, cannot overflow
            fixed = pack_fixed(x, keep, batch * length)
            return Ragged(fixed.packed, fixed.cu_seqlens, length, keep, self._call(stage))
        if capacity is not None:
            fixed = pack_fixed(x, keep, capacity)
            bound = min(x.shape[1], capacity)
            return Ragged(
                fixed.packed, fixed.cu_seqlens, bound, keep, self._call(stage), fixed.overflow
            )
        packed, cu_seqlens, max_seqlen = pack(x, keep)
        return Ragged(packed, cu_seqlens, max_seqlen, keep, self._call(stage))

    def _call(self, stage: int) -> LayoutAttention:
        """Stage ``stage``'s LayoutAttention (see ``__init__``); a new one in graph mode."""
        call = None if self.cuda_graph else self._calls.get(stage)
        if call is None:
            call = self.layout_attention(
                None, 0, backend=self.backend, softmax_scale=self._ops[0].scale
            )
            if not self.cuda_graph:
                self._calls[stage] = call
        return call

    def _check_images(self, images):
        if not isinstance(images, torch.Tensor) or images.dim() != 4:
            raise ValueError(
                f"images must be a tensor [B, 3, H, W], got {getattr(images, 'shape', images)}"
            )
        w = self.model.patch_embed.proj.weight
        if images.dtype != w.dtype or images.device != w.device:
            raise ValueError(
                f"images must be {w.dtype} on {w.device} like the model, "
                f"got {images.dtype} on {images.device}"
            )

    def _overflow_message(self) -> str:
        return (
            f"capacity={self.capacity} packed rows overflowed: the keep masks kept more tokens, "
            "and those past the capacity were dropped, so the logits are wrong. Raise "
            "capacity, or pass capacity=None (exact buffers, one host sync per prune point)."
        )

    # -- CUDA graphs -------------------------------------------------------------------------

    def _graphed_forward(self, images):
        batch = images.shape[0]
        key = ("all", tuple(images.shape), images.dtype)
        if self.mode == "dense" or not self.stages:
            return self._replay(key, lambda im: (self.model(im),), images)[0], None
        if self.mode != "ragged" or self.kept_lengths[0] is not None or self.capacity is not None:
            # Sync-free: one graph for the whole forward.
            logits, overflow, _ = self._replay(key, lambda im: self._forward(im), images)
            return logits, overflow
        # Data-dependent lengths, no capacity: front and prune eager, one sync to pick the
        # capacity bucket, then that bucket's graph of pack + late blocks + head.
        x, info = self.front(images)
        pruned = self.stages[0].method(x, None, info)
        step = batch * self.num_tokens / _BUCKETS
        total = int(pruned.keep_mask.sum())
        bucket = max(1, math.ceil(math.ceil(total / step) * step))

        def back(x, keep):
            tokens = self._layout(Pruned(keep, x), 0, batch, capacity=bucket)
            return self.head(self.late(tokens)), tokens.overflow

        logits, overflow = self._replay(("bucket", batch, bucket), back, pruned.x, pruned.keep_mask)
        return logits, overflow

    def _replay(self, key, fn: Callable, *inputs: torch.Tensor):
        entry = self._graphs.get(key)
        if entry is None:
            static_in = [t.clone() for t in inputs]
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):  # warm-up (Triton compiles) off the capture
                for _ in range(2):
                    fn(*static_in)
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                static_out = fn(*static_in)
            entry = self._graphs[key] = (graph, static_in, static_out)
        graph, static_in, static_out = entry
        for dst, src in zip(static_in, inputs, strict=True):
            dst.copy_(src)
        graph.replay()
        # The outputs live in the graph's pool and are overwritten by the next replay.
        return tuple(None if t is None else t.clone() for t in static_out)
