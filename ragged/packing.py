"""Pack the kept tokens of a padded batch into one ragged buffer, and back.

``pack``       exact size: one host synchronisation (reads the total to size the buffer).
``pack_fixed`` fixed capacity: no synchronisation, device-side ``cu_seqlens``, capturable
               in a CUDA graph; overflow is flagged on the device, never silently read past.
``unpack``     ragged -> padded, dropped positions zero.
``gather_cls`` the first (CLS) token of every sequence.

All four run one Triton kernel each (``pack*`` also one ``torch.cumsum``); on the CPU they
need ``TRITON_INTERPRET=1``.
"""

from __future__ import annotations

import itertools
from typing import NamedTuple

import torch

from .kernels import packing as _k


class FixedPack(NamedTuple):
    """Result of ``pack_fixed``.

    packed:     [capacity, C], x's dtype; rows past ``cu_seqlens[-1]`` are left unwritten.
    cu_seqlens: int32 [B + 1] on the device, clamped to ``capacity``.
    max_seqlen: host int, min(N, capacity) (an upper bound: the true lengths stay on the
                device).
    overflow:   int8 [] on the device, 1 when the kept tokens did not fit (those past the
                capacity were dropped); read it once the results are needed anyway.
    """

    packed: torch.Tensor
    cu_seqlens: torch.Tensor
    max_seqlen: int
    overflow: torch.Tensor


def _check_tokens(x, keep_mask) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"x must be a torch.Tensor [B, N, C], got {type(x).__name__}")
    if x.dim() != 3:
        raise ValueError(f"x must be [B, N, C], got shape {tuple(x.shape)}")
    _check_mask(keep_mask, x.shape[0], x.shape[1], x.device)


def _check_mask(keep_mask, batch: int | None, n: int | None, device) -> None:
    if not isinstance(keep_mask, torch.Tensor):
        raise TypeError(
            f"keep_mask must be a bool torch.Tensor [B, N], got {type(keep_mask).__name__}"
        )
    if keep_mask.dtype != torch.bool:
        raise TypeError(f"keep_mask must be torch.bool, got {keep_mask.dtype}")
    if (
        keep_mask.dim() != 2
        or (batch is not None and keep_mask.shape[0] != batch)
        or (n is not None and keep_mask.shape[1] != n)
    ):
        want = f"[{batch if batch is not None else 'B'}, {n if n is not None else 'N'}]"
        raise ValueError(f"keep_mask must be {want}, got shape {tuple(keep_mask.shape)}")
    if keep_mask.device != device:
        raise ValueError(f"keep_mask must be on {device}, got {keep_mask.device}")


def _check_cu_seqlens(cu_seqlens, batch: int, device) -> None:
    if not isinstance(cu_seqlens, torch.Tensor):
        raise TypeError(f"cu_seqlens must be a torch.Tensor, got {type(cu_seqlens).__name__}")
    if cu_seqlens.dtype != torch.int32:
        raise TypeError(f"cu_seqlens must be int32, got {cu_seqlens.dtype}")
    if cu_seqlens.shape != (batch + 1,):
        raise ValueError(f"cu_seqlens must be [{batch + 1}], got shape {tuple(cu_seqlens.shape)}")
    if cu_seqlens.device != device:
        raise ValueError(f"cu_seqlens must be on {device}, got {cu_seqlens.device}")


def _check_packed(packed) -> None:
    if not isinstance(packed, torch.Tensor):
        raise TypeError(f"packed must be a torch.Tensor [T, C], got {type(packed).__name__}")
    if packed.dim() != 2:
        raise ValueError(f"packed must be [T, C], got shape {tuple(packed.shape)}")


def _unit_stride_last(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _ranks(keep_mask: torch.Tensor) -> torch.Tensor:
    """Inclusive running count of kept tokens over the flattened mask, int32 [B * N]."""
    return keep_mask.reshape(-1).cumsum(0, dtype=torch.int32)


def pack(x: torch.Tensor, keep_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Gather the kept tokens of each row into one ragged buffer.

    Args:
        x: [B, N, C], any dtype; keep_mask: bool [B, N] on x's device.
    Returns:
        packed [T, C] (T = kept tokens, in row order), cu_seqlens int32 [B + 1] on the
        device, max_seqlen (host int, the longest row). One host synchronisation, to size
        ``packed``; ``pack_fixed`` has none.
    """
    _check_tokens(x, keep_mask)
    batch, n, c = x.shape
    if batch == 0 or n == 0:
        return x.new_empty((0, c)), torch.zeros(batch + 1, dtype=torch.int32, device=x.device), 0
    cu_seqlens = torch.empty(batch + 1, dtype=torch.int32, device=x.device)  # kernel writes all
    ranks = _ranks(keep_mask)
    ends = [0, *ranks.view(batch, n)[:, -1].tolist()]  # the one synchronisation
    max_seqlen = max(b - a for a, b in itertools.pairwise(ends))
    packed = x.new_empty((ends[-1], c))
    _k.pack_launch(_unit_stride_last(x), keep_mask, ranks, packed, cu_seqlens, None)
    return packed, cu_seqlens, max_seqlen


def pack_fixed(
    x: torch.Tensor,
    keep_mask: torch.Tensor,
    capacity: int,
    *,
    out: torch.Tensor | None = None,
    cu_seqlens: torch.Tensor | None = None,
    overflow: torch.Tensor | None = None,
) -> FixedPack:
    """``pack`` into a buffer of ``capacity`` rows with no host synchronisation.

    Pass ``out`` ([capacity, C], x's dtype, unit stride in C), ``cu_seqlens`` (int32
    [B + 1]) and ``overflow`` (int8 []) to reuse static buffers, e.g. inside a CUDA graph.
    """
    _check_tokens(x, keep_mask)
    batch, n, c = x.shape
    if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 0:
        raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
    if out is None:
        out = x.new_empty((capacity, c))
    elif out.shape != (capacity, c) or out.dtype != x.dtype or out.device != x.device:
        raise ValueError(
            f"out must be [{capacity}, {c}] {x.dtype} on {x.device}, got "
            f"{tuple(out.shape)} {out.dtype} on {out.device}"
        )
    elif out.stride(1) != 1:
        raise ValueError(f"out must have unit stride in C, got strides {out.stride()}")
    if cu_seqlens is None:
        cu_seqlens = torch.empty(batch + 1, dtype=torch.int32, device=x.device)
    else:
        _check_cu_seqlens(cu_seqlens, batch, x.device)
    if overflow is None:
        overflow = torch.empty((), dtype=torch.int8, device=x.device)  # the kernel writes it
    elif overflow.shape != () or overflow.dtype != torch.int8:
        raise ValueError(
            f"overflow must be an int8 scalar tensor, got {overflow.dtype} {tuple(overflow.shape)}"
        )
    if batch == 0 or n == 0:
        cu_seqlens.zero_()
        overflow.zero_()
        return FixedPack(out, cu_seqlens, 0, overflow)
    _k.pack_launch(_unit_stride_last(x), keep_mask, _ranks(keep_mask), out, cu_seqlens, overflow)
    # no row is longer than N, nor than the buffer (cu_seqlens is clamped to it)
    return FixedPack(out, cu_seqlens, min(n, capacity), overflow)


def unpack(
    packed: torch.Tensor,
    cu_seqlens: torch.Tensor,
    keep_mask: torch.Tensor,
    *,
    validate: bool = True,
) -> torch.Tensor:
    """Scatter a ragged buffer back to [B, N, C]: kept positions in order, dropped ones zero.

    Args:
        packed: [T, C] (``pack``'s output, or ``pack_fixed``'s buffer);
        cu_seqlens: int32 [B + 1]; keep_mask: bool [B, N], the mask that packed it.
        validate: check on the host (one synchronisation) that ``cu_seqlens`` fits ``packed``
            and matches the mask's row counts. Never reads outside a sequence either way.
    Returns:
        [B, N, C] in packed's dtype.
    """
    _check_packed(packed)
    _check_mask(keep_mask, None, None, packed.device)
    batch, n = keep_mask.shape
    _check_cu_seqlens(cu_seqlens, batch, packed.device)
    if validate:
        counts = keep_mask.sum(1).tolist()
        bounds = cu_seqlens.tolist()
        lengths = [b - a for a, b in itertools.pairwise(bounds)]
        if bounds[0] != 0 or bounds[-1] > packed.shape[0] or lengths != counts:
            raise ValueError(
                f"cu_seqlens {bounds} does not describe keep_mask's row counts {counts} "
                f"within packed's {packed.shape[0]} rows"
            )
    out = packed.new_empty((batch, n, packed.shape[1]))
    _k.unpack_launch(_unit_stride_last(packed), cu_seqlens, keep_mask, out)
    return out


def gather_cls(packed: torch.Tensor, cu_seqlens: torch.Tensor) -> torch.Tensor:
    """The first token of every sequence, [B, C] in packed's dtype; zeros for empty ones.

    packed: [T, C]; cu_seqlens: int32 [B + 1] with ``cu_seqlens[-1] <= T`` (not checked on
    the host: that would synchronise).
    """
    _check_packed(packed)
    if not isinstance(cu_seqlens, torch.Tensor) or cu_seqlens.dim() != 1:
        raise ValueError("cu_seqlens must be a 1-D int32 tensor [B + 1]")
    batch = cu_seqlens.shape[0] - 1
    _check_cu_seqlens(cu_seqlens, batch, packed.device)
    out = packed.new_empty((batch, packed.shape[1]))
    _k.gather_first_launch(_unit_stride_last(packed), cu_seqlens, out)
    return out
