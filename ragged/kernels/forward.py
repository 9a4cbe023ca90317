"""The Triton kernels of the ragged attention forward: the key-tile loop (``varlen_fwd_kernel``,
FlashAttention-2's online softmax over key tiles, a 1-D grid) and the one-tile kernel of short
batches (``onetile_kernel``: every key in one tile, speculative start, a 3-D grid), with the
grid dependency control of a programmatic dependent launch (``gdc_*``). ``attention.py`` plans
and launches them.

Both take the same 16 runtime parameters: q, k, v, out, cu_seqlens, the scale times log2(e),
the eight strides and two ints; the C++ fast path launches either through one signature.
"""

from __future__ import annotations

import triton
import triton.language as tl


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


@triton.jit
def _online_softmax_step(s, v, m_i, l_i, acc, IEEE_DOT: tl.constexpr):
    """One key tile of FlashAttention-2's online softmax: (m_i, l_i, acc) after scores ``s``
    [BLOCK_M, BLOCK_N] fp32 (scaled by ``qk_scale``, keys outside the sequence -inf) and
    ``v`` [BLOCK_N, BLOCK_D] of the tile; ``m_i``, ``l_i`` [BLOCK_M] and ``acc``
    [BLOCK_M, BLOCK_D] fp32, the running max, sum and unnormalised output (inlined: the
    compiled loop is the same as with these lines written out, SASS compared for sm_90)."""
    m_new = tl.maximum(m_i, tl.max(s, 1))
    p = tl.math.exp2(s - m_new[:, None])
    alpha = tl.math.exp2(m_i - m_new)
    l_i = l_i * alpha + tl.sum(p, 1)
    if IEEE_DOT:
        pv = tl.dot(p.to(v.dtype), v, input_precision="ieee")
    else:
        pv = tl.dot(p.to(v.dtype), v)
    return m_new, l_i, acc * alpha[:, None] + pv


@triton.jit
def program_tile(GRID3: tl.constexpr, num_m_blocks, num_heads):
    """(query tile, head, sequence) of this program: the 3-D grid's (query tiles, heads,
    sequences) axes, with no integer division before the first load, or the 1-D grid's index
    unflattened."""
    if GRID3:
        m_block = tl.program_id(0)
        head = tl.program_id(1)
        seq = tl.program_id(2)
    else:
        pid = tl.program_id(0)
        m_block = pid % num_m_blocks
        seq_head = pid // num_m_blocks
        head = seq_head % num_heads
        seq = seq_head // num_heads
    return m_block, head, seq


@triton.jit
def query_tile(Q, K, V, qk_scale, row0, seq_len, m_start, head,
               stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh,
               HEAD_DIM: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, IEEE_DOT: tl.constexpr, LEAN: tl.constexpr,
               TRIGGER: tl.constexpr, bounds=None, READ: tl.constexpr = False):  # fmt: skip
    """Attention of query rows ``m_start .. m_start + BLOCK_M`` of one sequence (rows ``row0``
    (int64) .. ``row0 + seq_len`` of q, k and v) and one head: (acc [BLOCK_M, BLOCK_D] fp32,
    normalised, and with ``READ`` ``bounds[0]`` and ``bounds[1]`` (int32), loaded once q's load
    is issued, else 0 and 0). Rows and columns past the sequence and head_dim are 0 in every
    load. ``TRIGGER``: ``griddepcontrol.launch_dependents`` once q's load is issued."""
    offs_m = m_start + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    m_ok = offs_m < seq_len
    head64 = head.to(tl.int64)

    q_ptrs = Q + (row0 + offs_m[:, None]) * stride_qt + head64 * stride_qh + offs_d[None, :]
    q = tl.load(q_ptrs, mask=m_ok[:, None] & d_ok[None, :], other=0.0)
    k_base = K + row0 * stride_kt + head64 * stride_kh
    v_base = V + row0 * stride_vt + head64 * stride_vh

    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    if TRIGGER:  # between the two: 32 / 80% 3.81 vs 4.01 µs after the store (H100)
        gdc_launch_dependents()
    first_now = 0
    last_now = 0
    if READ:  # here, not before q's load: 8 / 50% 4.00 vs 4.09 µs read at once (H100)
        first_now = tl.load(bounds)
        last_now = tl.load(bounds + 1)
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
        if LEAN:
            if n_start + BLOCK_N > seq_len:  # only this tile has keys past the end
                s = tl.where(n_ok[None, :], s, float("-inf"))
            # qk_scale > 0: max(s) x scale is max(s x scale), rounded alike
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            p = tl.math.exp2(tl.fma(s, qk_scale, -m_new[:, None]))
            if n_start > 0:  # on the first tile m_i is -inf: alpha 0, acc and l_i 0
                alpha = tl.math.exp2(m_i - m_new)
                l_i = l_i * alpha
                acc = acc * alpha[:, None]
            l_i += tl.sum(p, 1)
            if IEEE_DOT:
                acc = tl.dot(p.to(v.dtype), v, acc, input_precision="ieee")
            else:
                acc = tl.dot(p.to(v.dtype), v, acc)
            m_i = m_new
        else:
            s = tl.where(n_ok[None, :], s * qk_scale, float("-inf"))
            m_i, l_i, acc = _online_softmax_step(s, v, m_i, l_i, acc, IEEE_DOT)

    if LEAN:
        return acc * (1.0 / l_i)[:, None], first_now, last_now
    else:
        return acc / l_i[:, None], first_now, last_now


# Strides stay specializable: Triton's "divisible by 16" lets it emit 16-byte loads (2.5x faster
# at BS=64/0% than tl.multiple_of hints on unspecialized strides, which it ignored).
@triton.jit(
    do_not_specialize=["cu_seqlens", "num_heads", "num_m_blocks"],
    do_not_specialize_on_alignment=["cu_seqlens"],
)
def varlen_fwd_kernel(
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
    GRID3: tl.constexpr = False,
    LEAN: tl.constexpr = False,
    EARLY: tl.constexpr = False,
    CTAS: tl.constexpr = 0,
):  # fmt: skip
    # PDL (variants.py): a programmatic dependent launch; 1: the next kernel may launch at once,
    # 2: once every program has stored its tile (or had nothing to do), 3: once every program
    # has issued its q load (or had nothing to do), before its key tiles. 0/False: none.
    # GRID3: the 3-D grid (query tile, head, sequence) of the other kernels, no integer
    # divisions before the cu_seqlens load (the last two ints then total_tokens and the
    # unused guess_len). LEAN: the same
    # softmax in fewer instructions a key tile (docs/kernel.md, ninth session): the scale in
    # the exponent's fma, the key mask only on the tile that crosses the sequence's end, no
    # rescale on the first tile, one reciprocal a row for the division.
    # EARLY (GRID3 only): the sequence's bounds read before the wait too, while the kernel
    # before may still run and write them, and the tile computed from them; read again once
    # q's load is issued, and the tile computed again from those where they differ. Exact, and
    # the first round overlaps the kernel before: 8 / 50% 4.00 vs 4.06 µs (H100; docs/kernel.md,
    # eleventh session).
    # CTAS: not read here. The programs an SM the launch caps this kernel at (0: none;
    # launch.occupy sets it on the compiled function), a constexpr so that a capped launch
    # has a compiled function of its own.
    if PDL == 1:
        gdc_launch_dependents()
    m_block, head, seq = program_tile(GRID3, num_m_blocks, num_heads)
    if EARLY:
        total = num_heads  # the 3-D grid's total_tokens
        # .cg: no L1 line of these for the second read to hit
        first = tl.load(cu_seqlens + seq, cache_modifier=".cg")
        last = tl.load(cu_seqlens + seq + 1, cache_modifier=".cg")
        # Bounded to q's rows: a value not yet written addresses nothing outside q, k and v
        # (and loops over at most every row once).
        early_start = tl.minimum(tl.maximum(first, 0), total)
        early_len = tl.minimum(tl.maximum(last - early_start, 0), total - early_start)
    if PDL:  # the kernel before this one has finished writing what it reads
        gdc_wait()

    if EARLY:
        # Both branches below set these; set here too, the SASS is the build that was timed
        # (without these lines it schedules otherwise)
        seq_start = first
        seq_end = last
        m_start = m_block * BLOCK_M
        acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
        if m_start < early_len:
            acc, seq_start, seq_end = query_tile(
                Q, K, V, qk_scale, early_start.to(tl.int64), early_len, m_start, head,
                stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, HEAD_DIM,
                BLOCK_D, BLOCK_M, BLOCK_N, IEEE_DOT, LEAN, PDL == 3, cu_seqlens + seq,
                True)  # fmt: skip
        else:
            seq_start = tl.load(cu_seqlens + seq)
            seq_end = tl.load(cu_seqlens + seq + 1)
        seq_len = seq_end - seq_start
        # Two branches, as in the code measured; the first: the kernel before wrote the bounds
        if (seq_start != first) | (seq_end != last):
            if m_start < seq_len:
                acc, _, _ = query_tile(Q, K, V, qk_scale, seq_start.to(tl.int64), seq_len,
                                       m_start, head, stride_qt, stride_qh, stride_kt,
                                       stride_kh, stride_vt, stride_vh, HEAD_DIM, BLOCK_D,
                                       BLOCK_M, BLOCK_N, IEEE_DOT, LEAN, False)  # fmt: skip
    else:
        seq_start = tl.load(cu_seqlens + seq)
        seq_len = tl.load(cu_seqlens + seq + 1) - seq_start
        m_start = m_block * BLOCK_M
    if m_start < seq_len:
        if not EARLY:
            acc, _, _ = query_tile(Q, K, V, qk_scale, seq_start.to(tl.int64), seq_len, m_start,
                                   head, stride_qt, stride_qh, stride_kt, stride_kh, stride_vt,
                                   stride_vh, HEAD_DIM, BLOCK_D, BLOCK_M, BLOCK_N, IEEE_DOT,
                                   LEAN, PDL == 3)  # fmt: skip
        offs_m = m_start + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, BLOCK_D)
        o_ptrs = (O + (seq_start.to(tl.int64) + offs_m[:, None]) * stride_ot
                  + head.to(tl.int64) * stride_oh + offs_d[None, :])  # fmt: skip
        tl.store(o_ptrs, acc.to(O.dtype.element_ty),
                 mask=(offs_m < seq_len)[:, None] & (offs_d < HEAD_DIM)[None, :])  # fmt: skip
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


# The one-tile kernel: on the default path for the short-batch classes (config.short_batch),
# with candidates of it in variants.py (whose docstring says what each switch does).
@triton.jit
def _load_qkv(q_head, k_head, v_head, row0, offs_m, offs_n, offs_d, m_ok, n_ok, d_ok,
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
def onetile_kernel(
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
        gdc_launch_dependents()
    m_block, head, seq = program_tile(GRID3, n1, n0)
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
        gdc_wait()

    if SPECULATE:  # issued before the sequence bounds are known
        g0 = seq.to(tl.int64) * n1  # guess_len
        q, k, v = _load_qkv(q_head, k_head, v_head, g0, offs_m, offs_n, offs_d,
                            g0 + offs_m < n0, g0 + offs_n < n0, d_ok,  # total_tokens
                            stride_qt, stride_kt, stride_vt)  # fmt: skip
    seq_start = tl.load(cu_seqlens + seq)
    seq_end = tl.load(cu_seqlens + seq + 1)
    seq_len = seq_end - seq_start
    if m_block * BLOCK_M < seq_len:
        row0 = seq_start.to(tl.int64)
        m_ok = offs_m < seq_len
        n_ok = offs_n < seq_len
        from_start: tl.constexpr = True  # the plain kernel's loads (no branch)
        if SPECULATE:
            from_start = row0 != g0  # a wrong guess: loaded again, as the plain kernel does
        if from_start:
            q, k, v = _load_qkv(q_head, k_head, v_head, row0, offs_m, offs_n, offs_d, m_ok, n_ok,
                                d_ok, stride_qt, stride_kt, stride_vt)  # fmt: skip
        if SPECULATE:
            # Rows past the sequence hold the next sequence's values: zero them so that a
            # non-finite value there cannot reach this sequence through p * v (p is 0 there).
            v = tl.where(n_ok[:, None], v, 0.0)
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
        gdc_launch_dependents()


# The key-tile loop of the short-batch classes, written as the one-tile kernel starts: a 3-D
# grid and a speculative start, so that q and the first key tiles are in flight before the
# sequence bounds arrive (variants.py's ``specloop`` candidates).
@triton.jit
def _key_tiles(q, k_head, v_head, row0, total, seq_len, offs_n, offs_d, d_ok, qk_scale,
               stride_kt, stride_vt, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
               BLOCK_N: tl.constexpr, keys, IEEE_DOT: tl.constexpr,
               FOLD: tl.constexpr, FULL_SKIP: tl.constexpr, V_SPEC: tl.constexpr):  # fmt: skip
    """(acc, l): the online softmax of q against keys ``row0 .. row0 + keys`` of one head in
    tiles of BLOCK_N (``keys`` a constexpr on the speculative path: a trip count known at
    compile time, so the software pipeline's prologue issues the first tiles' loads before
    ``seq_len`` is known; ``seq_len`` on the others). k is masked by the
    tensor's end only (its address never depends on ``seq_len``), v also by ``seq_len`` (rows
    past the sequence are zero, so a non-finite value there cannot reach it through p * v),
    unless ``V_SPEC``: v masked as k, so its loads need no ``seq_len`` either (a non-finite
    value in the next sequence's rows then reaches this one as NaN)."""
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, BLOCK_D], dtype=tl.float32)
    for n_start in range(0, keys, BLOCK_N):
        offs_kn = n_start + offs_n
        in_t = row0 + offs_kn < total
        n_ok = offs_kn < seq_len
        k = tl.load(k_head + (row0 + offs_kn[None, :]) * stride_kt + offs_d[:, None],
                    mask=in_t[None, :] & d_ok[:, None], other=0.0)  # fmt: skip
        v_ok = in_t
        if not V_SPEC:
            v_ok = in_t & n_ok
        v = tl.load(v_head + (row0 + offs_kn[:, None]) * stride_vt + offs_d[None, :],
                    mask=v_ok[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
        if IEEE_DOT:
            s = tl.dot(q, k, input_precision="ieee")
        else:
            s = tl.dot(q, k)
        if not FOLD:
            s = s * qk_scale
        if FULL_SKIP:  # a tile of keys all inside the sequence needs no mask
            if n_start + BLOCK_N > seq_len:
                s = tl.where(n_ok[None, :], s, float("-inf"))
        else:
            s = tl.where(n_ok[None, :], s, float("-inf"))
        m_i, l_i, acc = _online_softmax_step(s, v, m_i, l_i, acc, IEEE_DOT)
    return acc, l_i


@triton.jit
def _load_q(q_head, row0, offs_m, total, offs_d, d_ok, qk_scale, stride_qt, FOLD: tl.constexpr):
    """q's rows ``row0 + offs_m`` (inside the tensor; 0 past it), times the scale if FOLD."""
    q = tl.load(q_head + (row0 + offs_m[:, None]) * stride_qt + offs_d[None, :],
                mask=(row0 + offs_m < total)[:, None] & d_ok[None, :], other=0.0)  # fmt: skip
    if FOLD:  # exp2 with the scale folded into q: no multiply of the score tile
        q = (q * qk_scale).to(q.dtype)
    return q


@triton.jit(do_not_specialize=["cu_seqlens", "n0", "n1"],
            do_not_specialize_on_alignment=["cu_seqlens"])  # fmt: skip
def specloop_kernel(
    Q, K, V, O, cu_seqlens, qk_scale,
    stride_qt, stride_qh, stride_kt, stride_kh, stride_vt, stride_vh, stride_ot, stride_oh,
    n0, n1,
    HEAD_DIM: tl.constexpr,
    BLOCK_D: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    IEEE_DOT: tl.constexpr,
    SUB_M: tl.constexpr,
    KEYS: tl.constexpr,
    SPECULATE: tl.constexpr,
    FOLD: tl.constexpr,
    FULL_SKIP: tl.constexpr,
    V_SPEC: tl.constexpr,
    PDL: tl.constexpr,
):  # fmt: skip
    """The key-tile loop on the one-tile kernel's 3-D grid (query tiles of BLOCK_M rows,
    heads, sequences) and parameters (``n0``, ``n1`` = total_tokens, guess_len), over a
    compile-time number of key tiles: ``KEYS`` (max_seqlen's bucket, a multiple of BLOCK_N,
    at least max_seqlen) in tiles of ``BLOCK_N``.

    ``SPECULATE``: where ``guess_len`` > 0 (the host passes it for a uniform batch, total ==
    batch x max_seqlen, else 0), q and the key tiles are loaded from the guessed start (seq x
    guess_len) in the same load round as cu_seqlens (every load independent of it is issued
    before the first that depends on it), and the tile recomputed from the true start where
    the guess was wrong (a capacity-packed batch); without a guess (or SPECULATE), the loop
    kernel's loads: as many key tiles as the sequence has, nothing for a query tile past it.
    ``SUB_M`` < BLOCK_M: a program walks its BLOCK_M rows in tiles of SUB_M (BLOCK_M = KEYS:
    one program per (sequence, head) pair). ``FOLD``: the scale folded into q. ``FULL_SKIP``:
    no key mask on tiles inside the sequence. ``V_SPEC``: v's loads independent of the
    sequence bounds too (``_key_tiles``). ``PDL`` as the loop kernel's."""
    if PDL == 1:
        gdc_launch_dependents()
    m_block = tl.program_id(0)
    head = tl.program_id(1)
    seq = tl.program_id(2)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_ok = offs_d < HEAD_DIM
    head64 = head.to(tl.int64)
    q_head = Q + head64 * stride_qh
    k_head = K + head64 * stride_kh
    v_head = V + head64 * stride_vh
    g0 = seq.to(tl.int64) * n1
    if PDL:
        gdc_wait()
    seq_start = tl.load(cu_seqlens + seq)
    seq_end = tl.load(cu_seqlens + seq + 1)
    seq_len = seq_end - seq_start
    row0 = seq_start.to(tl.int64)
    for sub in tl.static_range(0, BLOCK_M, SUB_M):  # unrolled: the key loop stays innermost
        offs_m = m_block * BLOCK_M + sub + tl.arange(0, SUB_M)
        acc = tl.zeros([SUB_M, BLOCK_D], dtype=tl.float32)
        l_i = tl.full([SUB_M], 1.0, dtype=tl.float32)
        todo = m_block * BLOCK_M + sub < seq_len
        if SPECULATE:
            if n1 > 0:  # addresses from the guess: issued before seq_start is known
                q = _load_q(q_head, g0, offs_m, n0, offs_d, d_ok, qk_scale, stride_qt, FOLD)
                acc, l_i = _key_tiles(q, k_head, v_head, g0, n0, seq_len, offs_n, offs_d, d_ok,
                                      qk_scale, stride_kt, stride_vt, SUB_M, BLOCK_D, BLOCK_N,
                                      KEYS, IEEE_DOT, FOLD, FULL_SKIP, V_SPEC)  # fmt: skip
                todo = todo & (row0 != g0)  # a wrong guess: again from the true start
        if todo:  # no guess, or a wrong one: the loop kernel's loads, as many tiles as keys
            q = _load_q(q_head, row0, offs_m, n0, offs_d, d_ok, qk_scale, stride_qt, FOLD)
            acc, l_i = _key_tiles(q, k_head, v_head, row0, n0, seq_len, offs_n, offs_d, d_ok,
                                  qk_scale, stride_kt, stride_vt, SUB_M, BLOCK_D, BLOCK_N,
                                  seq_len, IEEE_DOT, FOLD, FULL_SKIP, V_SPEC)  # fmt: skip
        m_ok = offs_m < seq_len
        acc = acc / l_i[:, None]
        o_ptrs = O + (row0 + offs_m[:, None]) * stride_ot + head64 * stride_oh + offs_d[None, :]
        tl.store(o_ptrs, acc.to(O.dtype.element_ty), mask=m_ok[:, None] & d_ok[None, :])
    if PDL == 2:
        gdc_launch_dependents()
