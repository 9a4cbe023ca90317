"""Bidirectional ragged attention over packed tokens: kernel -> launch config -> launcher.

One program per (query tile, sequence, head), flattened into a 1-D grid with the query tile
fastest so that programs sharing a sequence's K/V run together and hit L2. Short batches on
sm_90 and later launch per class (``config.choice``: by length bucket and batch x heads) the
one-tile kernel (3-D grid) or the loop kernel, as programmatic dependent launches (both in
forward.py). Each program of the loop walks the sequence's key tiles with the FlashAttention-2
online softmax in base 2 (``exp2``, the scale pre-multiplied by log2(e)), accumulates in fp32
and writes the input dtype.

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

from . import fastpath, launch
from .config import (
    MAX_LENGTH,
    AttentionConfig,
    attention_config,  # noqa: F401  (imported from here by callers)
    capability_of,
    choice,
    classes,
    config_for,
    length_span,
)
from .forward import onetile_kernel, specloop_kernel, varlen_fwd_kernel
from .kept import KeptLaunch, ready_spans
from .launch import Launcher, specializable

LOG2E = 1.4426950408889634


_launcher = Launcher(varlen_fwd_kernel)
_onetile_launcher = Launcher(onetile_kernel)
_specloop_launcher = Launcher(specloop_kernel)


def interpreted() -> bool:
    """Whether the kernel runs in the Triton interpreter (TRITON_INTERPRET=1 set before triton
    was imported): on the CPU, without bfloat16."""
    return _launcher.interpreted


@dataclass(frozen=True, eq=False)  # hashed by identity: the Launcher key, one per shape
class Plan:
    """Everything about a launch that does not change between calls of the same shape."""

    config: AttentionConfig
    constexprs: dict
    device_index: int  # -1 on the CPU (the interpreter)
    launcher: Launcher  # the loop kernel's, the one-tile kernel's or specloop's (config.kind)
    grid3: bool  # the 3-D grid (query tiles, heads, sequences): onetile, specloop, cfg.grid3
    pdl: int  # a programmatic dependent launch (config.pdl; 0 on the CPU)
    span: tuple  # (lo, hi): the max_seqlens this plan serves
    pairs: tuple  # (lo, hi): the batch x heads it serves


# (device, dtype, head_dim, max_seqlen, pairs, config override) -> Plan: one lookup a call.
_plans: dict[tuple, Plan] = {}
# (device, dtype, head_dim, config, spans) -> Plan: one Plan, so one Launcher entry and one
# compiled kernel, for every max_seqlen and pair count of a class; a new one compiles nothing.
_plan_of: dict[tuple, Plan] = {}


def _make_plan(device_index, dtype, head_dim, max_seqlen, pairs, config) -> Plan:
    chosen, span, pair_span = choice(head_dim, max_seqlen, pairs, dtype,
                                     capability_of(device_index))  # fmt: skip
    cfg = config or chosen or config_for(head_dim, max_seqlen, dtype, device_index)
    if config is not None:  # an override: the table's spans, for any batch
        span, pair_span = length_span(max_seqlen), (0, MAX_LENGTH)
        if cfg.kind == "specloop":  # its key tiles are its length bucket's: a plan a bucket
            hi = triton.next_power_of_2(max(max_seqlen, 1))
            span = (hi // 2 + 1, hi)
    key = (device_index, dtype, head_dim, cfg, span, pair_span)
    plan = _plan_of.get(key)
    if plan is not None:
        return plan
    onetile = cfg.kind == "onetile"
    specloop = cfg.kind == "specloop"
    pdl = cfg.pdl if device_index >= 0 else 0  # the interpreter has no grid dependency control
    constexprs = {
        "HEAD_DIM": head_dim,
        "BLOCK_D": max(16, triton.next_power_of_2(head_dim)),
        "BLOCK_M": cfg.block_m,
        "BLOCK_N": cfg.block_n,
        "IEEE_DOT": dtype == torch.float32,
    }
    if onetile:
        constexprs |= {"SPECULATE": True, "GRID3": True, "PDL": pdl}
        launcher = _onetile_launcher
    elif specloop:  # the key tiles of the span's longest max_seqlen, unrolled on a good guess
        constexprs |= {"SUB_M": cfg.block_m, "KEYS": max(cfg.block_n, span[1]),
                       "SPECULATE": True, "FOLD": False, "FULL_SKIP": False, "V_SPEC": False,
                       "PDL": pdl}  # fmt: skip
        launcher = _specloop_launcher
    else:
        constexprs |= {"DELAY_CYCLES": cfg.delay_cycles, "PDL": pdl, "GRID3": cfg.grid3,
                       "LEAN": cfg.lean, "EARLY": cfg.early, "CTAS": cfg.ctas}  # fmt: skip
        launcher = _launcher
    plan = _plan_of[key] = Plan(cfg, constexprs, device_index, launcher,
                                onetile or specloop or cfg.grid3, pdl, span,
                                pair_span)  # fmt: skip
    return plan


# (device, dtype, head_dim) -> the plans of every class (``config.classes``), made and their
# kernels compiled at the first call of that head_dim and dtype on that device (warm_classes).
_class_plans: dict[tuple, tuple[Plan, ...]] = {}


def warm_classes(q, k, v, out, cu_seqlens, scalars, fast) -> tuple[Plan, ...]:
    """At the first call of q's (device, dtype, head_dim), after its launch: plan every class
    ``config.classes`` gives (each length bucket and batch x heads span) and compile each
    plan's kernel without launching it (``Launcher.prepare``, with this call's arguments: the
    same specialization), so that no later call of this head_dim and dtype compiles, whatever
    its max_seqlen and batch; ``remember`` then lets the fast paths take them all. The
    compiles move to the first call of a head_dim, which compiles anyway. -> the plans."""
    key = (q.get_device(), q.dtype, q.shape[2])
    plans = _class_plans.get(key)
    if plans is not None:
        return plans
    made: list[Plan] = []
    for max_seqlen, pairs in classes(key[2], key[1], capability_of(key[0])):
        plan_key = (*key, max_seqlen, pairs, None)
        plan = _plans.get(plan_key)
        if plan is None:
            plan = _plans[plan_key] = _make_plan(*plan_key)
        if plan in made:
            continue
        made.append(plan)
        cfg = plan.config
        plan.launcher.prepare(plan, (q, k, v, out, cu_seqlens), scalars, plan.constexprs,
                              cfg.num_warps, cfg.num_stages, plan.device_index, fast,
                              pdl=bool(plan.pdl), ctas=cfg.ctas)  # fmt: skip
    plans = _class_plans[key] = tuple(made)
    return plans


MAX_GRID = 2**31 - 1  # programs of a 1-D grid


def grid_of(max_seqlen: int, block_m: int, batch: int, heads: int) -> tuple[int, int]:
    """(num_m_blocks, programs): ``block_m``-row query tiles of ``max_seqlen`` per sequence
    and head, times ``batch`` x ``heads`` (fastpath.cpp's ``grid_of``)."""
    num_m_blocks = -(-max_seqlen // block_m)
    return num_m_blocks, num_m_blocks * batch * heads


def guess_len(total: int, batch: int, max_seqlen: int) -> int:
    """The 3-D grid kernels' guess of every sequence's length: ``max_seqlen`` where the batch
    is uniform (``total == batch x max_seqlen``: no sequence is longer than max_seqlen, so
    each is that long, unless capacity packing left rows past cu_seqlens[-1]; the kernels
    check the guess against cu_seqlens), else 0: no guess (specloop then loads nothing
    before cu_seqlens; the one-tile kernel guesses start 0 and loads again)."""
    return max_seqlen if batch and total == batch * max_seqlen else 0


def grid_and_ints(grid3: bool, max_seqlen: int, block_m: int, batch: int, heads: int,
                  total: int) -> tuple[tuple[int, int, int], tuple[int, int]]:  # fmt: skip
    """(grid, the kernel's last two ints): the loop's 1-D grid and (heads, num_m_blocks), or
    the 3-D grid kernels' (query tiles, heads, sequences) and (total_tokens, guess_len)."""
    num_m_blocks, programs = grid_of(max_seqlen, block_m, batch, heads)
    if grid3:
        grid = (num_m_blocks, heads, batch) if programs else (0, 1, 1)
        return grid, (total, guess_len(total, batch, max_seqlen))
    return (programs, 1, 1), (heads, num_m_blocks)


def launch_args(q, k, v, out, cu_seqlens, max_seqlen, softmax_scale, config=None):
    """(plan, grid, scalar args, fast) for one call; ``config`` overrides the table."""
    sqt, sqh, _ = q.stride()
    skt, skh, _ = k.stride()
    svt, svh, _ = v.stride()
    sot, soh, _ = out.stride()
    total, heads, head_dim = q.shape
    batch = cu_seqlens.shape[0] - 1
    plan_key = (q.get_device(), q.dtype, head_dim, max_seqlen, batch * heads, config)
    plan = _plans.get(plan_key)
    if plan is None:
        plan = _plans[plan_key] = _make_plan(*plan_key)
    grid, ints = grid_and_ints(plan.grid3, max_seqlen, plan.config.block_m, batch, heads, total)
    scalars = (softmax_scale * LOG2E, sqt, sqh, skt, skh, svt, svh, sot, soh, *ints)
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
    plan.launcher.launch(
        plan, grid, (q, k, v, out, cu_seqlens), scalars, plan.constexprs,
        cfg.num_warps, cfg.num_stages, plan.device_index, fast, pdl=bool(plan.pdl),
        ctas=cfg.ctas,
    )  # fmt: skip
    if config is None and (plan.device_index, q.dtype, q.shape[2]) not in _class_plans:
        warm_classes(q, k, v, out, cu_seqlens, scalars, fast)
    return out


# Bumped by forget_plans: launches kept from before it (ragged.LayoutAttention) are dropped.
epoch = 0


def forget_plans() -> None:
    """Drop every plan, its direct launch and fast-path entry: the next calls re-plan (after a
    sweep, tuning.py)."""
    global epoch
    _plans.clear()
    _plan_of.clear()
    _class_plans.clear()
    for launcher in (_launcher, _onetile_launcher, _specloop_launcher):
        launcher.forget()
    ready_spans.clear()
    epoch += 1


def ready_entry(device_index, dtype, head_dim, max_seqlen, pairs) -> tuple | None:
    """The ``ready_spans`` span that serves this max_seqlen and batch x heads: (lo, hi, direct,
    block_m, default scale, spec, pairs_lo, pairs_hi, grid3), or None."""
    for span in ready_spans.get((device_index, dtype, head_dim), ()):
        if span[0] <= max_seqlen <= span[1] and span[6] <= pairs <= span[7]:
            return span
    return None


def prepare(q, k, v, out, cu_seqlens, max_seqlen, softmax_scale):
    """-> (direct launch, grid_x, scalars, block_m, span, grid3) that launch this call again
    (and any max_seqlen of ``span`` with the grid of ``block_m``-row tiles), or None, for a
    call that just passed ``varlen_attention``'s checks (the Launcher holds its kernel; the
    grid is not empty; Triton's stride specialization and 16-byte alignment of q and out
    hold). ``grid_x`` is the grid's x: the 3-D grid's y and z are heads and sequences."""
    total, heads, head_dim = q.shape
    batch = cu_seqlens.shape[0] - 1
    entry = ready_entry(q.get_device(), q.dtype, head_dim, max_seqlen, batch * heads)
    if entry is None:
        return None
    grid, ints = grid_and_ints(entry[8], max_seqlen, entry[3], batch, heads, total)
    strides = (*q.stride()[:2], *k.stride()[:2], *v.stride()[:2], *out.stride()[:2])
    if not specializable(*strides) or not grid[0] or (q.data_ptr() | out.data_ptr()) & 15:
        return None
    scalars = (softmax_scale * LOG2E, *strides, *ints)
    return entry[2], grid[0], scalars, entry[3], entry[:2], entry[8]


def remember(q: torch.Tensor, max_seqlen: int, cu_seqlens: torch.Tensor) -> None:
    """After a checked ``varlen_attention`` call launched: let ``fast_call`` take later calls
    of q's device, dtype and head_dim, any ``max_seqlen`` and batch x heads of this one's
    class (``config.choice``), once the Launcher holds the compiled kernel for direct launch,
    and make the C++ fast paths ``fast_call`` and ``layout_call`` (built at the first such
    call on this machine: ``fastpath.module()``)."""
    global fast_call, layout_call
    key = (q.get_device(), q.dtype, q.shape[2])
    pairs = (cu_seqlens.shape[0] - 1) * q.shape[1]
    plan = _plans.get((*key, max_seqlen, pairs, None))
    direct = None if plan is None or key[0] < 0 else plan.launcher.direct(plan)
    if direct is None:
        return
    module = fastpath.module()  # built once per machine, then cached (functools.cache)
    if module is not None:
        fast_call, layout_call = module.attention, module.layout
    scale = (1.0 / math.sqrt(key[2])) * LOG2E
    # this call's class first, then every class warm_classes compiled at the first call
    for each in (plan, *_class_plans.get(key, ())):
        each_direct = each.launcher.direct(each)
        if each_direct is not None and ready_entry(*key, each.span[0], each.pairs[0]) is None:
            span = (*each.span, each_direct, each.config.block_m, scale,
                    launch_spec(each_direct), *each.pairs, each.grid3)  # fmt: skip
            ready_spans[key] = (*ready_spans.get(key, ()), span)


# The attention kernels' runtime parameter types after their four data pointers, as
# ``c_launch.param_types`` reads them: what fastpath.cpp passes to cuLaunchKernel.
_PARAMS_TAIL = ("*i32", "fp32") + ("i32",) * 10


def launch_spec(direct) -> tuple[int, int, int, int] | None:
    """(CUfunction, threads per block, shared bytes, pdl) of a ``c_launch`` launch of this
    kernel, for fastpath.cpp to launch itself (pdl 1: with the programmatic-serialisation
    attribute, through cuLaunchKernelEx); None for Triton's launcher (it then calls
    ``direct``)."""
    types = getattr(direct, "types", None)
    if types is None or len(types) != 16 or types[4:] != _PARAMS_TAIL:
        return None
    if not all(t.startswith("*") for t in types[:4]):
        return None
    return (*direct.args, int(getattr(direct, "pdl", False)))


def launch_ready(q, k, v, cu_seqlens, max_seqlen, softmax_scale, out):
    """The whole ``varlen_attention(..., validate=False)`` call in one function, for a call
    whose (device, dtype, head_dim) and a max_seqlen and batch x heads of the same class was
    launched directly before -> ``out`` (or a new output), or None when anything differs
    from the common case (the caller then takes the checked path, which says what is wrong
    or launches through the Launcher).

    The same checks as ``ragged.attention.check_types`` and ``Launcher.launch`` hold when it
    launches; the ones a ``ready_spans`` entry implies (dtype, head_dim range, a CUDA device,
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
    cu_shape = cu_seqlens.shape
    if len(cu_shape) != 1 or cu_shape[0] < 1:
        return None
    batch = cu_shape[0] - 1
    entry = ready_entry(dev, dtype, head_dim, max_seqlen, batch * heads)
    if (
        entry is None
        or k.dtype is not dtype or v.dtype is not dtype
        or k.get_device() != dev or v.get_device() != dev or cu_seqlens.get_device() != dev
        or cu_seqlens.dtype is not torch.int32
        or (cu_shape[0] > 1 and cu_seqlens.stride(0) != 1)
        or q.is_neg() or k.is_neg() or v.is_neg()
        or max_seqlen > total
        or not (launch.SINGLE_DEVICE or dev == launch.current_device())
        or launch.hooks_active()
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
    direct, block_m, default_scale, grid3 = entry[2], entry[3], entry[4], entry[8]
    (gx, gy, gz), (n0, n1) = grid_and_ints(grid3, max_seqlen, block_m, batch, heads, total)
    if gx * gy * gz > MAX_GRID or gy > 65535 or gz > 65535:  # the checked path says so
        return None
    if gx:
        qk_scale = default_scale if softmax_scale is None else softmax_scale * LOG2E
        direct(gx, gy, gz, launch.raw_stream(dev), pq, pk, pv, po, cu_seqlens.data_ptr(),
               qk_scale, sqt, sqh, skt, skh, svt, svh, sot, soh, n0, n1)  # fmt: skip
    return out


# What ``varlen_attention(..., validate=False)`` with the triton backend tries first: the C++
# fast path's ``attention`` once ``remember`` built it, else ``launch_ready``; both take the
# same arguments and return None for a call they leave to the checked path.
fast_call = launch_ready


def kept_grid(kept: KeptLaunch, max_seqlen: int) -> tuple | None:
    """(grid_x, grid_y, grid_z, scalars) of ``kept`` at ``max_seqlen`` (of its span): its own
    for its max_seqlen, else the same kernel over the grid of ``block_m``-row tiles; None
    beyond a 1-D grid's programs."""
    scalars = kept.scalars
    batch, heads = kept.cu_len - 1, kept.key[0][2]
    if kept.grid3:
        if max_seqlen == kept.max_seqlen:
            return kept.grid_x, heads, batch, scalars
        total = scalars[9]
        guess = guess_len(total, batch, max_seqlen)
        return -(-max_seqlen // kept.block_m), heads, batch, (*scalars[:10], guess)
    if max_seqlen == kept.max_seqlen:
        return kept.grid_x, 1, 1, scalars
    num_m_blocks, grid_x = grid_of(max_seqlen, kept.block_m, batch, heads)
    if grid_x > MAX_GRID:
        return None
    return grid_x, 1, 1, (*scalars[:10], num_m_blocks)


def with_image(kept: KeptLaunch) -> KeptLaunch:
    """``kept`` with its ``image`` made from its fields (None without the C++ fast path).

    fastpath.cpp reads the kept launch on every call: from one bytes object instead of the
    tuple's ~35 ints, tuples and dtype, the triton pipeline's attention call cost 1.7-4.0 µs
    less inside the eager forward (H100, DeiT-B 224 BS 1 and 4: three A/Bs against the tuple
    in one process, each batch resolved in two of them; docs/pipeline.md), where the whole call
    costs 8-12 µs over none."""
    module = fastpath.module()
    return kept._replace(image=None if module is None else module.image(kept))


def kept_launch(call, qkv: torch.Tensor) -> torch.Tensor | None:
    """Launch ``call.kept`` (a ``LayoutAttention``'s KeptLaunch) on qkv's data,
    ``call.cu_seqlens`` and ``call.max_seqlen`` -> the launch's ``out``; None when no launch
    is kept, qkv is not exactly a tensor of its ``key``, ``call.max_seqlen`` is not an int of
    its ``span`` up to qkv's rows or ``call.cu_seqlens`` not an int32 tensor of ``cu_len``
    with unit stride on qkv's device, a launch hook is installed, the device is not current
    or qkv's data pointer is not 16-byte aligned (the caller then takes the checked call).
    Another max_seqlen of the span launches the kept kernel over its own grid.
    fastpath.cpp's ``layout`` does the same, and ``layout_call`` is it once built."""
    kept = call.kept
    if kept is None or type(qkv) is not torch.Tensor:
        return None
    cu, dev, max_seqlen = call.cu_seqlens, qkv.get_device(), call.max_seqlen
    if (
        (qkv.shape, qkv.stride(), qkv.dtype, dev) != kept.key
        or qkv.is_neg()
        or type(max_seqlen) is not int
        or not kept.span[0] <= max_seqlen <= kept.span[1] or max_seqlen > qkv.shape[0]
        or type(cu) is not torch.Tensor or cu.dtype is not torch.int32
        or cu.shape != (kept.cu_len,) or (kept.cu_len > 1 and cu.stride(0) != 1)
        or cu.get_device() != dev
        or not (launch.SINGLE_DEVICE or dev == launch.current_device())
        or launch.hooks_active()
    ):  # fmt: skip
        return None
    p = qkv.data_ptr()
    if p & 15:
        return None
    grid = kept_grid(kept, max_seqlen)
    if grid is None:
        return None
    gx, gy, gz, scalars = grid
    if gx:
        kept.direct(gx, gy, gz, launch.raw_stream(dev), p, p + kept.k_offset,
                    p + kept.v_offset, kept.out_ptr, cu.data_ptr(), *scalars)  # fmt: skip
    return kept.out


layout_call = kept_launch
