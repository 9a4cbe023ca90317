"""Where the attention kernel's GPU time goes at short batches: the grids of the default path's
kernels (and of other tile shapes) doing less, timed with the kernels in one process by
``experiments.kernel_floor --parts`` (docs/kernel.md, "Floors of the grid", 2026-11-27).

Each arm is a copy of a kernel of ``ragged/kernels/forward.py`` with one switch, ``PART``:

  * ``zeros`` (0): the program reads its sequence's bounds from cu_seqlens and stores zeros
    to its rows: the launch, the grid and the dependent cu_seqlens round;
  * ``loads`` (1): as the kernel, q, k and v tiles loaded (every key tile the kernel loads)
    and a sum of them stored, no dot and no softmax: the load-store floor of that grid;
  * ``dots`` (2): both dots (q k^T, then the scores as fp16 times v), no softmax;
  * ``full`` (3): the kernel (checked against the oracle like any candidate).

and candidates on top of the full kernel: ``mma2`` (Triton's Ampere ``mma.sync`` with register
operands instead of Hopper's ``wgmma`` from shared memory: compiled with ``DISABLE_MMA_V3``),
``f16exp`` (the softmax's exp2 as ``ex2.approx.f16x2``: two at once, p already fp16), ``h2``
(one program for two heads of a query tile: every load of both issued before either computes).

The eighth session (docs/kernel.md, "Why the loads cost what they do") added: ``loadsum`` (4),
every load of ``full`` summed elementwise in one layout, the loads' floor without the
cross-thread sums that ``loads`` pays; the TMA copies of the loop and the one-tile kernel
(``loop_tma_kernel``, ``onetile_tma_kernel``: q, k and v through host tensor descriptors);
the loop with other eviction policies, cache modifiers and layout hints on its loads (the same
PTX, it turned out); and ``probe_kernel``, programs pulling N KB each from L2 with 16-byte loads
(the inputs unused): what L2 delivers to a grid of that size. ``--load-report`` counts the
global loads and stores of the default path's kernels in PTX and SASS without a GPU, compiled
as the launch path specializes them; ``--live-report`` (GPU) those Triton's JIT compiled for
``ragged.varlen_attention``.

The ninth session (docs/kernel.md, "Fewer instructions a key tile") added switches of
``loop_parts_kernel`` that cut the softmax's instructions (``FFMA``, ``LASTMASK``, ``SKIP0``,
``RCP``; all four: "lean"), its 3-D grid (``GRID3``), half its exp2 by a cubic on the FMA
units (``POLY``), and "lean" one-tile arms (``LEAN``: the scale in the fma, the reciprocal).
The tenth session (docs/kernel.md, "Past three waves, and one program a pair") added arms, no
switch: one program a pair at 65-128 keys (128 query rows, 4 and 8 warps), and the 3-stage
loop with the leaner softmax without PDL and on the 3-D grid. The eleventh session
(docs/kernel.md, "The bounds before the wait") added ``EARLY`` to the loop and one-tile copies
(cu_seqlens read before ``griddepcontrol.wait``, unchecked), ``loop_checked_kernel`` (the same
read checked after the wait, three kinds of second read; issued once q's load is, as
``forward.varlen_fwd_kernel``'s ``EARLY`` now does, it is as fast as unchecked and exact),
and "kernel" arms: the default path's
``forward.varlen_fwd_kernel`` launched with a given configuration. The twelfth session
(docs/kernel.md, "The early read on the 1-D grid") added ``ctas``: a "kernel" arm at most that
many programs an SM, through its compiled function's preferred shared-memory carveout
(``AttentionConfig.ctas``, ``launch.occupy``: since the thirteenth session the default path's
own); the arms of the early read on the 1-D grid ran from commit 17376af.

Only ``full`` arms produce attention; the others are floors and are not checked (their output
is not attention). Nothing in ``ragged`` imports this module.

    python -m experiments.kernel_parts --out parts.json   # = kernel_floor --parts (GPU)
    python -m experiments.kernel_parts --same-ptx [89]    # the one-tile kernel's A/B in PTX
    python -m experiments.kernel_parts --load-report [90] # loads/stores in PTX and SASS, no GPU
    python -m experiments.kernel_parts --live-report      # the same, as the launch path compiled
    python -m experiments.kernel_parts --regs-report [90] # the loop classes' registers, no GPU
    python -m experiments.kernel_parts --carveout-report  # programs an SM by carveout, on the GPU
"""

# ruff: noqa: SIM108  (a verbatim copy of a kernel of ragged/kernels, whose lint ignores it)
from __future__ import annotations

import os
import sys

if "--cpu-smoke" in sys.argv:  # before triton is first imported (as kernel_floor does)
    os.environ.setdefault("TRITON_INTERPRET", "1")

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from ragged.kernels import attention, forward
from ragged.kernels.config import AttentionConfig

PART_NAMES = {"zeros": 0, "loads": 1, "dots": 2, "full": 3, "loadsum": 4}  # a Part's ``part``
ZEROS, LOADS, DOTS, FULL, LOADSUM = (tl.constexpr(i) for i in range(5))  # the same, in kernels


@triton.jit
def _exp2(x, F16EXP: tl.constexpr):
    """2^x: ``ex2.approx.f16x2`` on x rounded to fp16 (two an instruction, fp16 out) where
    F16EXP, else the kernel's fp32 ``exp2``."""
    if F16EXP:
        return tl.inline_asm_elementwise("ex2.approx.f16x2 $0, $1;", "=r,r", [x.to(tl.float16)],
                                         dtype=tl.float16, is_pure=True, pack=2)  # fmt: skip
    else:
        return tl.math.exp2(x)


@triton.jit
def _exp2_poly(x):
    """2^x on the FMA and integer units, no MUFU (FlashAttention-3/4's trick): the integer
    part by the 1.5 x 2^23 rounding add, 2^fraction by a cubic, the integer added into the
    exponent bits. x below -126 gives a value under 2^-125 where exp2 gives 0 (flushed in fp16)."""
    x = tl.maximum(x, -126.0)
    t = x + 12582912.0  # 1.5 x 2^23: the sum's low mantissa bits hold round(x)
    f = x - (t - 12582912.0)
    p = 0.05517166 * f + 0.24261112  # minimax cubic for 2^f on [-0.5, 0.5]: relative error
    p = p * f + 0.69326097  # 7.5e-5 at most (p, rounded to fp16 for the second dot, carries
    p = p * f + 0.99992806  # up to 2.4e-4 of its own)
    bits = p.to(tl.int32, bitcast=True) + (t.to(tl.int32, bitcast=True) << 23)
    return bits.to(tl.float32, bitcast=True)


@triton.jit
def _exp2_half_poly(x, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """2^x, the even columns on MUFU (``exp2``), the odd ones by ``_exp2_poly``: a column
    pair sits in one thread's registers, so the split and the join move no data."""
    a, b = tl.split(tl.reshape(x, [BLOCK_M, BLOCK_N // 2, 2]))
    return tl.reshape(tl.join(tl.math.exp2(a), _exp2_poly(b)), [BLOCK_M, BLOCK_N])


@triton.jit(
    do_not_specialize=["cu_seqlens", "num_heads", "num_m_blocks"],
    do_not_specialize_on_alignment=["cu_seqlens"],
)
def loop_parts_kernel(
    Q, K, V, O, cu_seqlens, qk_scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    num_heads, num_m_blocks,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PDL: tl.constexpr, PART: tl.constexpr, MMA2: tl.constexpr,
    F16EXP: tl.constexpr, KV_EVICT: tl.constexpr = "", KV_CACHE: tl.constexpr = "",
    HINTS: tl.constexpr = False, FFMA: tl.constexpr = False, LASTMASK: tl.constexpr = False,
    SKIP0: tl.constexpr = False, RCP: tl.constexpr = False, GRID3: tl.constexpr = False,
    POLY: tl.constexpr = False, EARLY: tl.constexpr = False,
):  # fmt: skip
    """``forward.varlen_fwd_kernel`` (fp16, 1-D grid) doing ``PART`` of its work. ``MMA2`` only
    tells the cache apart (the launcher compiles it with DISABLE_MMA_V3). ``PDL`` 3: the next
    kernel may launch once every program has issued its q load (between 1 and 2).
    ``KV_EVICT`` / ``KV_CACHE``: the k and v loads' ``eviction_policy`` / ``cache_modifier``
    ("": the kernel's); ``HINTS``: ``tl.multiple_of`` / ``tl.max_contiguous`` on the offsets.
    ``LOADSUM``: q, k and v loaded as ``FULL`` loads them (k untransposed) and summed
    elementwise, in one layout: the loads' floor without the cross-thread sums of ``LOADS``.
    The ninth session's (fewer instructions a key tile, each exact): ``FFMA`` the scale in the
    exponent's fma (the mask and the row max on the raw scores, the max scaled once a row);
    ``LASTMASK`` the key mask only on a tile that crosses the sequence's end; ``SKIP0`` no
    rescale (alpha, acc x alpha, l x alpha) on the first key tile; ``RCP`` one reciprocal a row
    and a multiply for the final division; ``GRID3`` a 3-D grid (query tile, head, sequence: no
    integer divisions before the cu_seqlens load); ``POLY`` every second exp2 by a polynomial
    on the FMA units (``_exp2_poly``), the others on MUFU. The eleventh session's ``EARLY``:
    cu_seqlens read before ``griddepcontrol.wait`` (valid only where the kernel this one
    depends on did not write it), so that its round overlaps the previous kernel; the wait then
    comes before the first load of q, k or v."""
    if PDL == 1:
        forward.gdc_launch_dependents()
    m_block, head, seq = forward.program_tile(GRID3, num_m_blocks, num_heads)
    if PDL and not EARLY:
        forward.gdc_wait()
    seq_start = tl.load(cu_seqlens + seq)
    seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
    m_start = m_block * BLOCK_M
    if m_start < seq_len:
        if PDL and EARLY:  # a program with nothing to do exits without waiting
            forward.gdc_wait()
        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_n = tl.arange(0, BLOCK_N)
        offs_d = tl.arange(0, BLOCK_D)
        if HINTS:
            offs_d = tl.max_contiguous(tl.multiple_of(offs_d, BLOCK_D), BLOCK_D)
        d_ok = offs_d < HEAD_DIM
        m_ok = offs_m < seq_len
        row0 = seq_start.to(tl.int64)
        head64 = head.to(tl.int64)
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        if PART == LOADSUM:  # every load of FULL, summed elementwise in one layout
            q_rows = Q + (row0 + offs_m[:, None]) * stride_qt + head64 * stride_qh
            acc += tl.load(q_rows + offs_d[None, :], mask=m_ok[:, None], other=0.0).to(tl.float32)
            kvsum = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
            for n_start in range(0, seq_len, BLOCK_N):
                offs_kn = n_start + tl.arange(0, BLOCK_N)
                n_ok = offs_kn < seq_len
                kv_off = offs_kn[:, None] * stride_kt + offs_d[None, :]
                k = tl.load(K + row0 * stride_kt + head64 * stride_kh + kv_off,
                            mask=n_ok[:, None], other=0.0, eviction_policy=KV_EVICT,
                            cache_modifier=KV_CACHE)  # fmt: skip
                v = tl.load(V + row0 * stride_vt + head64 * stride_vh + offs_kn[:, None]
                            * stride_vt + offs_d[None, :], mask=n_ok[:, None], other=0.0,
                            eviction_policy=KV_EVICT, cache_modifier=KV_CACHE)  # fmt: skip
                kvsum += k.to(tl.float32) + v.to(tl.float32)
            if BLOCK_M == BLOCK_N:
                acc += kvsum
            else:  # one program a pair: one sum at the end
                acc += tl.sum(kvsum, 0)[None, :]
            if PDL == 3:
                forward.gdc_launch_dependents()
        elif PART != ZEROS:
            q_ptrs = Q + (row0 + offs_m[:, None]) * stride_qt + head64 * stride_qh + offs_d[None, :]
            q = tl.load(q_ptrs, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
            k_base = K + row0 * stride_kt + head64 * stride_kh
            v_base = V + row0 * stride_vt + head64 * stride_vh
            m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
            l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
            ksum = tl.zeros([BLOCK_D, BLOCK_N], dtype=tl.float32)
            vsum = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float32)
            if PDL == 3:  # the next kernel may launch once every program issued its q load
                forward.gdc_launch_dependents()
            for n_start in range(0, seq_len, BLOCK_N):
                offs_kn = n_start + offs_n
                n_ok = offs_kn < seq_len
                k = tl.load(k_base + offs_kn[None, :] * stride_kt + offs_d[:, None],
                            mask=n_ok[None, :] & d_ok[:, None], other=0.0,
                            eviction_policy=KV_EVICT, cache_modifier=KV_CACHE)  # fmt: skip
                v = tl.load(v_base + offs_kn[:, None] * stride_vt + offs_d[None, :],
                            mask=n_ok[:, None] & d_ok[None, :], other=0.0,
                            eviction_policy=KV_EVICT, cache_modifier=KV_CACHE)  # fmt: skip
                if PART == LOADS:
                    ksum += k.to(tl.float32)
                    vsum += v.to(tl.float32)
                elif PART == DOTS:
                    s = tl.dot(q, k)
                    acc += tl.dot(s.to(v.dtype), v)
                elif FFMA or LASTMASK or SKIP0 or POLY:
                    s = tl.dot(q, k)
                    if LASTMASK:  # a tile inside the sequence has no key to mask
                        if n_start + BLOCK_N > seq_len:
                            s = tl.where(n_ok[None, :], s, float("-inf"))
                    else:
                        s = tl.where(n_ok[None, :], s, float("-inf"))
                    if FFMA:  # qk_scale > 0: max(s) x scale is max(s x scale), rounded alike
                        m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
                        x = tl.fma(s, qk_scale, -m_new[:, None])
                    else:
                        s = s * qk_scale
                        m_new = tl.maximum(m_i, tl.max(s, 1))
                        x = s - m_new[:, None]
                    if POLY:
                        p = _exp2_half_poly(x, BLOCK_M, BLOCK_N)
                    else:
                        p = tl.math.exp2(x)
                    if SKIP0:  # on the first tile m_i is -inf: alpha 0, acc and l_i 0
                        if n_start > 0:
                            alpha = tl.math.exp2(m_i - m_new)
                            l_i = l_i * alpha
                            acc = acc * alpha[:, None]
                    else:
                        alpha = tl.math.exp2(m_i - m_new)
                        l_i = l_i * alpha
                        acc = acc * alpha[:, None]
                    l_i += tl.sum(p, 1)
                    acc = tl.dot(p.to(v.dtype), v, acc)
                    m_i = m_new
                else:
                    s = tl.dot(q, k)
                    s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
                    m_new = tl.maximum(m_i, tl.max(s, 1))
                    p = _exp2(s - m_new[:, None], F16EXP)
                    alpha = tl.math.exp2(m_i - m_new)
                    l_i = l_i * alpha + tl.sum(p.to(tl.float32), 1)
                    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                    m_i = m_new
            if PART == LOADS:
                acc = q.to(tl.float32) + tl.sum(ksum, 1)[None, :] + tl.sum(vsum, 0)[None, :]
            elif PART == FULL:
                if RCP:
                    acc = acc * (1.0 / l_i)[:, None]
                else:
                    acc = acc / l_i[:, None]
        o_ptrs = O + (row0 + offs_m[:, None]) * stride_ot + head64 * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])
    if PDL == 2:
        forward.gdc_launch_dependents()


@triton.jit(do_not_specialize=["cu_seqlens", "total", "guess_len"],
            do_not_specialize_on_alignment=["cu_seqlens"])  # fmt: skip
def loop_checked_kernel(
    Q, K, V, O, cu_seqlens, qk_scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    total, guess_len,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PDL: tl.constexpr, LEAN: tl.constexpr, CHECK: tl.constexpr,
    ONCE: tl.constexpr = False,
):  # fmt: skip
    """The loop on the 3-D grid (fp16; the tile ``forward.query_tile``) reading its sequence's
    bounds before ``griddepcontrol.wait`` (bounded to q's rows: a value not yet written
    addresses nothing outside q, k and v), computing its tile from them, reading them again
    after the wait and computing again where they differ (the kernel before wrote them):
    always exact. The second read (the compiler would reuse a plain one) is ``CHECK`` 1
    volatile (``LDG.E.STRONG.SYS``), 2 ``.cg`` (``LDG.E.STRONG.GPU``), 3 plain (``LDG.E``)
    after an early read through ``.cg`` (no L1 line of it to hit); used only after the tile.
    (The same issued in the tile once q's load is: ``forward.varlen_fwd_kernel``'s ``EARLY``,
    the "checked late" arms.) 0: the same code not checked (wrong where the kernel before
    writes cu_seqlens). ``ONCE``: the tile's code once, in a loop
    that runs it again from the second read's bounds where they differ from the ones it used
    (instead of a second copy of it)."""
    if PDL == 1:
        forward.gdc_launch_dependents()
    m_block, head, seq = forward.program_tile(True, 0, 0)
    if CHECK == 3:
        first = tl.load(cu_seqlens + seq, cache_modifier=".cg")
        last = tl.load(cu_seqlens + seq + 1, cache_modifier=".cg")
    else:
        first = tl.load(cu_seqlens + seq)
        last = tl.load(cu_seqlens + seq + 1)
    early_start = tl.minimum(tl.maximum(first, 0), total)
    early_len = tl.minimum(tl.maximum(last - early_start, 0), total - early_start)
    if PDL:
        forward.gdc_wait()
    if CHECK == 1:
        start_now = tl.load(cu_seqlens + seq, volatile=True)
        end_now = tl.load(cu_seqlens + seq + 1, volatile=True)
    elif CHECK == 2:
        start_now = tl.load(cu_seqlens + seq, cache_modifier=".cg")
        end_now = tl.load(cu_seqlens + seq + 1, cache_modifier=".cg")
    elif CHECK == 3:
        start_now = tl.load(cu_seqlens + seq)
        end_now = tl.load(cu_seqlens + seq + 1)
    else:  # CHECK 0: none
        start_now = first
        end_now = last
    m_start = m_block * BLOCK_M
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if ONCE:
        used_start = early_start
        used_len = early_len
        again = True
        while again:
            if m_start < used_len:
                acc, _, _ = forward.query_tile(
                    Q, K, V, qk_scale, used_start.to(tl.int64), used_len, m_start, head,
                    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, HEAD_DIM,
                    BLOCK_D, BLOCK_M, BLOCK_N, False, LEAN, PDL == 3)  # fmt: skip
            again = (start_now != used_start) | (end_now - start_now != used_len)
            used_start = start_now
            used_len = end_now - start_now
    elif m_start < early_len:
        acc, _, _ = forward.query_tile(
            Q, K, V, qk_scale, early_start.to(tl.int64), early_len, m_start, head, stride_qt,
            stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, HEAD_DIM, BLOCK_D, BLOCK_M,
            BLOCK_N, False, LEAN, PDL == 3)  # fmt: skip
    seq_len = end_now - start_now
    # Two branches, as in the code whose SASS was measured; the first: the kernel before
    # wrote the bounds
    if not ONCE and ((start_now != first) | (end_now != last)):  # noqa: SIM102
        if m_start < seq_len:
            acc, _, _ = forward.query_tile(
                Q, K, V, qk_scale, start_now.to(tl.int64), seq_len, m_start, head, stride_qt,
                stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, HEAD_DIM, BLOCK_D,
                BLOCK_M, BLOCK_N, False, LEAN, False)  # fmt: skip
    if m_start < seq_len:
        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        o_ptrs = (O + (start_now.to(tl.int64) + offs_m[:, None]) * stride_ot
                  + head.to(tl.int64) * stride_oh + offs_d[None, :])  # fmt: skip
        tl.store(o_ptrs, acc.to(O.dtype.element_ty),
                 mask=(offs_m < seq_len)[:, None] & (offs_d < HEAD_DIM)[None, :])  # fmt: skip
    if PDL == 2:
        forward.gdc_launch_dependents()


@triton.jit
def _onetile_loads(Q, K, V, head, row, offs_m, offs_n, offs_d, m_ok, n_ok, d_ok, stride_qt,
                   stride_qh, stride_kt, stride_kh, stride_vt, stride_vh):  # fmt: skip
    head64 = head.to(tl.int64)
    q = tl.load(Q + head64 * stride_qh + (row + offs_m[:, None]) * stride_qt + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    k = tl.load(K + head64 * stride_kh + (row + offs_n[None, :]) * stride_kt + offs_d[:, None],
                mask=n_ok[None, :] & d_ok[:, None], other=0.0)  # fmt: skip
    v = tl.load(V + head64 * stride_vh + (row + offs_n[:, None]) * stride_vt + offs_d[None, :],
                mask=n_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    return q, k, v


@triton.jit
def _onetile_finish(q, k, v, O, head, row0, g0, seq_len, offs_m, offs_n, offs_d, d_ok, qk_scale,
                    Q, K, V, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
                    stride_ot, stride_oh, BLOCK_D: tl.constexpr, PART: tl.constexpr,
                    F16EXP: tl.constexpr, LEAN: tl.constexpr = False):  # fmt: skip
    """The one-tile kernel after its speculative loads: again from the true start where the
    guess was wrong, then ``PART`` of the arithmetic, then the store. ``LEAN``: the scale in
    the exponent's fma and one reciprocal a row for the division (the loop's ``FFMA``,
    ``RCP``)."""
    m_ok = offs_m < seq_len
    n_ok = offs_n < seq_len
    if PART == ZEROS:
        acc = q.to(tl.float32)  # q is zeros here
    else:
        if row0 != g0:
            q, k, v = _onetile_loads(Q, K, V, head, row0, offs_m, offs_n, offs_d, m_ok, n_ok,
                                     d_ok, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt,
                                     stride_vh)  # fmt: skip
        v = tl.where(n_ok[:, None], v, 0.0)
        if PART == LOADS:
            acc = (q.to(tl.float32) + tl.sum(k.to(tl.float32), 1)[None, :]
                   + tl.sum(v.to(tl.float32), 0)[None, :])  # fmt: skip
        elif PART == DOTS:
            acc = tl.dot(tl.dot(q, k).to(v.dtype), v)
        elif LEAN:
            s = tl.where(n_ok[None, :], tl.dot(q, k), float("-inf"))
            p = tl.math.exp2(tl.fma(s, qk_scale, -(tl.max(s, 1) * qk_scale)[:, None]))
            acc = tl.dot(p.to(v.dtype), v) * (1.0 / tl.sum(p, 1))[:, None]
        else:
            s = tl.dot(q, k)
            s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
            m = tl.max(s, 1)
            p = _exp2(s - m[:, None], F16EXP)
            acc = tl.dot(p.to(v.dtype), v) / tl.sum(p.to(tl.float32), 1)[:, None]
    o_ptrs = O + (row0 + offs_m[:, None]) * stride_ot + head.to(tl.int64) * stride_oh
    tl.store(o_ptrs + offs_d[None, :], acc.to(O.dtype.element_ty),
             mask=m_ok[:, None] & d_ok[None, :])  # fmt: skip


@triton.jit(do_not_specialize=["cu_seqlens", "n0", "n1"],
            do_not_specialize_on_alignment=["cu_seqlens"])  # fmt: skip
def onetile_parts_kernel(
    Q, K, V, O, cu_seqlens, qk_scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    n0, n1,
    HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr, PDL: tl.constexpr, PART: tl.constexpr, MMA2: tl.constexpr,
    F16EXP: tl.constexpr, HEADS: tl.constexpr, LEAN: tl.constexpr = False,
    EARLY: tl.constexpr = False,
):  # fmt: skip
    """``forward.onetile_kernel`` as the default path runs it (3-D grid, speculative start)
    doing ``PART`` of its work; ``HEADS`` (1 or 2) heads a program, grid (query tiles,
    heads / HEADS, sequences), both heads' loads issued before either computes. ``EARLY``
    (full, one head): cu_seqlens read before ``griddepcontrol.wait`` (valid only where the
    kernel this one depends on did not write it), then q, k and v from the true start: no
    speculation."""
    if PDL == 1:
        forward.gdc_launch_dependents()
    m_block = tl.program_id(0)
    head = tl.program_id(1) * HEADS
    seq = tl.program_id(2)
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    if EARLY:
        seq_start = tl.load(cu_seqlens + seq)
        seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
        if m_block * BLOCK_M < seq_len:
            if PDL:
                forward.gdc_wait()
            row0 = seq_start.to(tl.int64)
            q, k, v = _onetile_loads(Q, K, V, head, row0, offs_m, offs_n, offs_d,
                                     offs_m < seq_len, offs_n < seq_len, d_ok, stride_qt,
                                     stride_qh, stride_kt, stride_kh, stride_vt,
                                     stride_vh)  # fmt: skip
            _onetile_finish(q, k, v, O, head, row0, row0, seq_len, offs_m, offs_n, offs_d,
                            d_ok, qk_scale, Q, K, V, stride_qt, stride_qh, stride_kt,
                            stride_kh, stride_vt, stride_vh, stride_ot, stride_oh, BLOCK_D,
                            PART, F16EXP, LEAN)  # fmt: skip
        if PDL == 2:
            forward.gdc_launch_dependents()
        return
    if PDL:
        forward.gdc_wait()
    g0 = seq.to(tl.int64) * n1
    gm_ok = g0 + offs_m < n0
    gn_ok = g0 + offs_n < n0
    if PART != ZEROS:
        q, k, v = _onetile_loads(Q, K, V, head, g0, offs_m, offs_n, offs_d, gm_ok, gn_ok, d_ok,
                                 stride_qt, stride_qh, stride_kt, stride_kh, stride_vt,
                                 stride_vh)  # fmt: skip
        if HEADS == 2:
            q2, k2, v2 = _onetile_loads(Q, K, V, head + 1, g0, offs_m, offs_n, offs_d, gm_ok,
                                        gn_ok, d_ok, stride_qt, stride_qh, stride_kt,
                                        stride_kh, stride_vt, stride_vh)  # fmt: skip
    else:
        q = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float16)
        k = tl.zeros([BLOCK_D, BLOCK_N], dtype=tl.float16)
        v = tl.zeros([BLOCK_N, BLOCK_D], dtype=tl.float16)
        q2, k2, v2 = q, k, v
    seq_start = tl.load(cu_seqlens + seq)
    seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
    if m_block * BLOCK_M < seq_len:
        row0 = seq_start.to(tl.int64)
        _onetile_finish(q, k, v, O, head, row0, g0, seq_len, offs_m, offs_n, offs_d, d_ok,
                        qk_scale, Q, K, V, stride_qt, stride_qh, stride_kt, stride_kh,
                        stride_vt, stride_vh, stride_ot, stride_oh, BLOCK_D, PART,
                        F16EXP, LEAN)  # fmt: skip
        if HEADS == 2:
            _onetile_finish(q2, k2, v2, O, head + 1, row0, g0, seq_len, offs_m, offs_n, offs_d,
                            d_ok, qk_scale, Q, K, V, stride_qt, stride_qh, stride_kt, stride_kh,
                            stride_vt, stride_vh, stride_ot, stride_oh, BLOCK_D, PART,
                            F16EXP)  # fmt: skip
    if PDL == 2:
        forward.gdc_launch_dependents()


# ``forward.onetile_kernel`` as it was before its three ``_load_qkv`` calls became two (a
# verbatim copy, renamed): the A/B of that change in one process (arm "onetile before ...").
@triton.jit
def _load_qkv_before(q_head, k_head, v_head, row0, offs_m, offs_n, offs_d, m_ok, n_ok, d_ok,
              stride_qt, stride_kt, stride_vt):  # fmt: skip
    """q [BLOCK_M, BLOCK_D], k^T [BLOCK_D, BLOCK_N] and v [BLOCK_N, BLOCK_D] of the rows from
    ``row0`` on (one head's pointers), masked rows and columns 0; issued together."""
    q = tl.load(q_head + (row0 + offs_m[:, None]) * stride_qt + offs_d[None, :],
                mask=m_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    k = tl.load(k_head + (row0 + offs_n[None, :]) * stride_kt + offs_d[:, None],
                mask=n_ok[None, :] & d_ok[:, None], other=0.0)  # fmt: skip
    v = tl.load(v_head + (row0 + offs_n[:, None]) * stride_vt + offs_d[None, :],
                mask=n_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    return q, k, v


@triton.jit(do_not_specialize=["cu_seqlens", "n0", "n1"],
            do_not_specialize_on_alignment=["cu_seqlens"])  # fmt: skip
def onetile_before_kernel(
    Q, K, V, O, cu_seqlens, qk_scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    n0, n1,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    SPECULATE: tl.constexpr,
    GRID3: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """One program per (query tile, sequence, head); every key of the sequence in one tile
    (the launcher guarantees max_seqlen <= BLOCK_N). The attention kernel's parameters, its
    last two ints (``n0``, ``n1``) being (num_heads, num_m_blocks) on the 1-D grid and
    (total_tokens, guess_len) on the 3-D grid (which needs neither of the first two).

    ``SPECULATE`` (3-D grid only): q, k and v are loaded from the rows the sequence would
    start at were all
    lengths ``guess_len`` (total_tokens // batch: exact for uniform batches) in the same load
    round as cu_seqlens, and loaded again from the true start only where the guess was wrong:
    uniform batches lose the dependent round, any batch stays exact.

    ``GRID3``: a 3-D grid (query tile, head, sequence) instead of the flattened one: the
    sequence index, which the first load's address needs, without two integer divisions.

    ``PDL``: launched as a programmatic dependent launch: wait for the previous kernel just
    before the first load, and let the next kernel launch at once (1) or after the store (2)."""
    if PDL == 1:
        forward.gdc_launch_dependents()
    m_block, head, seq = forward.program_tile(GRID3, n1, n0)
    # Independent of the sequence bounds: computed while their load is in flight.
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    head64 = head.to(tl.int64)
    q_head = Q + head64 * stride_qh
    k_head = K + head64 * stride_kh
    v_head = V + head64 * stride_vh
    if PDL:  # everything above is address arithmetic; every load comes after this
        forward.gdc_wait()

    if SPECULATE:  # issued before the sequence bounds are known
        g0 = seq.to(tl.int64) * n1  # guess_len
        gm_ok = g0 + offs_m < n0  # total_tokens
        gn_ok = g0 + offs_n < n0
        q, k, v = _load_qkv_before(
            q_head,
            k_head,
            v_head,
            g0,
            offs_m,
            offs_n,
            offs_d,
            gm_ok,
            gn_ok,
            d_ok,
            stride_qt,
            stride_kt,
            stride_vt,
        )
    seq_start = tl.load(cu_seqlens + seq)
    seq_end = tl.load(cu_seqlens + seq + 1)
    seq_len = seq_end - seq_start
    if m_block * BLOCK_M < seq_len:
        row0 = seq_start.to(tl.int64)
        m_ok = offs_m < seq_len
        n_ok = offs_n < seq_len
        if SPECULATE:
            if row0 != g0:  # a wrong guess: the loads of the plain kernel
                q, k, v = _load_qkv_before(
                    q_head,
                    k_head,
                    v_head,
                    row0,
                    offs_m,
                    offs_n,
                    offs_d,
                    m_ok,
                    n_ok,
                    d_ok,
                    stride_qt,
                    stride_kt,
                    stride_vt,
                )
            # Rows past the sequence hold the next sequence's values: zero them so that a
            # non-finite value there cannot reach this sequence through p * v (p is 0 there).
            v = tl.where(n_ok[:, None], v, 0.0)
        else:
            q, k, v = _load_qkv_before(
                q_head,
                k_head,
                v_head,
                row0,
                offs_m,
                offs_n,
                offs_d,
                m_ok,
                n_ok,
                d_ok,
                stride_qt,
                stride_kt,
                stride_vt,
            )
        if IEEE_DOT:
            s = tl.dot(q, k, input_precision="ieee")
        else:
            s = tl.dot(q, k)
        s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
        m = tl.max(s, 1)
        p = tl.math.exp2(s - m[:, None])
        l_i = tl.sum(p, 1)
        if IEEE_DOT:
            acc = tl.dot(p.to(v.dtype), v, input_precision="ieee")
        else:
            acc = tl.dot(p.to(v.dtype), v)
        acc = acc / l_i[:, None]
        o_ptrs = O + (row0 + offs_m[:, None]) * stride_ot + head64 * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])
    if PDL == 2:
        forward.gdc_launch_dependents()


# TMA (Hopper's bulk tensor copies) for q, k and v: host-built tensor descriptors over the
# [T, heads x head_dim] view of each input (``tma_desc``), a tile of BLOCK rows x head_dim
# columns at (row, head x head_dim). Rows past a sequence's end are the next sequence's (the
# descriptor's bounds are the whole batch's: rows past T come as zeros): the scores mask them,
# and with ``VZERO`` v's are zeroed too (exact for any input); without it a non-finite value
# in the next sequence's v reaches this one (0 x inf). The store stays a masked pointer store.
@triton.jit(do_not_specialize=["cu_seqlens", "num_heads", "num_m_blocks"],
            do_not_specialize_on_alignment=["cu_seqlens"])  # fmt: skip
def loop_tma_kernel(
    QD, KD, VD, O, cu_seqlens, qk_scale, stride_ot, stride_oh, num_heads, num_m_blocks,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr,
    PART: tl.constexpr, VZERO: tl.constexpr,
):  # fmt: skip
    """``loop_parts_kernel`` (the loop, 1-D grid) with q, k and v loaded through TMA
    descriptors; ``PART`` ``loadsum``, ``dots`` or ``full``."""
    if PDL == 1:
        forward.gdc_launch_dependents()
    pid = tl.program_id(0)
    m_block = pid % num_m_blocks
    seq_head = pid // num_m_blocks
    head = seq_head % num_heads
    seq = seq_head // num_heads
    if PDL:
        forward.gdc_wait()
    seq_start = tl.load(cu_seqlens + seq)
    seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
    m_start = m_block * BLOCK_M
    if m_start < seq_len:
        col = head * HEAD_DIM
        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, HEAD_DIM)
        m_ok = offs_m < seq_len
        q = QD.load([seq_start + m_start, col])
        if PDL == 3:
            forward.gdc_launch_dependents()
        m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
        l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
        acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
        kvsum = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
        if PART == LOADSUM:
            acc += q.to(tl.float32)
        for n_start in range(0, seq_len, BLOCK_N):
            k = KD.load([seq_start + n_start, col])  # [BLOCK_N, HEAD_DIM]
            v = VD.load([seq_start + n_start, col])
            n_ok = n_start + tl.arange(0, BLOCK_N) < seq_len
            if PART == LOADSUM:
                kvsum += k.to(tl.float32) + v.to(tl.float32)
            elif PART == DOTS:
                acc += tl.dot(tl.dot(q, tl.trans(k)).to(v.dtype), v)
            else:
                if VZERO:
                    v = tl.where(n_ok[:, None], v, 0.0)
                s = tl.dot(q, tl.trans(k))
                s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
                m_new = tl.maximum(m_i, tl.max(s, 1))
                p = tl.math.exp2(s - m_new[:, None])
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha + tl.sum(p, 1)
                acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
                m_i = m_new
        if PART == FULL:
            acc = acc / l_i[:, None]
        elif PART == LOADSUM:
            if BLOCK_M == BLOCK_N:
                acc += kvsum
            else:  # one program a pair: one sum at the end
                acc += tl.sum(kvsum, 0)[None, :]
        o_ptrs = (O + (seq_start.to(tl.int64) + offs_m[:, None]) * stride_ot
                  + head.to(tl.int64) * stride_oh + offs_d[None, :])  # fmt: skip
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=m_ok[:, None])
    if PDL == 2:
        forward.gdc_launch_dependents()


@triton.jit(do_not_specialize=["cu_seqlens", "n0", "n1"],
            do_not_specialize_on_alignment=["cu_seqlens"])  # fmt: skip
def onetile_tma_kernel(
    QD, KD, VD, O, cu_seqlens, qk_scale, stride_ot, stride_oh, n0, n1,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PDL: tl.constexpr,
    PART: tl.constexpr,
):  # fmt: skip
    """``onetile_parts_kernel`` (3-D grid, the speculative start from row seq x guess_len;
    ``n0``, ``n1`` = total_tokens, guess_len) with q, k and v loaded through TMA descriptors
    (rows past T are zeros); loaded again from the true start where the guess was wrong; v's
    rows past the sequence zeroed as in the kernel. ``PART`` ``loadsum`` or ``full``."""
    if PDL == 1:
        forward.gdc_launch_dependents()
    m_block = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    col = head * HEAD_DIM
    offs_m = m_block * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    if PDL:
        forward.gdc_wait()
    g0 = seq * n1
    q = QD.load([g0 + m_block * BLOCK_M, col])
    k = KD.load([g0, col])
    v = VD.load([g0, col])
    seq_start = tl.load(cu_seqlens + seq)
    seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
    if m_block * BLOCK_M < seq_len:
        if seq_start != g0:
            q = QD.load([seq_start + m_block * BLOCK_M, col])
            k = KD.load([seq_start, col])
            v = VD.load([seq_start, col])
        m_ok = offs_m < seq_len
        n_ok = offs_n < seq_len
        v = tl.where(n_ok[:, None], v, 0.0)
        if PART != FULL:  # the loads, summed
            acc = (q.to(tl.float32) + tl.sum(k.to(tl.float32), 0)[None, :]
                   + tl.sum(v.to(tl.float32), 0)[None, :])  # fmt: skip
        else:
            s = tl.dot(q, tl.trans(k))
            s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
            m = tl.max(s, 1)
            p = tl.math.exp2(s - m[:, None])
            acc = tl.dot(p.to(v.dtype), v) / tl.sum(p, 1)[:, None]
        o_ptrs = (O + (seq_start.to(tl.int64) + offs_m[:, None]) * stride_ot
                  + head.to(tl.int64) * stride_oh + offs_d[None, :])  # fmt: skip
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=m_ok[:, None])
    if PDL == 2:
        forward.gdc_launch_dependents()


def tma_desc(t: torch.Tensor, rows: int):
    """A host TMA descriptor over ``t`` [T, heads, head_dim] (unit stride in head_dim, heads
    adjacent) seen as [T, heads x head_dim], tiles of ``rows`` x head_dim."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    total, heads, head_dim = t.shape
    return TensorDescriptor(t, [total, heads * head_dim], [t.stride(0), 1], [rows, head_dim])


@triton.jit
def probe_kernel(X, O, PDL: tl.constexpr, ROWS: tl.constexpr, TILES: tl.constexpr):
    """A bandwidth and latency probe, no attention: each program reads its own TILES x ROWS x
    64 fp16 (TILES x 8 KB at 64 rows) of ``X`` with 16-byte loads, every load issued before
    the first sum (an unrolled loop of independent loads), and stores ROWS x 64 of their sum:
    what a grid of this many programs pays to pull this many bytes each from L2."""
    pid = tl.program_id(0)
    if PDL:
        forward.gdc_wait()
    offs = tl.arange(0, ROWS)[:, None] * 64 + tl.arange(0, 64)[None, :]
    base = X + pid.to(tl.int64) * (TILES * ROWS * 64)
    acc = tl.zeros([ROWS, 64], dtype=tl.float32)
    for t in tl.static_range(TILES):
        acc += tl.load(base + t * ROWS * 64 + offs).to(tl.float32)
    tl.store(O + pid.to(tl.int64) * (ROWS * 64) + offs, acc.to(tl.float16))
    if PDL == 2:
        forward.gdc_launch_dependents()


_probe_buffers: dict = {}  # device -> (X, O): one pair for every probe arm, made outside capture


def _run_probe(arm: Part, device, pdl: int) -> None:
    """``probe_kernel`` on ``arm.block_m`` programs of ``arm.block_n`` 8 KB tiles each."""
    if device not in _probe_buffers:
        g = torch.Generator(device="cpu").manual_seed(0)
        x = torch.randn(256 * 8 * 64 * 64, generator=g).to(dtype=torch.float16, device=device)
        _probe_buffers[device] = (x, torch.empty(256 * 64 * 64, dtype=torch.float16,
                                                 device=device))  # fmt: skip
    x, o = _probe_buffers[device]
    if arm.block_m > 256 or arm.block_n > 8:
        raise ValueError(f"{arm.name}: at most 256 programs of 8 tiles")
    probe_kernel[(arm.block_m,)](x, o, PDL=pdl, ROWS=64, TILES=arm.block_n,
                                 num_warps=arm.num_warps, num_stages=1,
                                 **({"launch_pdl": True} if pdl else {}))  # fmt: skip


@dataclass(frozen=True)
class Part:
    """One arm: ``kind`` "loop" (``loop_parts_kernel``, block_m x block_n tiles), "kernel"
    (``forward.varlen_fwd_kernel`` itself, launched by ``varlen_attention_triton`` with that
    configuration: always full; ``ffma`` sets its ``lean``), "onetile"
    (``onetile_parts_kernel``: block_m query rows, every key in one tile of
    ``next_power_of_2(max_seqlen)`` columns, up to 128), doing ``part`` of the work, or
    "before" (``onetile_before_kernel``, the default path's one-tile launch: always full).
    ``tma``: the loop or one-tile kernel loading q, k and v through TMA descriptors
    (``loop_tma_kernel``, ``onetile_tma_kernel``; ``vzero`` False: the loop's v rows past the
    sequence not zeroed); ``kv_evict``, ``kv_cache``, ``hints``, ``ffma``, ``lastmask``,
    ``skip0``, ``rcp``, ``grid3``, ``poly``: ``loop_parts_kernel``'s (upper-cased); ``early``:
    ``EARLY`` of either kernel. "checked": ``loop_checked_kernel`` (always full; ``check`` its
    ``CHECK``, ``once`` its ``ONCE``, ``ffma`` its ``LEAN``)."""

    name: str
    kind: str
    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    pdl: int
    part: int
    mma2: bool = False
    f16exp: bool = False
    heads: int = 1
    tma: bool = False
    vzero: bool = True
    kv_evict: str = ""
    kv_cache: str = ""
    hints: bool = False
    ffma: bool = False
    lastmask: bool = False
    skip0: bool = False
    rcp: bool = False
    grid3: bool = False
    poly: bool = False
    early: bool = False
    check: int = 0
    once: bool = False
    ctas: int = 0  # "kernel": at most this many programs an SM (0: as many as fit; ``occupy``)

    def why_not(self, max_seqlen: int, on_gpu: bool) -> str | None:
        """Why this arm cannot run a batch of ``max_seqlen`` here (None: it can)."""
        if self.kind not in ("loop", "kernel", "checked", "probe") and max_seqlen > 128:
            return f"max_seqlen {max_seqlen}: over one 128-key tile"
        if self.f16exp and not on_gpu:
            return "inline PTX: not in the interpreter"
        if self.tma and on_gpu and torch.cuda.get_device_capability() < (9, 0):
            return "TMA needs sm_90"
        return None


def _parts(shape: str, kind, bm, bn, w, s, pdl, parts=("zeros", "loads", "dots", "full"), **kw):
    return [Part(f"{shape} {p}", kind, bm, bn, w, s, pdl, PART_NAMES[p], **kw) for p in parts]


# fmt: off
PARTS = (
    # the grids of the default path at BS 8 / 50% (and 32 / 80%) and at BS 1 / 80%
    *_parts("floor loop 64x64 w4 s2 pdl late", "loop", 64, 64, 4, 2, 2),
    *_parts("floor loop 64x64 w4 s2", "loop", 64, 64, 4, 2, 0),
    *_parts("floor onetile m16 w4 pdl", "onetile", 16, 0, 4, 1, 1),
    *_parts("floor onetile m16 w4", "onetile", 16, 0, 4, 1, 0, ("zeros", "loads", "full")),
    # other grids for 65-128 keys: one key tile (no loop), one program a pair, 8 warps, 1 stage
    *_parts("floor loop 64x128 w4 s1 pdl late", "loop", 64, 128, 4, 1, 2),
    *_parts("floor loop 64x64 w4 s1 pdl late", "loop", 64, 64, 4, 1, 2, ("loads", "full")),
    *_parts("floor loop 128x128 w8 s1 pdl late", "loop", 128, 128, 8, 1, 2),
    *_parts("floor loop 128x64 w8 s2 pdl late", "loop", 128, 64, 8, 2, 2),
    *_parts("floor onetile m64 w4 pdl late", "onetile", 64, 0, 4, 1, 2),
    *_parts("floor onetile m128 w8 pdl late", "onetile", 128, 0, 8, 1, 2),
    *_parts("floor onetile m32 w4 pdl late", "onetile", 32, 0, 4, 1, 2, ("zeros", "loads")),
    # candidates: Ampere's mma.sync, fp16 exp2, two heads a program
    *_parts("mma2 loop 64x64 w4 s2 pdl late", "loop", 64, 64, 4, 2, 2, ("dots", "full"),
            mma2=True),
    *_parts("mma2 loop 64x128 w4 s1 pdl late", "loop", 64, 128, 4, 1, 2, ("full",), mma2=True),
    *_parts("mma2 onetile m64 w4 pdl late", "onetile", 64, 0, 4, 1, 2, ("dots", "full"),
            mma2=True),
    *_parts("f16exp loop 64x64 w4 s2 pdl late", "loop", 64, 64, 4, 2, 2, ("full",), f16exp=True),
    # the table's kernel (no PDL: BS 64) with fp16 exp2
    *_parts("f16exp loop 64x64 w4 s2", "loop", 64, 64, 4, 2, 0, ("full",), f16exp=True),
    *_parts("f16exp onetile m16 w4 pdl", "onetile", 16, 0, 4, 1, 1, ("full",), f16exp=True),
    *_parts("f16exp onetile m64 w4 pdl late", "onetile", 64, 0, 4, 1, 2, ("full",), f16exp=True),
    *_parts("mma2 f16exp loop 64x64 w4 s2 pdl late", "loop", 64, 64, 4, 2, 2, ("full",),
            mma2=True, f16exp=True),
    *_parts("mma2 f16exp onetile m64 w4 pdl late", "onetile", 64, 0, 4, 1, 2, ("full",),
            mma2=True, f16exp=True),
    *_parts("mma2 loop 128x64 w8 s2 pdl late", "loop", 128, 64, 8, 2, 2, ("full",), mma2=True),
    *_parts("pdl mid loop 64x64 w4 s2", "loop", 64, 64, 4, 2, 3, ("full",)),
    *_parts("pdl mid mma2 loop 64x64 w4 s2", "loop", 64, 64, 4, 2, 3, ("full",), mma2=True),
    *_parts("h2 onetile m16 w4 pdl", "onetile", 16, 0, 4, 1, 1, ("loads", "full"), heads=2),
    *_parts("h2 onetile m64 w4 pdl late", "onetile", 64, 0, 4, 1, 2, ("loads", "full"), heads=2),
    # the A/B of forward.onetile_kernel's loads in one call site (the after: the variants
    # "onetile spec 3d m16 w4 pdl" and "... pdl late", and current at 1 / 80% and 1 / 50%)
    Part("onetile before m16 w4 pdl", "before", 16, 0, 4, 1, 1, 3),
    Part("onetile before m16 w4 pdl late", "before", 16, 0, 4, 1, 2, 3),
    # the eighth session: the default loop's own grid (PDL after the q load) doing less, its
    # loads elementwise (no cross-thread sums), and its q, k, v loads through TMA or with
    # other cache hints; the one-tile kernel through TMA
    *_parts("floor loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3,
            ("zeros", "loads", "loadsum", "dots", "full")),
    *_parts("tma loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("loadsum", "dots", "full"),
            tma=True),
    *_parts("tma vraw loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), tma=True,
            vzero=False),
    *_parts("tma loop 64x64 w4 s3 pdl mid", "loop", 64, 64, 4, 3, 3, ("full",), tma=True),
    *_parts("tma loop 64x64 w4 s2", "loop", 64, 64, 4, 2, 0, ("full",), tma=True),
    *_parts("tma vraw loop 64x64 w4 s2", "loop", 64, 64, 4, 2, 0, ("full",), tma=True,
            vzero=False),
    *_parts("tma onetile m16 w4 pdl", "onetile", 16, 0, 4, 1, 1, ("loads", "full"), tma=True),
    *_parts("tma onetile m16 w4 pdl late", "onetile", 16, 0, 4, 1, 2, ("full",), tma=True),
    *_parts("evict last loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",),
            kv_evict="evict_last"),
    *_parts("cache ca loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",),
            kv_cache=".ca"),
    *_parts("hints loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), hints=True),
    # one program a pair (K and V read once): the loads' floor, and the kernel through TMA
    *_parts("floor loop 128x64 w8 s2 pdl mid", "loop", 128, 64, 8, 2, 3, ("loadsum",)),
    *_parts("tma loop 128x64 w8 s2 pdl mid", "loop", 128, 64, 8, 2, 3, ("loadsum", "full"),
            tma=True),
    # the ninth session: the default loop (PDL after the q load) with fewer instructions a key
    # tile, each change alone and together, and half its exp2 on the FMA units
    *_parts("ffma loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), ffma=True),
    *_parts("lastmask loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",),
            lastmask=True),
    *_parts("skip0 loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), skip0=True),
    *_parts("rcp loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), rcp=True),
    *_parts("grid3 loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), grid3=True),
    *_parts("lean loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), ffma=True,
            lastmask=True, skip0=True, rcp=True),
    *_parts("lean grid3 loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",),
            ffma=True, lastmask=True, skip0=True, rcp=True, grid3=True),
    *_parts("poly loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), ffma=True,
            poly=True),
    *_parts("lean poly loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",),
            ffma=True, lastmask=True, skip0=True, rcp=True, poly=True),
    # the 129-512 keys class's loop (3 stages, PDL after the store) and its leaner softmax
    *_parts("floor loop 64x64 w4 s3 pdl late", "loop", 64, 64, 4, 3, 2, ("full",)),
    *_parts("lean loop 64x64 w4 s3 pdl late", "loop", 64, 64, 4, 3, 2, ("full",), ffma=True,
            lastmask=True, skip0=True, rcp=True),
    # the one-tile kernel of BS 1 (PDL at once up to 64 keys, after the store to 128) with the
    # scale in the fma and the reciprocal (it has no loop: no mask to skip, no rescale)
    *_parts("lean onetile m16 w4 pdl", "onetile", 16, 0, 4, 1, 1, ("full",), ffma=True,
            rcp=True),
    *_parts("lean onetile m16 w4 pdl late", "onetile", 16, 0, 4, 1, 2, ("full",), ffma=True,
            rcp=True),
    *_parts("floor onetile m16 w4 pdl late", "onetile", 16, 0, 4, 1, 2, ("full",)),
    # the table's kernel (no PDL: BS 64) made lean: where the large classes would take it
    *_parts("lean loop 64x64 w4 s2", "loop", 64, 64, 4, 2, 0, ("full",), ffma=True,
            lastmask=True, skip0=True, rcp=True),
    # the tenth session: one program a pair at 65-128 keys with 4 warps (each warp holds rows
    # of both 64-row halves: two independent softmax chains, K and V read once a pair, 239
    # registers, one wave at BS 8 / 50%) against 8 warps (two warpgroups, 120 registers); the
    # past-three-waves class as the 3-stage loop (with and without PDL after the store); the
    # 129-512 keys class on the 3-D grid
    *_parts("grid3 loop 128x64 w4 s2 pdl mid", "loop", 128, 64, 4, 2, 3, ("full",), grid3=True),
    *_parts("lean grid3 loop 128x64 w4 s2 pdl mid", "loop", 128, 64, 4, 2, 3, ("full",),
            ffma=True, lastmask=True, skip0=True, rcp=True, grid3=True),
    *_parts("grid3 loop 128x64 w8 s2 pdl mid", "loop", 128, 64, 8, 2, 3, ("full",), grid3=True),
    *_parts("lean loop 64x64 w4 s3", "loop", 64, 64, 4, 3, 0, ("full",), ffma=True,
            lastmask=True, skip0=True, rcp=True),
    *_parts("lean grid3 loop 64x64 w4 s3 pdl late", "loop", 64, 64, 4, 3, 2, ("full",),
            ffma=True, lastmask=True, skip0=True, rcp=True, grid3=True),
    # the eleventh session: cu_seqlens read before the wait (its round overlaps the previous
    # kernel), on the default path's grids: the 3-D grid loop of 65-128 keys (PDL after the q
    # load, and at once), the 1-D loop, the large class, and the one-tile kernel of BS 1
    *_parts("early grid3 loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3,
            ("zeros", "loadsum", "dots", "full"), grid3=True, early=True),
    *_parts("early grid3 loop 64x64 w4 s2 pdl", "loop", 64, 64, 4, 2, 1, ("full",), grid3=True,
            early=True),
    *_parts("early loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, 3, ("full",), early=True),
    *_parts("early lean loop 64x64 w4 s3 pdl late", "loop", 64, 64, 4, 3, 2, ("full",),
            ffma=True, lastmask=True, skip0=True, rcp=True, early=True),
    *_parts("early lean loop 64x64 w4 s3 pdl mid", "loop", 64, 64, 4, 3, 3, ("full",),
            ffma=True, lastmask=True, skip0=True, rcp=True, early=True),
    *_parts("early onetile m16 w4 pdl", "onetile", 16, 0, 4, 1, 1, ("full",), early=True),
    *_parts("early onetile m16 w4 pdl late", "onetile", 16, 0, 4, 1, 2, ("full",), early=True),
    *_parts("early onetile m64 w4 pdl late", "onetile", 64, 0, 4, 1, 2, ("full",), early=True),
    # the same read, checked after the wait (``loop_checked_kernel``: exact whatever the
    # kernel before wrote), the second read volatile, ".cg", or plain after a ".cg" early
    # read; the same code unchecked; the checked loop with the leaner softmax and with 3
    # stages (129-512 keys); and beside them the default path's own kernels ("kernel":
    # forward.varlen_fwd_kernel launched by varlen_attention_triton with that configuration)
    Part("checked volatile grid3 loop 64x64 w4 s2 pdl mid", "checked", 64, 64, 4, 2, 3, 3,
         check=1),
    Part("checked cg grid3 loop 64x64 w4 s2 pdl mid", "checked", 64, 64, 4, 2, 3, 3, check=2),
    Part("checked weak grid3 loop 64x64 w4 s2 pdl mid", "checked", 64, 64, 4, 2, 3, 3,
         check=3),
    Part("unchecked grid3 loop 64x64 w4 s2 pdl mid", "checked", 64, 64, 4, 2, 3, 3, check=0),
    # the same read issued once q's load is: the default path's kernel with early (these two
    # ran as loop_checked_kernel's CHECK 4, the same SASS, before early went on the path)
    Part("checked late weak grid3 loop 64x64 w4 s2 pdl mid", "kernel", 64, 64, 4, 2, 3, 3,
         grid3=True, early=True),
    Part("checked late weak lean grid3 loop 64x64 w4 s3 pdl mid", "kernel", 64, 64, 4, 3, 3,
         3, grid3=True, ffma=True, early=True),
    # the twelfth session: the 1-D grid loop of 17-128 keys past 2 waves (the class without
    # early) through the same launch, and it and the 3-D grid loop with early at most 2, 3 or
    # 4 programs an SM (``ctas``: the shared-memory carveout). The same read checked on the
    # 1-D grid ran from 17376af (docs/kernel.md, twelfth session)
    Part("kernel 64x64 w4 s2 pdl mid", "kernel", 64, 64, 4, 2, 3, 3),
    *(Part(f"{c} an SM checked late weak grid3 loop 64x64 w4 s2 pdl mid", "kernel", 64, 64, 4,
           2, 3, 3, grid3=True, early=True, ctas=c) for c in (2, 3, 4)),
    *(Part(f"{c} an SM kernel 64x64 w4 s2 pdl mid", "kernel", 64, 64, 4, 2, 3, 3, ctas=c)
      for c in (2, 3)),
    Part("checked weak once grid3 loop 64x64 w4 s2 pdl mid", "checked", 64, 64, 4, 2, 3, 3,
         check=3, once=True),
    Part("checked volatile once grid3 loop 64x64 w4 s2 pdl mid", "checked", 64, 64, 4, 2, 3, 3,
         check=1, once=True),
    Part("checked volatile lean grid3 loop 64x64 w4 s2 pdl mid", "checked", 64, 64, 4, 2, 3, 3,
         ffma=True, check=1),
    Part("checked volatile grid3 loop 64x64 w4 s3 pdl mid", "checked", 64, 64, 4, 3, 3, 3,
         check=1),
    Part("checked volatile lean grid3 loop 64x64 w4 s3 pdl mid", "checked", 64, 64, 4, 3, 3, 3,
         ffma=True, check=1),
    Part("kernel grid3 64x64 w4 s2 pdl mid", "kernel", 64, 64, 4, 2, 3, 3, grid3=True),
    Part("kernel 64x64 w4 s3 pdl late", "kernel", 64, 64, 4, 3, 2, 3),
    Part("kernel lean grid3 64x64 w4 s3 pdl mid", "kernel", 64, 64, 4, 3, 3, 3, grid3=True,
         ffma=True),
    # the thirteenth session: config.LARGE_GRID3 (56 KB, 128 registers: 4 an SM) at most 2 or 3
    *(Part(f"{c} an SM kernel lean grid3 64x64 w4 s3 pdl mid", "kernel", 64, 64, 4, 3, 3, 3,
           grid3=True, ffma=True, ctas=c) for c in (2, 3)),
    Part("kernel lean grid3 64x64 w4 s3 pdl late", "kernel", 64, 64, 4, 3, 2, 3, grid3=True,
         ffma=True),
    # probes (the inputs unused): programs x 8 KB tiles each, PDL after the store
    *(Part(f"probe {p} x {8 * t} KB", "probe", p, t, 4, 1, 2, PART_NAMES["loadsum"])
      for p, t in ((36, 1), (36, 2), (132, 1), (132, 4), (192, 1), (192, 2), (192, 4),
                   (192, 8), (96, 5), (96, 1), (66, 8), (132, 8))),
)
# fmt: on


def run(arm: Part, q, k, v, cu_seqlens, max_seqlen, softmax_scale, out) -> torch.Tensor:
    """Launch ``arm`` on a packed fp16 batch (q, k, v, out [T, heads, 64]) -> out. Capturable
    in a CUDA graph (no host synchronisation); ValueError where it does not apply."""
    why = arm.why_not(max_seqlen, q.is_cuda)
    if why:
        raise ValueError(f"{arm.name}: {why}")
    total, heads, head_dim = q.shape
    batch = cu_seqlens.shape[0] - 1
    if heads % arm.heads:
        raise ValueError(f"{arm.name}: {heads} heads not a multiple of {arm.heads}")
    pdl = arm.pdl if q.is_cuda else 0
    num_m_blocks, programs = attention.grid_of(max_seqlen, arm.block_m, batch, heads)
    if programs == 0:
        return out
    strides = (q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
               out.stride(0), out.stride(1))  # fmt: skip
    common = {"HEAD_DIM": head_dim, "BLOCK_D": max(16, triton.next_power_of_2(head_dim)),
              "BLOCK_M": arm.block_m, "PDL": pdl, "PART": arm.part, "MMA2": arm.mma2,
              "F16EXP": arm.f16exp, "num_warps": arm.num_warps,
              "num_stages": arm.num_stages}  # fmt: skip
    if pdl:
        common["launch_pdl"] = True
    old = os.environ.get("DISABLE_MMA_V3")
    if arm.mma2:  # read by Triton's compiler (and its cache key) at the first call
        os.environ["DISABLE_MMA_V3"] = "1"
    try:
        scale = softmax_scale * attention.LOG2E
        if arm.kind == "probe":
            _run_probe(arm, q.device, pdl)
            return out
        if arm.tma:
            return _run_tma(arm, q, k, v, cu_seqlens, max_seqlen, scale, out, pdl)
        if arm.kind == "kernel":  # forward.varlen_fwd_kernel through the default path's launch
            config = AttentionConfig(arm.block_m, arm.block_n, arm.num_warps, arm.num_stages,
                                     pdl=pdl, grid3=arm.grid3, lean=arm.ffma, early=arm.early,
                                     ctas=arm.ctas)  # fmt: skip
            return attention.varlen_attention_triton(q, k, v, cu_seqlens, max_seqlen,
                                                     softmax_scale, out, config)  # fmt: skip
        if arm.kind == "checked":
            loop_checked_kernel[(num_m_blocks, heads, batch)](
                q, k, v, out, cu_seqlens, scale, *strides, total,
                attention.guess_len(total, batch, max_seqlen), HEAD_DIM=head_dim,
                BLOCK_D=common["BLOCK_D"], BLOCK_M=arm.block_m, BLOCK_N=arm.block_n, PDL=pdl,
                LEAN=arm.ffma, CHECK=arm.check, ONCE=arm.once, num_warps=arm.num_warps,
                num_stages=arm.num_stages, **({"launch_pdl": True} if pdl else {}),
            )  # fmt: skip
            return out
        if arm.kind == "loop":
            grid = (num_m_blocks, heads, batch) if arm.grid3 else (programs,)
            loop_parts_kernel[grid](q, k, v, out, cu_seqlens, scale, *strides, heads,
                                    num_m_blocks, BLOCK_N=arm.block_n, KV_EVICT=arm.kv_evict,
                                    KV_CACHE=arm.kv_cache, HINTS=arm.hints, FFMA=arm.ffma,
                                    LASTMASK=arm.lastmask, SKIP0=arm.skip0, RCP=arm.rcp,
                                    GRID3=arm.grid3, POLY=arm.poly, EARLY=arm.early,
                                    **common)  # fmt: skip
        elif arm.kind == "before":
            onetile_before_kernel[(num_m_blocks, heads, batch)](
                q, k, v, out, cu_seqlens, scale, *strides, total,
                attention.guess_len(total, batch, max_seqlen), HEAD_DIM=head_dim,
                BLOCK_D=common["BLOCK_D"], BLOCK_M=arm.block_m,
                BLOCK_N=max(16, triton.next_power_of_2(max_seqlen)), IEEE_DOT=False,
                SPECULATE=True, GRID3=True, PDL=pdl, num_warps=arm.num_warps,
                num_stages=arm.num_stages, **({"launch_pdl": True} if pdl else {}),
            )  # fmt: skip
        else:
            grid = (num_m_blocks, heads // arm.heads, batch)
            onetile_parts_kernel[grid](
                q, k, v, out, cu_seqlens, scale, *strides, total,
                attention.guess_len(total, batch, max_seqlen),
                BLOCK_N=max(16, triton.next_power_of_2(max_seqlen)), HEADS=arm.heads,
                LEAN=arm.ffma and arm.rcp, EARLY=arm.early, **common,
            )  # fmt: skip
    finally:
        if arm.mma2:
            if old is None:
                os.environ.pop("DISABLE_MMA_V3", None)
            else:
                os.environ["DISABLE_MMA_V3"] = old
    return out


def _run_tma(arm: Part, q, k, v, cu_seqlens, max_seqlen, scale, out, pdl) -> torch.Tensor:
    """``loop_tma_kernel`` (1-D grid) or ``onetile_tma_kernel`` (3-D grid) -> out."""
    total, heads, head_dim = q.shape
    batch = cu_seqlens.shape[0] - 1
    if head_dim not in (16, 32, 64, 128) or any(t.stride(1) != head_dim for t in (q, k, v)):
        raise ValueError(f"{arm.name}: needs heads adjacent and a power-of-two head_dim")
    num_m_blocks, programs = attention.grid_of(max_seqlen, arm.block_m, batch, heads)
    keys = arm.block_n or max(16, triton.next_power_of_2(max_seqlen))
    launch = {"num_warps": arm.num_warps, "num_stages": arm.num_stages}
    if pdl:
        launch["launch_pdl"] = True
    qd, kd, vd = tma_desc(q, arm.block_m), tma_desc(k, keys), tma_desc(v, keys)
    if arm.kind == "loop":
        loop_tma_kernel[(programs,)](
            qd, kd, vd, out, cu_seqlens, scale, out.stride(0), out.stride(1), heads,
            num_m_blocks, HEAD_DIM=head_dim, BLOCK_M=arm.block_m, BLOCK_N=keys, PDL=pdl,
            PART=arm.part, VZERO=arm.vzero, **launch,
        )  # fmt: skip
    else:
        onetile_tma_kernel[(num_m_blocks, heads, batch)](
            qd, kd, vd, out, cu_seqlens, scale, out.stride(0), out.stride(1), total,
            attention.guess_len(total, batch, max_seqlen), HEAD_DIM=head_dim,
            BLOCK_M=arm.block_m, BLOCK_N=keys, PDL=pdl, PART=arm.part, **launch,
        )  # fmt: skip
    return out


def same_ptx(capability: int = 90) -> int:
    """Compile ``forward.onetile_kernel`` and ``onetile_before_kernel`` (the same constexprs:
    the default path's one-tile launches, and the plain kernel) for sm_``capability`` with this
    Triton, no GPU needed, and print whether their PTX is the same (names and debug lines
    aside). 0: the same for every launch, 1: not."""
    import re

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = ["Q", "K", "V", "O", "cu_seqlens", "qk_scale"]
    names += [f"stride_{t}{a}" for t in "qkvo" for a in "th"] + ["n0", "n1"]
    signature = dict(zip(names, ["*fp16"] * 4 + ["*i32", "fp32"] + ["i32"] * 10, strict=True))

    def ptx(fn, consts):
        src = ASTSource(fn, signature | dict.fromkeys(consts, "constexpr"), constexprs=consts)
        text = triton.compile(src, target=GPUTarget("cuda", capability, 32),
                              options={"num_warps": 4, "num_stages": 1}).asm["ptx"]  # fmt: skip
        text = re.split(r"\.section\s+\.debug", text)[0]
        text = re.sub(r"onetile_\w*kernel", "K", text)
        return [
            ln for ln in text.splitlines() if not ln.strip().startswith((".loc", ".file", "//"))
        ]

    differ = 0
    hopper = capability >= 90  # griddepcontrol (PDL) needs sm_90: compiled without it before
    for spec, grid3, pdl, keys in ((True, True, 1, 64), (True, True, 2, 128), (False, False, 0, 64),
                                   (True, True, 1, 128)):  # fmt: skip
        pdl = pdl if hopper else 0
        consts = {"HEAD_DIM": 64, "BLOCK_D": 64, "BLOCK_M": 16, "BLOCK_N": keys,
                  "IEEE_DOT": False, "SPECULATE": spec, "GRID3": grid3, "PDL": pdl}  # fmt: skip
        same = ptx(forward.onetile_kernel, consts) == ptx(onetile_before_kernel, consts)
        differ += not same
        print(f"onetile_kernel vs onetile_before_kernel, sm_{capability}, triton "
              f"{triton.__version__}, {keys} keys, SPECULATE {spec}, PDL {pdl}: "
              f"{'the same PTX' if same else 'DIFFERENT PTX'}")  # fmt: skip
    return 1 if differ else 0


# Load and store instructions counted in the compiled kernels (``load_report``): PTX mnemonics
# and SASS opcodes, the widths that tell 16-byte accesses from 2-byte ones.
PTX_OPS = r"(?:ld|st)\.global(?:\.[\w:]+)*|cp\.async(?:\.[\w:]+)*|ld\.shared(?:\.[\w:]+)*"
SASS_OPS = (r"LDG\.[\w.]+|STG\.[\w.]+|LDGSTS\.[\w.]+|UTMALDG[\w.]*|UBLKCP[\w.]*|"
            r"LDSM\.[\w.]+|STS(?:\.\d+)?\b|HGMMA\.[\w.]+|SYNCS\.[\w.]+")  # fmt: skip


def _count(pattern: str, text: str) -> dict[str, int]:
    import collections
    import re

    return dict(sorted(collections.Counter(re.findall(pattern, text)).items()))


def load_report(capability: int = 90) -> int:
    """Compile the default path's kernels as its launch path specializes them (q, k, v, out
    16-byte aligned; every stride a multiple of 16, as ``launch.specializable`` and the fast
    paths require; cu_seqlens and the last two ints not specialized) for sm_``capability``
    with this Triton, no GPU needed, and print their global loads and stores per kernel, in
    PTX and SASS; then the same kernels without the alignment facts, and this module's TMA,
    eviction, cache and hint candidates. 0: printed; 1: a kernel failed to compile."""
    import subprocess
    import tempfile
    from pathlib import Path

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    names = ["Q", "K", "V", "O", "cu_seqlens", "qk_scale"]
    names += [f"stride_{t}{a}" for t in "qkvo" for a in "th"]
    ptr_sig = ["*fp16"] * 4 + ["*i32", "fp32"] + ["i32"] * 10
    aligned = [*range(4), *range(6, 14)]  # the pointers and the eight strides
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    common = {"HEAD_DIM": 64, "BLOCK_D": 64}
    loop = common | {"BLOCK_M": 64, "BLOCK_N": 64, "IEEE_DOT": False, "DELAY_CYCLES": 0,
                     "GRID3": False, "LEAN": False, "EARLY": False, "CTAS": 0}  # fmt: skip
    one = common | {"BLOCK_M": 16, "IEEE_DOT": False, "SPECULATE": True, "GRID3": True}
    parts = common | {"BLOCK_M": 64, "BLOCK_N": 64, "PDL": 3, "PART": 3, "MMA2": False,
                      "F16EXP": False}  # fmt: skip
    spec = loop | {"SUB_M": 64, "KEYS": 64, "SPECULATE": True, "FOLD": False,
                   "FULL_SKIP": False, "V_SPEC": False, "PDL": 1}  # fmt: skip
    for name in ("DELAY_CYCLES", "GRID3", "LEAN", "EARLY", "CTAS"):  # the loop's alone
        spec.pop(name)
    # (label, kernel, constexprs, warps, stages, aligned, pointer kernel?)
    kernels = [
        ("loop 64x64 w4 s2 pdl mid (17-128 keys)", forward.varlen_fwd_kernel, loop | {"PDL": 3},
         4, 2),
        ("loop 64x64 w4 s3 pdl late (129-512 keys)", forward.varlen_fwd_kernel,
         loop | {"PDL": 2}, 4, 3),
        ("loop 64x64 w4 s2 (the table: BS 64)", forward.varlen_fwd_kernel, loop | {"PDL": 0}, 4,
         2),
        ("onetile m16 64 keys pdl (BS 1 / 80%)", forward.onetile_kernel,
         one | {"BLOCK_N": 64, "PDL": 1}, 4, 1),
        ("onetile m16 128 keys pdl late (BS 1 / 50%)", forward.onetile_kernel,
         one | {"BLOCK_N": 128, "PDL": 2}, 4, 1),
        ("specloop 64x64 w4 s2 pdl (33-64 keys)", forward.specloop_kernel, spec, 4, 2),
        ("evict last loop 64x64 w4 s2 pdl mid", loop_parts_kernel,
         parts | {"KV_EVICT": "evict_last", "KV_CACHE": "", "HINTS": False}, 4, 2),
        ("cache ca loop 64x64 w4 s2 pdl mid", loop_parts_kernel,
         parts | {"KV_EVICT": "", "KV_CACHE": ".ca", "HINTS": False}, 4, 2),
        ("hints loop 64x64 w4 s2 pdl mid", loop_parts_kernel,
         parts | {"KV_EVICT": "", "KV_CACHE": "", "HINTS": True}, 4, 2),
        ("loop_parts_kernel full pdl mid (the default's copy)", loop_parts_kernel,
         parts | {"KV_EVICT": "", "KV_CACHE": "", "HINTS": False}, 4, 2),
    ]  # fmt: skip
    failed = 0

    def compiled(fn, signature, consts, attrs, warps, stages, pdl):
        src = ASTSource(fn, signature | dict.fromkeys(consts, "constexpr"), constexprs=consts,
                        attrs=attrs)  # fmt: skip
        options = {"num_warps": warps, "num_stages": stages}
        if pdl:
            options["launch_pdl"] = True
        return triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)

    def show(label, k):
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"])
            f.flush()
            sass = subprocess.run([str(cuobjdump), "-sass", f.name], capture_output=True,
                                  text=True).stdout  # fmt: skip
        print(f"{label}: shared {k.metadata.shared} B")
        print(f"    PTX  {_count(PTX_OPS, k.asm['ptx'])}")
        print(f"    SASS {_count(SASS_OPS, sass)}", flush=True)

    print(f"triton {triton.__version__}, sm_{capability}; counts are static instructions a thread")
    for align in (True, False):
        print(f"\n## {'as the launch path specializes' if align else 'no alignment facts'}")
        for label, fn, consts, warps, stages in kernels:
            if not align and fn not in (forward.varlen_fwd_kernel, forward.onetile_kernel):
                continue
            signature = dict(zip(fn.arg_names, [*ptr_sig, "i32", "i32"], strict=False))
            attrs = {(i,): [["tt.divisibility", 16]] for i in aligned} if align else {}
            try:
                k = compiled(fn, signature, consts, attrs, warps, stages, consts.get("PDL", 0))
            except Exception as exc:  # a compiler error: reported, the others still run
                print(f"{label}: FAILED: {type(exc).__name__}: {str(exc)[:200]}")
                failed += 1
                continue
            show(label, k)
    print("\n## TMA candidates (host descriptors)")
    for label, fn, block_q, keys, consts, stages in (
        ("tma loop 64x64 w4 s2 pdl mid", loop_tma_kernel, 64, 64,
         {"BLOCK_M": 64, "BLOCK_N": 64, "PDL": 3, "PART": 3, "VZERO": True}, 2),
        ("tma onetile m16 64 keys pdl", onetile_tma_kernel, 16, 64,
         {"BLOCK_M": 16, "BLOCK_N": 64, "PDL": 1, "PART": 3}, 1),
    ):  # fmt: skip
        args = fn.arg_names
        signature = {args[0]: f"tensordesc<fp16[{block_q}, 64]>",
                     args[1]: f"tensordesc<fp16[{keys}, 64]>",
                     args[2]: f"tensordesc<fp16[{keys}, 64]>", args[3]: "*fp16",
                     args[4]: "*i32", args[5]: "fp32"}  # fmt: skip
        signature |= dict.fromkeys(args[6:10], "i32")
        attrs = {(3,): [["tt.divisibility", 16]], (6,): [["tt.divisibility", 16]],
                 (7,): [["tt.divisibility", 16]]}  # fmt: skip
        consts = {"HEAD_DIM": 64} | consts
        try:
            k = compiled(fn, signature, consts, attrs, 4, stages, consts["PDL"])
        except Exception as exc:  # a compiler error: reported, the others still run
            print(f"{label}: FAILED: {type(exc).__name__}: {str(exc)[:300]}")
            failed += 1
            continue
        show(label, k)
    return 1 if failed else 0


def regs_report(capability: int = 90) -> int:
    """Compile the loop kernel as the default path's classes launch it, before and after the
    ninth session (the 1-D and 3-D grid with PDL after the q load, the table's kernel with and
    without ``LEAN``, the 3-stage class with and without it) for sm_``capability``, no GPU
    needed, and print registers and stack a thread (``cuobjdump -res-usage``) and shared
    memory: 128 threads a program fit 4 an SM at 128 registers, 3 at 129-168. Below sm_90
    (no ``griddepcontrol``) the PDL switches are compiled out, and each line says so."""
    import re
    import subprocess
    import tempfile
    from pathlib import Path

    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    fn = forward.varlen_fwd_kernel
    types = ["*fp16"] * 4 + ["*i32", "fp32"] + ["i32"] * 10
    signature = dict(zip(fn.arg_names, types, strict=False))
    attrs = {(i,): [["tt.divisibility", 16]] for i in (*range(4), *range(6, 14))}
    cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
    loop = {"HEAD_DIM": 64, "BLOCK_D": 64, "BLOCK_M": 64, "BLOCK_N": 64, "IEEE_DOT": False,
            "DELAY_CYCLES": 0, "CTAS": 0}  # fmt: skip
    print(f"triton {triton.__version__}, sm_{capability}, forward.varlen_fwd_kernel 64x64 w4")
    for label, pdl, stages, grid3, lean, early in (
        ("17-128 keys, PDL after the q load, 1-D grid", 3, 2, False, False, False),
        ("17-128 keys up to 2 waves, 3-D grid, EARLY", 3, 2, True, False, True),
        ("the table", 0, 2, False, False, False),
        ("the table, LEAN (the large grids' kernel in the ninth session)", 0, 2, False, True,
         False),
        ("129-512 keys, 3 stages, PDL after the store", 2, 3, False, False, False),
        ("the same, LEAN (config.LARGE_LOOP: past 65,535 pairs)", 2, 3, False, True, False),
        ("LEAN, 3-D grid, PDL after the q load (config.LARGE_GRID3: past the classes' grids)",
         3, 3, True, True, False),
    ):  # fmt: skip
        if pdl and capability < 90:  # ptxas refuses griddepcontrol before sm_90
            pdl, label = 0, f"{label} (PDL compiled out: sm_90 and later only)"
        consts = loop | {"PDL": pdl, "GRID3": grid3, "LEAN": lean, "EARLY": early}
        src = ASTSource(fn, signature | dict.fromkeys(consts, "constexpr"), constexprs=consts,
                        attrs=attrs)  # fmt: skip
        options = {"num_warps": 4, "num_stages": stages} | ({"launch_pdl": True} if pdl else {})
        k = triton.compile(src, target=GPUTarget("cuda", capability, 32), options=options)
        with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
            f.write(k.asm["cubin"])
            f.flush()
            res = subprocess.run([str(cuobjdump), "-res-usage", f.name], capture_output=True,
                                 text=True).stdout  # fmt: skip
        m = re.search(r"REG:\d+ STACK:\d+", res)
        print(f"{label}: {m.group(0) if m else '?'}, shared {k.metadata.shared} B", flush=True)
    return 0


def carveout_report() -> int:
    """On the GPU: how many programs of the 17-128 key class's kernel (the 3-D grid loop with
    ``early``, no PDL) an SM holds at each preferred shared-memory carveout, measured: every
    program spins ~100 µs (``DELAY_CYCLES``, a compiled function for each carveout), and a grid
    of 3 and of 4 programs an SM (B x 40 tokens, 12 heads) takes one wave or two. (1, 1): 4 an
    SM or more, (1, 2): 3, (2, 2): 2. ``launch.carveout_percent`` is the percent the default
    path sets for a cap."""
    from ragged.kernels.launch import set_carveout
    from ragged.testing import packed_qkv

    if not torch.cuda.is_available():
        print("--carveout-report: needs a CUDA GPU; none here.", file=sys.stderr)
        return 2
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    total_kb = torch.cuda.get_device_properties(0).shared_memory_per_multiprocessor // 1024
    spin = 200_000  # cycles: ~100 µs at 1.98 GHz
    print(f"{torch.cuda.get_device_name()}: {sms} SMs, {total_kb} KB shared an SM; each "
          f"program spins {spin} cycles")  # fmt: skip
    for n, percent in enumerate((-1, 0, 28, 43, 44, 57, 58, 71, 72, 85, 86, 100)):
        config = AttentionConfig(64, 64, 4, 2, delay_cycles=spin + n, grid3=True, early=True)
        waves = []
        for per_sm in (3, 4):
            q, k, v, cu, ms = packed_qkv([40] * (sms * per_sm // 12), 12, 64,
                                         dtype=torch.float16, device="cuda")  # fmt: skip
            out = torch.empty_like(q)
            attention.varlen_attention_triton(q, k, v, cu, ms, 0.125, out, config)
            plan = attention.launch_args(q, k, v, out, cu, ms, 0.125, config)[0]
            function, _, shared, _ = attention.launch_spec(plan.launcher.direct(plan))
            assert set_carveout(function, percent) == 0
            times = []
            for _ in range(5):
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(
                    enable_timing=True)  # fmt: skip
                start.record()
                attention.varlen_attention_triton(q, k, v, cu, ms, 0.125, out, config)
                end.record()
                torch.cuda.synchronize()
                times.append(start.elapsed_time(end) * 1000)
            waves.append(round(sorted(times)[2] / (spin / 1980)))
        print(f"carveout {percent:>3}% ({percent * total_kb / 100:6.1f} KB), {shared} B a "
              f"program: waves at 3 and 4 an SM {tuple(waves)}", flush=True)  # fmt: skip
    return 0


def live_report() -> int:
    """On the GPU: call ``ragged.varlen_attention`` (its fast paths) at BS 1 / 80% and 8 / 50%
    and print the global loads and stores of every kernel Triton's JIT compiled for it (the
    specialization the launch path actually got), from the compiled kernels' PTX."""
    import ragged
    from benchmarks.support import workloads
    from ragged.testing import packed_qkv

    for batch, prune in ((1, 0.8), (8, 0.5)):
        lengths = workloads.kernel_lengths(batch, prune, "uniform")
        q, k, v, cu, ms = packed_qkv(lengths, 12, 64, dtype=torch.float16, device="cuda")
        for _ in range(3):  # the first call plans and compiles; the later take the fast paths
            ragged.varlen_attention(q, k, v, cu, ms)
    torch.cuda.synchronize()
    print(f"triton {triton.__version__}, {torch.cuda.get_device_name()}: the kernels compiled "
          "by ragged.varlen_attention (every class of head_dim 64, fp16)")  # fmt: skip
    for fn in (forward.varlen_fwd_kernel, forward.onetile_kernel, forward.specloop_kernel):
        for cache in fn.device_caches.values():
            for compiled in cache[0].values():
                consts = dict(compiled.src.constants)
                attrs = getattr(compiled.src, "attrs", {})
                print(f"{fn.__name__} {consts} aligned args {sorted(attrs)}")
                md = compiled.metadata
                print(f"    warps {md.num_warps} stages {md.num_stages} shared {md.shared} B")
                print(f"    PTX  {_count(PTX_OPS, compiled.asm['ptx'])}", flush=True)
    return 0


if __name__ == "__main__":
    if "--live-report" in sys.argv:
        raise SystemExit(live_report())
    if "--carveout-report" in sys.argv:
        raise SystemExit(carveout_report())
    if "--regs-report" in sys.argv:  # optionally followed by the SM (default 90)
        after = sys.argv[sys.argv.index("--regs-report") + 1 :]
        raise SystemExit(regs_report(int(after[0]) if after else 90))
    if "--load-report" in sys.argv:  # optionally followed by the SM (default 90)
        after = sys.argv[sys.argv.index("--load-report") + 1 :]
        raise SystemExit(load_report(int(after[0]) if after else 90))
    if "--same-ptx" in sys.argv:  # optionally followed by the SM (default 90)
        after = sys.argv[sys.argv.index("--same-ptx") + 1 :]
        raise SystemExit(same_ptx(int(after[0]) if after else 90))
    from experiments import kernel_floor

    raise SystemExit(kernel_floor.main(["--parts", *sys.argv[1:]]))
