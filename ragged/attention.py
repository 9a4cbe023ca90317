"""``varlen_attention``: the one public attention op. Validates, then dispatches by backend name."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import baselines
from .kernels import attention as _triton_attention
from .reference import varlen_attention_reference

_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
MIN_HEAD_DIM, MAX_HEAD_DIM = 16, 256


class BackendUnavailableError(RuntimeError):
    """The requested backend cannot run here (or cannot run these inputs); the message says why."""


# The triton backend's launch function. A call to it may take the merged fast path
# (``kernels.attention.fast_call``); a Backend whose run was replaced (dataclasses.replace)
# never does.
TRITON_RUN = _triton_attention.varlen_attention_triton


def _triton_unavailable(device=None, dtype=None, head_dim=None) -> str | None:
    if _triton_attention.interpreted():
        if dtype == torch.bfloat16:
            return "the Triton interpreter (TRITON_INTERPRET=1) cannot do bfloat16 arithmetic"
        return None
    if device is None:
        return None if torch.cuda.is_available() else baselines.NO_CUDA
    if device.type != "cuda":
        return (
            f"the inputs are on {device}: the Triton kernel needs a CUDA device, or "
            "TRITON_INTERPRET=1 set before triton is imported to run it on the CPU"
        )
    return None


def _triton_implementation() -> str:
    if _triton_attention.interpreted():
        return "ragged Triton kernel (interpreter, TRITON_INTERPRET=1)"
    return "ragged Triton kernel"


def _reference(q, k, v, cu_seqlens, max_seqlen, softmax_scale):
    return varlen_attention_reference(q, k, v, cu_seqlens, softmax_scale)


def _always(device=None, dtype=None, head_dim=None) -> str | None:
    return None


@dataclass(frozen=True)
class Backend:
    """One attention implementation behind ``varlen_attention``'s signature, and what it
    supports. The one list of backends (``BACKENDS``); the pipeline's, the benchmarks' and the
    dashboard's lists derive from it."""

    name: str
    run: Callable[..., torch.Tensor]  # (q, k, v, cu_seqlens, max_seqlen, scale) -> out
    # (device, dtype, head_dim) -> why it cannot run them here, or None; dtypes outside
    # ``dtypes`` are refused before it is asked
    needs: Callable[..., str | None]
    implementation: Callable[[], str]  # what actually runs, for results and reports
    dtypes: tuple[torch.dtype, ...] = _DTYPES
    writes_out: bool = False  # run() takes out= and writes into it
    pipeline: bool = True  # PrunedViT(mode="ragged") may use it (padded_sdpa and the oracle not)
    exact_total: bool = False  # needs cu_seqlens[-1] == total_tokens: no capacity packing
    # no host synchronisation (validate=False): runs under CUDA-graph capture, tested so
    capture: bool = True

    def unavailable(self, device=None, dtype=None, head_dim=None) -> str | None:
        """Why this backend cannot run inputs of this device, dtype and head_dim here (any of
        them None: not asked), or None."""
        reason = self.needs(device, dtype, head_dim)
        if reason is None and dtype is not None and dtype not in self.dtypes:
            names = " and ".join(str(d).removeprefix("torch.") for d in self.dtypes)
            reason = f"{self.implementation()} supports {names} only, got {dtype}"
        return reason


BACKENDS: dict[str, Backend] = {
    b.name: b
    for b in (
        Backend(
            "triton", _triton_attention.varlen_attention_triton, _triton_unavailable,
            _triton_implementation, writes_out=True,
        ),
        Backend(
            "fa2", baselines.fa2_attention, baselines.fa2_unavailable,
            baselines.fa2_implementation, dtypes=baselines.HALF,
        ),
        Backend(
            "torch_varlen", baselines.torch_varlen_attention, baselines.torch_varlen_unavailable,
            lambda: "torch.nn.attention.varlen.varlen_attn", dtypes=baselines.HALF,
        ),
        Backend(
            "nested_sdpa", baselines.nested_sdpa_attention, baselines.nested_sdpa_unavailable,
            lambda: "jagged NestedTensor + F.scaled_dot_product_attention",
            # builds its jagged tensor from all of q's rows; reads the lengths back
            exact_total=True, capture=False,
        ),
        Backend(
            "mem_efficient", baselines.mem_efficient_attention,
            baselines.mem_efficient_unavailable,
            lambda: "torch.ops.aten._efficient_attention_forward (memory-efficient, varlen)",
        ),
        Backend(
            "padded_sdpa", baselines.padded_sdpa_attention, _always,
            lambda: "F.scaled_dot_product_attention, padded to max_seqlen + key mask",
            pipeline=False,
        ),
        Backend(
            "reference", _reference, _always,
            lambda: "ragged.reference.varlen_attention_reference (eager float32)",
            pipeline=False, capture=False,
        ),
    )
}  # fmt: skip


def available_backends() -> list[str]:
    """Names of the backends that can run on this machine (on its default device)."""
    return [name for name, b in BACKENDS.items() if b.unavailable() is None]


def backend_implementation(name: str) -> str:
    """What the backend ``name`` runs here, e.g. which FA2 build: record it with every result."""
    return _get_backend(name).implementation()


def _get_backend(name: str) -> Backend:
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise ValueError(
            f"unknown backend {name!r}; expected one of {', '.join(BACKENDS)}"
        ) from None


def varlen_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    *,
    backend: str = "triton",
    softmax_scale: float | None = None,
    out: torch.Tensor | None = None,
    validate: bool = True,
) -> torch.Tensor:
    """Bidirectional (non-causal) attention over packed variable-length sequences.

    Sequence ``i`` is rows ``cu_seqlens[i]:cu_seqlens[i + 1]`` of q, k and v; each token
    attends to every token of its own sequence and to no other.

    Args:
        q, k, v: ``[total_tokens, heads, head_dim]``, float16, bfloat16 or float32 (one dtype),
            same shape and device. Any strides as long as ``head_dim`` has unit stride, so
            ``qkv.unbind(1)`` of a packed ``qkv`` ``[total_tokens, 3, heads, head_dim]`` needs
            no copy. ``head_dim`` is any value from 16 to 256.
        cu_seqlens: int32 ``[batch + 1]`` on q's device: 0, then the running total of the
            sequence lengths. Lengths may be 0.
        max_seqlen: Python int >= the longest sequence (sets the grid; the kernel reads the
            true lengths from ``cu_seqlens``).
        backend: a name in ``BACKENDS``: ``"triton"`` (this package's kernel) or a
            baseline; ``available_backends()`` lists those that run here and
            ``backend_implementation(name)`` says what each one calls.
        softmax_scale: defaults to ``1 / sqrt(head_dim)``.
        out: optional ``[total_tokens, heads, head_dim]`` tensor of q's dtype and device, unit
            stride in ``head_dim``, written in place and returned (the ``triton`` backend
            then allocates nothing, which CUDA-graph capture with static buffers needs).
        validate: check the values of ``cu_seqlens`` against ``max_seqlen`` and the tokens.
            That reads ``cu_seqlens`` back to the host, a device synchronisation: pass
            ``validate=False`` on hot paths and in CUDA-graph capture once the producer of
            ``cu_seqlens`` is trusted. Always checked, with no sync: types, dtypes, shapes,
            devices, strides, ``head_dim``, and ``0 <= max_seqlen <= total_tokens``.
            Left unchecked by ``validate=False``, and trusted: that ``cu_seqlens`` starts at 0,
            never decreases, ends at ``total_tokens``, and that no sequence is longer than
            ``max_seqlen``. Values that break this make the kernel read and write outside
            the tensors: wrong results, an illegal-address error on the GPU, or a crashed
            process under the interpreter. ``ragged.packing.pack`` and ``pack_fixed`` produce
            ``cu_seqlens`` that keep it.

    Returns:
        ``[total_tokens, heads, head_dim]`` in q's dtype (``out`` when given).

    Example: three images keeping 3, 0 and 2 tokens, 12 heads of 64::

        cu_seqlens = torch.tensor([0, 3, 3, 5], dtype=torch.int32, device="cuda")
        q = k = v = torch.randn(5, 12, 64, dtype=torch.float16, device="cuda")
        o = varlen_attention(q, k, v, cu_seqlens, max_seqlen=3)  # o[0:3] from rows 0..2 only

    Raises:
        TypeError / ValueError naming what was expected; ``BackendUnavailableError`` when the
        backend cannot run here or cannot run these inputs (the message says why).
    """
    if not validate and backend == "triton" and BACKENDS["triton"].run is TRITON_RUN:
        o = _triton_attention.fast_call(q, k, v, cu_seqlens, max_seqlen, softmax_scale, out)
        if o is not None:
            return o
    b = _get_backend(backend)
    check_types(q, k, v, cu_seqlens, max_seqlen, out)
    head_dim = q.shape[2]
    check_available(b, q, head_dim)
    if validate:
        _check_values(q.shape[0], cu_seqlens, max_seqlen)
    scale = default_scale(head_dim, softmax_scale)
    if b.writes_out:
        if out is None:
            # empty_like: contiguous for views of a packed qkv, and the cheapest allocation
            # call (see scripts/kernel_bench.py --launch-paths)
            out = torch.empty_like(q)
        result = b.run(q, k, v, cu_seqlens, max_seqlen, scale, out)
        if b.run is TRITON_RUN:
            _triton_attention.remember(q, max_seqlen, cu_seqlens)
        return result
    result = b.run(q, k, v, cu_seqlens, max_seqlen, scale)
    if out is None:
        return result
    return out.copy_(result)


def default_scale(head_dim: int, softmax_scale: float | None) -> float:
    """The softmax scale a call uses: ``softmax_scale``, or ``1 / sqrt(head_dim)``."""
    return 1.0 / math.sqrt(head_dim) if softmax_scale is None else float(softmax_scale)


# (backend, device type, dtype, head_dim) -> reason or None. What a backend supports does not
# change while the process runs; asking again costs microseconds on the hot path.
_reasons: dict[tuple, str | None] = {}


def check_available(b: Backend, q: torch.Tensor, head_dim: int) -> None:
    key = (b.name, "cuda" if q.is_cuda else q.device.type, q.dtype, head_dim)
    try:
        reason = _reasons[key]
    except KeyError:
        reason = _reasons[key] = b.unavailable(q.device, q.dtype, head_dim)
    if reason is not None:
        raise BackendUnavailableError(f"backend {b.name!r} cannot run: {reason}")


def check_types(q, k, v, cu_seqlens, max_seqlen, out) -> None:
    """Type, shape and device checks: no synchronisation, 2.3 us host on the H100 (locals:
    every ``.shape`` and ``.device`` access builds a new Python object)."""
    Tensor = torch.Tensor
    if not (
        isinstance(q, Tensor)
        and isinstance(k, Tensor)
        and isinstance(v, Tensor)
        and isinstance(cu_seqlens, Tensor)
    ):
        for name, t in (("q", q), ("k", k), ("v", v), ("cu_seqlens", cu_seqlens)):
            if not isinstance(t, Tensor):
                raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    dtype = q.dtype
    if dtype not in _DTYPES:
        raise TypeError(f"q must be float16, bfloat16 or float32, got {dtype}")
    if k.dtype != dtype or v.dtype != dtype:
        raise TypeError(f"q, k and v must share one dtype, got {dtype}, {k.dtype}, {v.dtype}")
    shape = q.shape
    if len(shape) != 3:
        raise ValueError(f"q must be [total_tokens, heads, head_dim], got shape {tuple(shape)}")
    if k.shape != shape or v.shape != shape:
        raise ValueError(
            "q, k and v must have the same shape [total_tokens, heads, head_dim], got "
            f"{tuple(shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    dev = q.get_device()  # an int compare on the hot path; -1 for every non-CUDA device
    if (
        k.get_device() != dev
        or v.get_device() != dev
        or (dev < 0 and not q.device == k.device == v.device)
    ):
        raise ValueError(
            f"q, k and v must be on one device, got {q.device}, {k.device}, {v.device}"
        )
    if not MIN_HEAD_DIM <= shape[2] <= MAX_HEAD_DIM:
        raise ValueError(
            f"head_dim must be between {MIN_HEAD_DIM} and {MAX_HEAD_DIM}, got {shape[2]}"
        )
    if q.is_neg() or k.is_neg() or v.is_neg():  # the kernel reads memory, not the sign bit
        raise ValueError("q, k and v must not be negative views: call .resolve_neg() first")
    if q.stride(2) != 1 or k.stride(2) != 1 or v.stride(2) != 1:
        raise ValueError(
            "q, k and v must have unit stride in head_dim, got strides "
            f"{q.stride()}, {k.stride()}, {v.stride()}"
        )
    if cu_seqlens.dtype != torch.int32:
        raise TypeError(f"cu_seqlens must be int32, got {cu_seqlens.dtype}")
    if cu_seqlens.dim() != 1 or cu_seqlens.shape[0] < 1:
        raise ValueError(f"cu_seqlens must be 1-D [batch + 1], got shape {tuple(cu_seqlens.shape)}")
    if cu_seqlens.stride(0) != 1 and cu_seqlens.shape[0] > 1:  # kernels index it as contiguous
        raise ValueError(f"cu_seqlens must be contiguous, got stride {cu_seqlens.stride(0)}")
    if cu_seqlens.get_device() != dev or (dev < 0 and cu_seqlens.device != q.device):
        raise ValueError(f"cu_seqlens must be on q's device {q.device}, got {cu_seqlens.device}")
    if type(max_seqlen) is not int and (
        not isinstance(max_seqlen, int) or isinstance(max_seqlen, bool)
    ):
        raise TypeError(f"max_seqlen must be a Python int, got {type(max_seqlen).__name__}")
    if max_seqlen < 0:
        raise ValueError(f"max_seqlen must be >= 0, got {max_seqlen}")
    if max_seqlen > shape[0]:  # no sequence is longer; the grid grows with max_seqlen
        raise ValueError(
            f"max_seqlen={max_seqlen} is more than total_tokens={shape[0]} (q.shape[0]): no "
            "sequence can be that long"
        )
    if out is not None:
        if not isinstance(out, Tensor):
            raise TypeError(f"out must be a torch.Tensor, got {type(out).__name__}")
        if out.shape != shape or out.dtype != dtype or out.device != q.device:
            raise ValueError(
                f"out must be {tuple(shape)} {dtype} on {q.device}, "
                f"got {tuple(out.shape)} {out.dtype} on {out.device}"
            )
        if out.stride(2) != 1:
            raise ValueError(f"out must have unit stride in head_dim, got strides {out.stride()}")
        if out.is_neg():
            raise ValueError("out must not be a negative view: call .resolve_neg() first")


def _check_values(total_tokens: int, cu_seqlens: torch.Tensor, max_seqlen: int) -> None:
    bounds = cu_seqlens.tolist()  # the one host synchronisation of validate=True
    if bounds[0] != 0:
        raise ValueError(f"cu_seqlens must start at 0, got {bounds[0]}")
    lengths = [b - a for a, b in itertools.pairwise(bounds)]
    if any(n < 0 for n in lengths):
        i = next(i for i, n in enumerate(lengths) if n < 0)
        raise ValueError(
            f"cu_seqlens must be non-decreasing, got cu_seqlens[{i}]={bounds[i]} > "
            f"cu_seqlens[{i + 1}]={bounds[i + 1]}"
        )
    if bounds[-1] != total_tokens:
        raise ValueError(
            f"cu_seqlens must end at total_tokens={total_tokens} (q.shape[0]), got {bounds[-1]}"
        )
    longest = max(lengths, default=0)
    if max_seqlen < longest:
        raise ValueError(f"max_seqlen={max_seqlen} is smaller than the longest sequence, {longest}")
