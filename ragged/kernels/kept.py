"""The launches kept for the fast paths, as the Python paths (``kernels.attention``) and the
C++ ones (``kernels.fastpath``, fastpath.cpp) both read them.

The state lives here, not in ``kernels.attention``, so that the C++ fast path binds this module
and ``kernels.launch`` and never imports the kernel's module back.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch

# (device index, dtype, head_dim) -> spans, each (lo, hi, direct launch, block_m, default
# scale x log2 e, launch spec, pairs_lo, pairs_hi, grid3): every max_seqlen from lo to hi and
# batch x heads from pairs_lo to pairs_hi plans the same compiled kernel (``config.choice``),
# so a max_seqlen never called before launches at once, with no plan and no compile. What
# ``attention.launch_ready`` needs to skip the plan, the Launcher and
# their checks, for calls of the table's config that passed ``ragged.attention``'s checks once
# (``attention.remember``). fastpath.cpp reads it too.
ready_spans: dict[tuple, tuple] = {}


class KeptLaunch(NamedTuple):
    """A launch kept for later calls on packed qkv of one layout (``ragged.LayoutAttention``).
    fastpath.cpp reads its fields by position: keep the order."""

    direct: Any  # the compiled kernel's direct launcher (kernels/launch.py)
    spec: tuple | None  # attention.launch_spec(direct)
    key: tuple  # (shape, strides, dtype, device index) of the qkv it was kept for
    grid_x: int
    k_offset: int  # bytes from q's data pointer to k's, and to v's
    v_offset: int
    out: torch.Tensor
    out_ptr: int
    cu_len: int  # cu_seqlens' length (batch + 1): the grid was planned for it
    scalars: tuple  # (qk_scale, 8 strides, heads, num_m_blocks)
    max_seqlen: int
    epoch: int  # ``attention.epoch`` when kept
    block_m: int  # the grid of another max_seqlen of ``span``: num_m_blocks = ceil(it / block_m)
    span: tuple  # (lo, hi): every max_seqlen the kept kernel serves (``config.choice``)
    # the one-tile kernel's 3-D grid: (grid_x, heads, batch), its last two ints (total_tokens,
    # guess_len) the same for every max_seqlen; else a 1-D grid of grid_x programs
    grid3: bool = False
    # The numbers above as the C struct fastpath.cpp's ``layout`` reads
    # (``attention.with_image``), or None: then that takes the checked call. Made from the
    # fields: a ``_replace`` must be followed by ``with_image`` again.
    image: bytes | None = None
