"""Bidirectional ragged attention over packed tokens: kernel -> launch config -> launcher.

One program per (query tile, sequence, head), flattened into a 1-D grid with the query tile
fastest so that programs sharing a sequence's K/V run together and hit L2. Each program walks
the sequence's key tiles with the FlashAttention-2 online softmax in base 2 (``exp2``, the
scale pre-multiplied by log2(e)), accumulates in fp32 and writes the input dtype.

Performance notes (H100 80GB, torch 2.11 + triton 3.6; figures in docs/kernel.md):
  * the tile table in ``attention_config`` (config.py) comes from ``python -m
    scripts.kernel_bench --sweep``; its docstring gives the measured reason for each entry.
  * launched through ``Launcher`` (launch.py): 7.3 us host per call vs 26.0 for
    ``kernel[grid](...)`` at BS=1 / 80% pruning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import fastpath
from . import launch as _launch
from .config import (
    AttentionConfig,
    attention_config,  # noqa: F401  (imported from here by callers)
    config_for,
    length_span,
)
from .kept import KeptLaunch, _ready
from .launch import Launcher, specializable

LOG2E = 1.4426950408889634


@triton.jit
def gdc_launch_dependents():
    """``griddepcontrol.launch_dependents``: the next kernel of a programmatic dependent launch
    may start once every program of this one ran this (or exited); a no-op otherwise."""
    tl.inline_asm_elementwise("griddepcontrol.launch_dependents; // $0", "=r", [],
                              dtype=tl.int32, is_pure=False, pack=1)  # fmt: skip


@triton.jit
def gdc_wait():
    """``griddepcontrol.wait``: until the kernel this one depends on completed and its writes
    are visible (at once outside a programmatic dependent launch)."""
    tl.inline_asm_elementwise("griddepcontrol.wait; // $0", "=r", [], dtype=tl.int32,
                              is_pure=False, pack=1)  # fmt: skip


# Strides stay specializable: Triton's "divisible by 16" lets it emit 16-byte loads (2.5x faster
# at BS=64/0% than tl.multiple_of hints on unspecialized strides, which it ignored).
@triton.jit(
    do_not_specialize=["cu_seqlens", "num_heads", "num_m_blocks"],
    do_not_specialize_on_alignment=["cu_seqlens"],
)
def _varlen_fwd_kernel(
    Q, K, V, O, cu_seqlens, qk_scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    num_heads, num_m_blocks,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    DELAY_CYCLES: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    # PDL (variants.py): a programmatic dependent launch; 1: the next kernel may launch at once,
    # 2: once every program has stored its tile (or had nothing to do). 0/False: the default.
    if PDL == 1:
        gdc_launch_dependents()
    pid = tl.program_id(0)
    m_block = pid % num_m_blocks
    seq_head = pid // num_m_blocks
    head = seq_head % num_heads
    seq = seq_head // num_heads
    if PDL:  # the kernel before this one has finished writing what it reads
        gdc_wait()

    seq_start = tl.load(cu_seqlens + seq)
    seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
    m_start = m_block * BLOCK_M
    if m_start < seq_len:
        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        m_ok = offs_m < seq_len
        row0 = seq_start.to(tl.int64)
        head64 = head.to(tl.int64)

        q_ptrs = Q + (row0 + offs_m[:, None]) * stride_qt + head64 * stride_qh + offs_d[None, :]
        q = tl.load(q_ptrs, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
        k_base = K + row0 * stride_kt + head64 * stride_kh
        v_base = V + row0 * stride_vt + head64 * stride_vh

        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        for n_start in range(0, seq_len, BLOCK_N):
            offs_kn = n_start + offs_n
            n_ok = offs_kn < seq_len
            k = tl.load(
                k_base + offs_kn[None, :] * stride_kt + offs_d[:, None],
                mask=n_ok[None, :] & d_ok[:, None],
                other=0.0,
            )
            # V is loaded with K so both loads are in flight before the softmax (not timed on
            # its own: the V-late variant was never measured against it).
            v = tl.load(
                v_base + offs_kn[:, None] * stride_vt + offs_d[None, :],
                mask=n_ok[:, None] & d_ok[None, :],
                other=0.0,
            )
            if IEEE_DOT:
                s = tl.dot(q, k, input_precision="ieee")
            else:
                s = tl.dot(q, k)
            s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            p = tl.math.exp2(s - m_new[:, None])
            alpha = tl.math.exp2(m_i - m_new)
            l_i = l_i * alpha + tl.sum(p, 1)
            if IEEE_DOT:
                pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
            else:
                pv = tl.dot(p.to(v.dtype), v)
            acc = acc * alpha[:, None] + pv
            m_i = m_new

        acc = acc / l_i[:, None]
        o_ptrs = O + (row0 + offs_m[:, None]) * stride_ot + head64 * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])
    if PDL == 2:
        gdc_launch_dependents()
    if DELAY_CYCLES > 0:  # an injected slowdown (ragbench's calibration); compiled out at 0
        t0 = tl.inline_asm_elementwise(
            "mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
        )
        t = t0
        while t - t0 < DELAY_CYCLES:
            t = tl.inline_asm_elementwise(
                "mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1
            )


_launcher = Launcher(_varlen_fwd_kernel)
varlen_fwd_kernel = _varlen_fwd_kernel  # the kernel itself, for variants.py's launches


@dataclass(frozen=True, eq=False)  # hashed by identity: the Launcher key, one per shape
class Plan:
    """Everything about a launch that does not change between calls of the same shape."""

    config: AttentionConfig
    constexprs: dict
    device_index: int  # -1 on the CPU (the interpreter)


# (device, dtype, head_dim, max_seqlen, config override) -> Plan: one dict lookup per call.
_plans: dict[tuple, Plan] = {}
# (device, dtype, head_dim, config) -> Plan: one Plan, so one Launcher entry and one compiled
# kernel, for every max_seqlen of a config; a new max_seqlen then compiles nothing.
_plan_of: dict[tuple, Plan] = {}


def _make_plan(device_index, dtype, head_dim, max_seqlen, config) -> Plan:
    cfg = config or config_for(head_dim, max_seqlen, dtype, device_index)  # table, or sweep
    plan = _plan_of.get((device_index, dtype, head_dim, cfg))
    if plan is not None:
        return plan
    constexprs = {
        "HEAD_DIM": head_dim,
        "BLOCK_D": max(16, triton.next_power_of_2(head_dim)),
        "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n,
        "IEEE_DOT": dtype == torch.float32,
        "DELAY_CYCLES": cfg.delay_cycles,
        "PDL": False,
    }
    plan = _plan_of[(device_index, dtype, head_dim, cfg)] = Plan(cfg, constexprs, device_index)
    return plan


MAX_GRID = 2**31 - 1  # programs of a 1-D grid


def grid_of(max_seqlen: int, block_m: int, batch: int, heads: int) -> tuple[int, int]:
    """(num_m_blocks, programs): ``block_m``-row query tiles of ``max_seqlen`` per sequence
    and head, times ``batch`` x ``heads`` (fastpath.cpp's ``grid_of``)."""
    num_m_blocks = -(-max_seqlen // block_m)
    return num_m_blocks, num_m_blocks * batch * heads


def launch_args(q, k, v, out, cu_seqlens, max_seqlen, softmax_scale, config=None):
    """(plan, grid, scalar args, fast) for one call; ``config`` overrides the table."""
    sqt, sqh, _ = q.stride()
    skt, skh, _ = k.stride()
    svt, svh, _ = v.stride()
    sot, soh, _ = out.stride()
    _, heads, head_dim = q.shape
    plan_key = (q.get_device(), q.dtype, head_dim, max_seqlen, config)
    plan = _plans.get(plan_key)
    if plan is None:
        plan = _plans[plan_key] = _make_plan(*plan_key)
    num_m_blocks, programs = grid_of(max_seqlen, plan.config.block_m, cu_seqlens.shape[0] - 1,
                                     heads)  # fmt: skip
    grid = (programs, 1, 1)
    scalars = (softmax_scale * LOG2E, sqt, sqh, skt, skh, svt, svh, sot, soh, heads, num_m_blocks)
    return plan, grid, scalars, specializable(sqt, sqh, skt, skh, svt, svh, sot, soh)


def varlen_attention_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    softmax_scale: float,
    out: torch.Tensor,
    config: AttentionConfig | None = None,
) -> torch.Tensor:
    """Launch the kernel. Inputs are already validated by ``ragged.attention``.

    q, k, v, out: [total_tokens, heads, head_dim], unit stride in head_dim; cu_seqlens int32
    [batch + 1]. No host synchronisation, no allocation: capturable in a CUDA graph.
    """
    plan, grid, scalars, fast = launch_args(
        q, k, v, out, cu_seqlens, max_seqlen, softmax_scale, config
    )
    if grid[0] == 0:  # no sequences, or max_seqlen 0
        return out
    cfg = plan.config
    _launcher.launch(
        plan, grid, (q, k, v, out, cu_seqlens), scalars, plan.constexprs,
        cfg.num_warps, cfg.num_stages, plan.device_index, fast,
    )  # fmt: skip
    return out


# Bumped by forget_plans: launches kept from before it (ragged.LayoutAttention) are dropped.
epoch = 0


def forget_plans() -> None:
    """Drop every plan, its direct launch and fast-path entry: the next calls re-plan (after a
    sweep, tuning.py)."""
    global epoch
    _plans.clear()
    _plan_of.clear()
    _launcher._cache.clear()
    _ready.clear()
    epoch += 1


def ready_entry(device_index, dtype, head_dim, max_seqlen) -> tuple | None:
    """The ``_ready`` span that serves this max_seqlen: (lo, hi, direct, block_m, default
    scale, spec), or None."""
    for span in _ready.get((device_index, dtype, head_dim), ()):
        if span[0] <= max_seqlen <= span[1]:
            return span
    return None


def prepare(q, k, v, out, cu_seqlens, max_seqlen, softmax_scale):
    """-> (direct launch, grid_x, scalars, block_m, span) that launch this call again (and
    any max_seqlen of ``span`` with the grid of ``block_m``-row tiles), or None, for a call
    that just passed ``varlen_attention``'s checks (the Launcher holds its kernel; the grid
    is not empty; Triton's stride specialization and 16-byte alignment of q and out hold)."""
    entry = ready_entry(q.get_device(), q.dtype, q.shape[2], max_seqlen)
    if entry is None:
        return None
    _, grid, scalars, fast = launch_args(q, k, v, out, cu_seqlens, max_seqlen, softmax_scale)
    if not fast or not grid[0] or (q.data_ptr() | out.data_ptr()) & 15:
        return None
    return entry[2], grid[0], scalars, entry[3], entry[:2]


def remember(q: torch.Tensor, max_seqlen: int) -> None:
    """After a checked ``varlen_attention`` call launched: let ``fast_call`` take later calls
    of q's device, dtype and head_dim and any ``max_seqlen`` of this one's span
    (``config.length_span``), once the Launcher holds the compiled kernel for direct launch,
    and make the C++ fast paths ``fast_call`` and ``layout_call`` (built at the first such
    call on this machine: ``fastpath.module()``)."""
    global fast_call, layout_call
    key = (q.get_device(), q.dtype, q.shape[2])
    plan = _plans.get((*key, max_seqlen, None))
    direct = None if plan is None or key[0] < 0 else _launcher.direct(plan)
    if direct is None:
        return
    module = fastpath.module()  # built once per machine, then cached (functools.cache)
    if module is not None:
        fast_call, layout_call = module.attention, module.layout
    if ready_entry(*key, max_seqlen) is None:
        span = (*length_span(max_seqlen), direct, plan.config.block_m,
                (1.0 / math.sqrt(key[2])) * LOG2E, launch_spec(direct))  # fmt: skip
        _ready[key] = (*_ready.get(key, ()), span)


# The attention kernel's runtime parameter types after its four data pointers, as
# ``c_launch.param_types`` reads them: what fastpath.cpp passes to cuLaunchKernel.
_PARAMS_TAIL = ("*i32", "fp32") + ("i32",) * 10


def launch_spec(direct) -> tuple[int, int, int] | None:
    """(CUfunction, threads per block, shared bytes) of a ``c_launch`` launch of this kernel,
    for fastpath.cpp to launch itself; None for Triton's launcher (it then calls ``direct``)."""
    types = getattr(direct, "types", None)
    if types is None or len(types) != 16 or types[4:] != _PARAMS_TAIL:
        return None
    if not all(t.startswith("*") for t in types[:4]):
        return None
    return direct.args


def launch_ready(q, k, v, cu_seqlens, max_seqlen, softmax_scale, out):
    """The whole ``varlen_attention(..., validate=False)`` call in one function, for a call
    whose (device, dtype, head_dim) and a max_seqlen of the same span was launched directly
    before -> ``out`` (or a new output), or None when anything differs from the common case
    (the caller then takes the checked path, which says what is wrong or launches through the
    Launcher).

    The same checks as ``ragged.attention._check_types`` and ``Launcher.launch`` hold when it
    launches; the ones a ``_ready`` entry implies (dtype, head_dim range, a CUDA device,
    ``max_seqlen >= 0``) are its key, written by ``remember`` after a checked call. One
    function, each shape and stride read once: see docs/kernel.md for what it saves.
    """
    T = torch.Tensor
    if not (
        type(q) is T and type(k) is T and type(v) is T and type(cu_seqlens) is T
        and type(max_seqlen) is int and (softmax_scale is None or type(softmax_scale) is float)
    ):  # fmt: skip
        return None
    shape = q.shape
    if len(shape) != 3 or k.shape != shape or v.shape != shape:
        return None
    dtype, dev = q.dtype, q.get_device()
    total, heads, head_dim = shape
    entry = ready_entry(dev, dtype, head_dim, max_seqlen)
    cu_shape = cu_seqlens.shape
    if (
        entry is None
        or k.dtype is not dtype or v.dtype is not dtype
        or k.get_device() != dev or v.get_device() != dev or cu_seqlens.get_device() != dev
        or cu_seqlens.dtype is not torch.int32 or len(cu_shape) != 1 or cu_shape[0] < 1
        or (cu_shape[0] > 1 and cu_seqlens.stride(0) != 1)
        or q.is_neg() or k.is_neg() or v.is_neg()
        or max_seqlen > total
        or not (_launch._SINGLE_DEVICE or dev == _launch._current_device())
        or _launch._hooks_active()
    ):  # fmt: skip
        return None
    sqt, sqh, sqd = q.stride()
    skt, skh, skd = k.stride()
    svt, svh, svd = v.stride()
    if out is None:
        out = torch.empty_like(q)
    elif (
        type(out) is not T or out.shape != shape or out.dtype is not dtype
        or out.get_device() != dev or out.is_neg()
    ):  # fmt: skip
        return None
    sot, soh, sod = out.stride()
    strides = sqt | sqh | skt | skh | svt | svh | sot | soh
    pq, pk, pv, po = q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr()
    if (
        sqd != 1 or skd != 1 or svd != 1 or sod != 1
        or strides & 15 or strides >= 2**31  # Triton's "divisible by 16" specialization
        or (pq | pk | pv | po) & 15  # 16-byte aligned (cu_seqlens is not specialized on it)
    ):  # fmt: skip
        return None
    _, _, direct, block_m, default_scale, _ = entry
    num_m_blocks, grid = grid_of(max_seqlen, block_m, cu_shape[0] - 1, heads)
    if grid > MAX_GRID:  # more programs than a grid holds: the checked path says so
        return None
    if grid:
        qk_scale = default_scale if softmax_scale is None else softmax_scale * LOG2E
        direct(grid, 1, 1, _launch._raw_stream(dev), pq, pk, pv, po, cu_seqlens.data_ptr(),
               qk_scale, sqt, sqh, skt, skh, svt, svh, sot, soh, heads, num_m_blocks)  # fmt: skip
    return out


# What ``varlen_attention(..., validate=False)`` with the triton backend tries first: the C++
# fast path's ``attention`` once ``remember`` built it, else ``launch_ready``; both take the
# same arguments and return None for a call they leave to the checked path.
fast_call = launch_ready


def with_image(launch: KeptLaunch) -> KeptLaunch:
    """``launch`` with its ``image`` made from its fields (None without the C++ fast path).

    fastpath.cpp reads the kept launch on every call: from one bytes object instead of the
    tuple's ~35 ints, tuples and dtype, the triton pipeline's attention call cost 1.7-4.0 µs
    less inside the eager forward (H100, DeiT-B 224 BS 1 and 4: three A/Bs against the tuple
    in one process, each batch resolved in two of them; docs/pipeline.md), where the whole call
    costs 8-12 µs over none."""
    module = fastpath.module()
    return launch._replace(image=None if module is None else module.image(launch))


def kept_launch(call, qkv: torch.Tensor) -> torch.Tensor | None:
    """Launch ``call._launch`` (a ``LayoutAttention``'s KeptLaunch) on qkv's data,
    ``call.cu_seqlens`` and ``call.max_seqlen`` -> the launch's ``out``; None when no launch
    is kept, qkv is not exactly a tensor of its ``key``, ``call.max_seqlen`` is not an int of
    its ``span`` up to qkv's rows or ``call.cu_seqlens`` not an int32 tensor of ``cu_len``
    with unit stride on qkv's device, a launch hook is installed, the device is not current
    or qkv's data pointer is not 16-byte aligned (the caller then takes the checked call).
    Another max_seqlen of the span launches the kept kernel over its own grid.
    fastpath.cpp's ``layout`` does the same, and ``layout_call`` is it once built."""
    launch = call._launch
    if launch is None or type(qkv) is not torch.Tensor:
        return None
    cu, dev, max_seqlen = call.cu_seqlens, qkv.get_device(), call.max_seqlen
    if (
        (qkv.shape, qkv.stride(), qkv.dtype, dev) != launch.key
        or qkv.is_neg()
        or type(max_seqlen) is not int
        or not launch.span[0] <= max_seqlen <= launch.span[1] or max_seqlen > qkv.shape[0]
        or type(cu) is not torch.Tensor or cu.dtype is not torch.int32
        or cu.shape != (launch.cu_len,) or (launch.cu_len > 1 and cu.stride(0) != 1)
        or cu.get_device() != dev
        or not (_launch._SINGLE_DEVICE or dev == _launch._current_device())
        or _launch._hooks_active()
    ):  # fmt: skip
        return None
    p = qkv.data_ptr()
    if p & 15:
        return None
    grid_x, scalars = launch.grid_x, launch.scalars
    if max_seqlen != launch.max_seqlen:  # the same kernel over another grid
        num_m_blocks, grid_x = grid_of(max_seqlen, launch.block_m, launch.cu_len - 1,
                                       scalars[9])  # fmt: skip
        if grid_x > MAX_GRID:
            return None
        scalars = (*scalars[:10], num_m_blocks)
    if grid_x:
        launch.direct(grid_x, 1, 1, _launch._raw_stream(dev), p, p + launch.k_offset,
                      p + launch.v_offset, launch.out_ptr, cu.data_ptr(), *scalars)  # fmt: skip
    return launch.out


layout_call = kept_launch
