"""The suite's inputs and pipelines, built from ragged's public API with fixed seeds.

Imported inside ``setup_cache`` only (it imports torch and ragged). asv runs today's suite
against older builds of ragged, so everything here goes through ragged's public API; a build
that lacks part of it fails that ``setup_cache``, and asv records its benchmarks as failed.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import time
from types import ModuleType
from typing import TYPE_CHECKING

import torch

import ragged
from benchmarks.support import (
    catalogue as _catalogue,  # absolute: _revision runs this file outside the package
)
from ragged.pruning import ATS, DynamicViT, EViT, ThresholdL2, build_predictor
from ragged.reference import varlen_attention_reference
from ragged.testing import kept_tokens, mixed_lengths, packed_qkv, synthetic_images

if TYPE_CHECKING:
    from ragged.pipeline import PrunedViT

TOKENS = 197  # DeiT at 224x224: 196 patches + CLS
HEADS = {"deit_s": 6, "deit_b": 12}  # attention geometry; head_dim 64 for both
HEAD_DIM = 64
PRUNE_AT = 4  # prune after block 4, as in the paper
KEEP = 0.5  # pipelines keep half the patches (ATS: a budget of half)


def no_attention(rows_vary: bool = False):
    """A ``LayoutAttention`` that launches nothing: every call returns the output buffer its
    layout keeps (eager: across forwards, as triton's own). A pipeline's time with it is the
    bound of any attention kernel; its logits are meaningless. Built on first use: builds of
    ragged before LayoutAttention run every other pipeline.

    ``rows_vary=False`` (fixed-ratio pruning: a layout's rows never change): the buffer of the
    first call's shape, with nothing but an attribute read per call: a shape check per call
    made DeiT-B BS 1 forwards 1.1% slower (H100, same-process A/B), a bound lower by that.
    ``rows_vary=True`` (pruning whose kept rows change with the data, ATS: ``rows_vary``
    below): the buffer is made again when a call's rows differ from its own; only these
    pipelines pay that check."""
    return _no_attention_classes()[rows_vary]


@functools.cache
def _no_attention_classes() -> tuple[type, type]:
    class NoAttention(ragged.LayoutAttention):
        _out = None

        def __call__(self, qkv: torch.Tensor) -> torch.Tensor:  # [rows, 3, H, d] -> [rows, H, d]
            out = self._out
            if out is None:
                out = self._out = torch.empty_like(qkv[:, 0])
            return out

    class NoAttentionRows(ragged.LayoutAttention):
        _out = None

        def __call__(self, qkv: torch.Tensor) -> torch.Tensor:
            out = self._out
            if out is None or out.shape[0] != qkv.shape[0]:
                out = self._out = torch.empty_like(qkv[:, 0])
            return out

    return NoAttention, NoAttentionRows


def rows_vary(model, method) -> bool:
    """Whether ``method`` keeps a number of tokens the host does not know (ATS): then a
    ragged layout's rows change with the data, from one forward to the next."""
    tokens = model.patch_embed.num_patches + 1
    return method.kept_tokens(tokens, tokens) is None


def c_launcher(compiled):
    """``compiled``'s launch through ragged's C launcher (``c_launch.direct``: (grid_x,
    grid_y, grid_z, stream, *args)); RuntimeError where it cannot be built here."""
    from ragged.kernels import c_launch

    launch = c_launch.direct(compiled)
    if launch is None:
        raise RuntimeError("the C launcher could not be built here")
    return launch


def launch_only(rows_vary: bool = False):
    """``no_attention(rows_vary)`` plus one launch of an empty kernel (one program, ragged's C
    launcher) per call: the bound of any attention kernel that has to be launched, with
    nothing of a kernel's own checks or GPU time. Eager only (``scripts/pipeline_bench.py
    --sections bound``). Built on first use."""
    import triton

    @triton.jit
    def _empty(x):
        pass

    scratch = torch.empty(16, device="cuda")
    direct = c_launcher(_empty[(1,)](scratch))
    stream, ptr = torch._C._cuda_getCurrentRawStream, scratch.data_ptr()
    dev = scratch.get_device()

    class LaunchOnly(ragged.LayoutAttention):  # no_attention's call, one launch before it
        _out = None

        def __call__(self, qkv: torch.Tensor) -> torch.Tensor:
            direct(1, 1, 1, stream(dev), ptr)
            out = self._out
            if out is None:
                out = self._out = torch.empty_like(qkv[:, 0])
            return out

    class LaunchOnlyRows(ragged.LayoutAttention):  # no_attention(rows_vary=True)'s, likewise
        _out = None

        def __call__(self, qkv: torch.Tensor) -> torch.Tensor:
            direct(1, 1, 1, stream(dev), ptr)
            out = self._out
            if out is None or out.shape[0] != qkv.shape[0]:
                out = self._out = torch.empty_like(qkv[:, 0])
            return out

    return LaunchOnlyRows if rows_vary else LaunchOnly


METHODS = ("threshold_l2", "dynamicvit", "evit", "ats")


def kernel_lengths(batch: int, prune: float, lengths: str) -> list[int]:
    """Per-image token counts: all equal (``uniform``) or spread widely with the same total."""
    kept = kept_tokens(TOKENS, prune)
    if lengths == "uniform":
        return [kept] * batch
    if batch == 1:
        raise ValueError("one image has one length: mixed needs BS > 1")
    return mixed_lengths(batch, kept * batch, TOKENS, seed=batch * 100 + round(prune * 100))


def kernel_inputs(batch, prune, model, lengths, *, device="cuda", dtype=torch.float16):
    """q, k, v [T, heads, 64] (strided views of one packed qkv), cu_seqlens, max_seqlen."""
    return packed_qkv(
        kernel_lengths(batch, prune, lengths), HEADS[model], HEAD_DIM,
        dtype=dtype, device=device, seed=batch,
    )  # fmt: skip


def attention(backend: str, q, k, v, cu_seqlens, max_seqlen: int):
    """``backend``'s call on packed inputs as the kernel table times it: no argument (no
    ``functools.partial``) and no value checks (``validate=False``: the inputs are trusted)."""
    return functools.partial(
        ragged.varlen_attention, q, k, v, cu_seqlens, max_seqlen, backend=backend, validate=False
    )


def ragged_module(sub: str) -> ModuleType:
    """``ragged.<sub>`` of the ``ragged`` this module was executed with (``revision.workloads``
    binds each arm's; a plain ``import ragged.models`` here at call time would take whichever
    ragged is loaded then). ``models`` and ``pipeline`` import timm, 2.4 s of CPU: imported at
    first use, so the kernel tables' ``setup_cache``, which builds no model (the CPU subset's
    KernelError in every asv run of make test), does not pay it."""
    return importlib.import_module(f"{ragged.__name__}.{sub}")


def get_config(name: str):
    """``ragged.models.get_config`` (the model's resolution and geometry)."""
    return ragged_module("models").get_config(name)


def build(name: str, *, device="cuda", dtype=torch.float16):
    """A seeded DeiT with peaked attention, as trained weights have."""
    models = ragged_module("models")
    return models.build_model(name, seed=0, device=device, dtype=dtype,
                              attention_scale=models.SHARP_ATTENTION)  # fmt: skip


def images(name: str, batch: int, *, device="cuda", dtype=torch.float16) -> torch.Tensor:
    """Synthetic images [batch, 3, S, S] at model ``name``'s resolution (seeded by batch)."""
    size = get_config(name).img_size
    return synthetic_images(batch, size, seed=batch, device=device, dtype=dtype)


def make_method(name: str, model, *, device="cuda", dtype=torch.float16):
    """A pruning step keeping ``KEEP`` of the patches."""
    if name == "threshold_l2":
        return ThresholdL2(keep_ratio=KEEP)
    if name == "dynamicvit":
        predictor = build_predictor(model.embed_dim, seed=1, device=device, dtype=dtype)
        return DynamicViT(predictor, KEEP)
    if name == "evit":
        return EViT(KEEP)
    if name == "ats":
        return ATS(KEEP)
    raise ValueError(f"unknown pruning method {name!r}; expected one of {', '.join(METHODS)}")


def pipeline(model, method, name: str) -> PrunedViT:
    """The catalogue's pipeline ``name`` pruning with ``method`` after block ``PRUNE_AT``."""
    pipe = ragged_module("pipeline")
    p = _catalogue.PIPELINE_BY_NAME[name]
    extra = {"layout_attention": no_attention(rows_vary(model, method))} if p.no_attention else {}
    return pipe.PrunedViT(model, pipe.PruneStage(PRUNE_AT, method), mode=p.mode,
                          backend=p.backend, cuda_graph=p.cuda_graph, **extra)  # fmt: skip


def wall_us(fn, calls: int, sync=torch.cuda.synchronize) -> float:
    """Wall time per call of ``calls`` back-to-back calls, the final sync included."""
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def img_per_s(fns: dict, batch: int, rounds: int, *, target_us=40e3, sync=torch.cuda.synchronize):
    """img/s samples of each function, one per round, rounds alternating between functions.

    A sample is one timed batch of back-to-back forwards lasting about ``target_us``.
    """
    calls = {}
    for name, fn in fns.items():
        fn()  # first call: compilation, graph capture
        calls[name] = max(1, int(target_us / wall_us(fn, 2, sync)))
    out: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            out[name].append(batch / wall_us(fn, calls[name], sync) * 1e6)
    return out


def flop_ideal(model, images, method) -> float:
    """The unpruned model's FLOPs over the pruned pipeline's, from the keep masks: the speedup
    a pipeline without overhead would reach."""
    ref = pipeline(model, method, "padded_max")
    _, masks = ref.forward(images, return_masks=True)
    return (ref.flops_per_image([]) / ref.flops_per_image(masks).mean()).item()


def stage_ms(pipe: PrunedViT, images, reps: int) -> dict[str, list[float]]:
    """Milliseconds of each stage (front, prune_pack, late, head) per forward, a device sync
    after each, ``reps`` forwards after 5 of warm-up."""
    times: dict[str, list[float]] = {s: [] for s in ("front", "prune_pack", "late", "head")}
    with torch.inference_mode():
        for rep in range(reps + 5):
            marks = [time.perf_counter()]
            x, info = pipe.front(images)
            marks.append(_synced())
            tokens = pipe.prune_pack(x, info)
            marks.append(_synced())
            tokens = pipe.late(tokens)
            marks.append(_synced())
            pipe.head(tokens)
            marks.append(_synced())
            if rep >= 5:
                for stage, a, b in zip(times, marks, marks[1:], strict=False):
                    times[stage].append((b - a) * 1e3)
    return times


def _synced() -> float:
    torch.cuda.synchronize()
    return time.perf_counter()


def output_hash(t: torch.Tensor) -> int:
    """48 bits of the SHA-256 of a tensor's bytes: exact in a float64, any change shows."""
    data = t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes()
    return int(hashlib.sha256(data).hexdigest()[:12], 16)


def pipeline_outputs(model, images, method, name: str) -> tuple[torch.Tensor, list]:
    """Pipeline ``name``'s logits [B, classes] on ``images`` and its keep masks (bool [B, N],
    one a prune stage): what ``logit_drift`` compares with ``padded_max`` and ``outputs``
    saves raw."""
    return pipeline(model, method, name).forward(images, return_masks=True)


def kernel_output(backend: str, q, k, v, cu_seqlens, max_seqlen) -> torch.Tensor:
    """``backend``'s attention on packed inputs, checked (``kernel_error`` and ``outputs``)."""
    return ragged.varlen_attention(q, k, v, cu_seqlens, max_seqlen, backend=backend)


def logit_drift(model, images, method, names) -> dict[str, dict]:
    """Logits of each pipeline in ``names`` against ``padded_max`` over the same keep masks.

    -> {name: {max_abs_diff, mean_abs_diff, top1_agreement (share of images), output_hash}};
    a pipeline that ends on different keep masks gets ``skip`` with the reason.
    """
    ref, ref_masks = pipeline_outputs(model, images, method, "padded_max")
    out = {}
    for name in names:
        logits, masks = pipeline_outputs(model, images, method, name)
        if any(not torch.equal(a, b) for a, b in zip(masks, ref_masks, strict=True)):
            out[name] = {"skip": "keep masks differ from the reference pipeline's"}
            continue
        diff = (logits.float() - ref.float()).abs()
        out[name] = {
            "max_abs_diff": diff.max().item(),
            "mean_abs_diff": diff.mean().item(),
            "top1_agreement": (logits.argmax(1) == ref.argmax(1)).float().mean().item(),
            "output_hash": output_hash(logits),
        }
    return out


def kernel_error(backend: str, q, k, v, cu_seqlens, max_seqlen) -> dict:
    """Max abs error of a backend against the float64 oracle, and that error over eager
    PyTorch's at the same dtype (the tests' budget allows 2)."""
    out = kernel_output(backend, q, k, v, cu_seqlens, max_seqlen)
    oracle = varlen_attention_reference(
        q.double(), k.double(), v.double(), cu_seqlens, compute_dtype=torch.float64
    )
    eager = varlen_attention_reference(q, k, v, cu_seqlens, compute_dtype=q.dtype)
    err = (out.double() - oracle).abs().max().item()
    eager_err = (eager.double() - oracle).abs().max().item()
    return {
        "max_abs_error": err,
        "error_ratio": err / eager_err if eager_err else float("nan"),
        "output_hash": output_hash(out),
    }
