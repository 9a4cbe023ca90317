"""Candidate launch shapes of the ragged attention kernel for short sequences, measured by
``python -m experiments.kernel_floor``. Five are on ``ragged.varlen_attention``'s path for the
short-batch classes where the sweeps showed them faster (``config.short_batch``): ``onetile spec
3d m16 w4 pdl`` (and ``pdl late``), ``loop 64x64 w4 s2 pdl mid`` (17-128 keys; ``loop 64x64 w4
s2 pdl late`` before it), ``loop 64x64 w4 s3 pdl late`` (129-512 keys) and ``specloop 64x64 w4
s2 pdl`` (33-64 keys, up to half a wave of pairs); the others are not.

At BS 1 / 80% pruning (40 tokens, 12 heads) the default kernel costs ~1.9 µs more than an empty
kernel (H100): a chain of dependent latencies, not arithmetic. What each variant changes:

  * ``loop``: the default kernel (``forward.varlen_fwd_kernel``, online softmax over key
    tiles) with another tile / warps / stages; ``num_stages=1`` drops the software pipeline's
    prologue (async copies to shared memory, waits), which a one- or two-tile loop never
    amortises.
  * ``onetile``: ``onetile_kernel``: the whole sequence's keys in ONE tile of
    ``next_power_of_2(max_seqlen)`` columns (a launch per length class, chosen on the host from
    max_seqlen): no loop, no loop bound that depends on the length, no online rescaling. The
    sequence bounds (cu_seqlens[seq], cu_seqlens[seq + 1]) are one load round, then q, k and v
    are issued together, and the key mask applies in the softmax only. The chain is then
    cu_seqlens -> q/k/v -> two dots -> store. Programs stay one per (query tile, sequence,
    head), so short sequences never serialise behind long ones; ``block_m`` sets how many.
  * ``onetile spec``: as ``onetile``, with q, k and v first loaded from the rows the sequence
    would start at were all lengths ``total_tokens // batch`` (exact for uniform batches, as
    fixed-ratio pruning makes them), in the same load round as cu_seqlens; loaded again from
    the true start only where the guess was wrong. Uniform batches lose the dependent round.
  * ``onetile spec 3d``: as ``onetile spec``, launched on a 3-D grid (query tile, head,
    sequence): the sequence index the first loads need comes without two integer divisions.
  * ``specloop``: ``forward.specloop_kernel``: the loop's tiles on the one-tile kernel's 3-D
    grid and parameters, over a compile-time number of key tiles (max_seqlen's bucket) where
    the batch is uniform, from the guessed start: q and the first key tiles are issued before
    cu_seqlens arrives (the loop kernel waits for it first), checked against it, recomputed
    from the true start where wrong; ``nospec`` without the guess (the loop's loads, on the
    3-D grid); ``fold``: the scale folded into q (exp2 of the raw dot); ``skip``: no key mask on
    tiles inside the sequence; ``vspec``: v's loads independent of cu_seqlens too; ``pair``: one
    program per (sequence, head) walking its query tiles (a persistent program per pair).
  * ``... pdl``: launched as a programmatic dependent launch (Hopper's grid dependency
    control): every program first lets the next kernel of the stream launch, then waits for
    the kernel before it to finish (``griddepcontrol.wait``) before its first load. The next
    call's programs are then resident and waiting while this one runs, so the launch latency
    between back-to-back calls overlaps the work; what any call reads is still written by
    then. On the interpreter (no such instruction) it runs without it: the same arithmetic.
    ``... pdl late``: the same, but the next kernel may launch only once every program has
    stored its output (or had none): its programs then wait for less time, holding no SM
    slot that this kernel's programs could still use. ``... pdl mid`` (the loop): between
    the two, once every program has issued its q load (or had none), before its key tiles.

Each variant is checked against ``ragged.reference`` before it is timed
(tests/test_attention.py on the interpreter, the sweep on the GPU).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton

from . import attention, forward
from .config import AttentionConfig

ONETILE_MAX = 256  # the longest max_seqlen a one-tile launch takes (key tile of 256 columns)
# fp32 tiles take twice the shared memory: k and v of 256 x 64 alone would be 128 KB.
ONETILE_MAX_FP32 = 64
# One warp holding 16 x 256 fp32 scores spills (ptxas, sm_90: 255 registers and ~700 bytes of
# stack a thread already at 4 warps) and took ptxas 90 s to compile here: up to 128 keys only.
ONETILE_MAX_ONE_WARP = 128
SPECLOOP_MAX = 512  # specloop: the longest max_seqlen (its key tiles are unrolled up to it)


onetile_kernel = forward.onetile_kernel  # the one-tile kernel (on the default path for its classes)


@dataclass(frozen=True)
class Variant:
    """One launch of the kernel: ``kind`` "loop" (the default kernel with ``block_m`` x
    ``block_n`` tiles), "onetile" (``onetile_kernel``; its key tile is
    ``next_power_of_2(max_seqlen)`` wide, ``block_n`` unused) or "specloop"
    (``forward.specloop_kernel``: ``block_m`` x ``block_n`` tiles on the 3-D grid, the key
    tiles of max_seqlen's bucket, the speculative start where ``speculate``)."""

    name: str
    kind: str
    block_m: int
    block_n: int = 0
    num_warps: int = 4
    num_stages: int = 2
    speculate: bool = False  # onetile: load from the uniform-length guess of the start first
    grid3: bool = False  # onetile: grid (query tiles, heads, sequences), no index divisions
    # A programmatic dependent launch (sm_90 and later): 0 none, 1 (True) the next kernel may
    # launch at once, 2 once every program stored its output, 3 (the loop only) once every
    # program issued its q load
    pdl: int = 0
    max_keys: int = 0  # onetile: the longest max_seqlen it takes (0: the rules of ``applies``)
    # specloop (``forward.specloop_kernel``): rows a program walks at a time (0: block_m), the
    # scale folded into q, no key mask on tiles inside the sequence
    sub_m: int = 0
    fold: bool = False
    full_skip: bool = False
    v_spec: bool = False  # specloop: v's loads independent of cu_seqlens too (no isolation)

    def applies(self, max_seqlen: int, dtype: torch.dtype = torch.float16) -> bool:
        """Whether this variant runs a batch whose longest sequence is ``max_seqlen``: a
        one-tile launch up to ``ONETILE_MAX`` keys, in fp32 (twice the shared memory a tile)
        up to ``ONETILE_MAX_FP32``, on one warp up to ``ONETILE_MAX_ONE_WARP``."""
        if self.kind == "loop":
            return True
        if self.kind == "specloop":  # a compile-time trip count: the buckets measured
            return max_seqlen <= (self.max_keys or SPECLOOP_MAX)
        if self.num_warps == 1 and max_seqlen > ONETILE_MAX_ONE_WARP:
            return False
        if self.max_keys and max_seqlen > self.max_keys:
            return False
        return max_seqlen <= (ONETILE_MAX_FP32 if dtype == torch.float32 else ONETILE_MAX)

    def config(self) -> AttentionConfig:
        return AttentionConfig(self.block_m, self.block_n, self.num_warps, self.num_stages)


def spec(name, block_m, block_n, num_warps, num_stages, *, speculate=True, pdl=2, **kw):
    """A ``specloop`` candidate (3-D grid; by default the speculative start, PDL after the
    store)."""
    return Variant(name, "specloop", block_m, block_n, num_warps, num_stages, speculate, True,
                   pdl, **kw)  # fmt: skip


# The sweep's candidates: ~10 compiles a workload class, well inside a 10-minute GPU call.
VARIANTS = (
    Variant("loop 64x64 w4 s1", "loop", 64, 64, 4, 1),
    Variant("loop 32x64 w4 s2", "loop", 32, 64, 4, 2),
    Variant("loop 16x64 w4 s1", "loop", 16, 64, 4, 1),
    Variant("onetile m16 w4", "onetile", 16, num_warps=4, num_stages=1),
    Variant("onetile m16 w2", "onetile", 16, num_warps=2, num_stages=1),
    Variant("onetile m16 w1", "onetile", 16, num_warps=1, num_stages=1),
    Variant("onetile m32 w4", "onetile", 32, num_warps=4, num_stages=1),
    Variant("onetile m64 w8", "onetile", 64, num_warps=8, num_stages=1),
    Variant("onetile spec 3d m16 w4", "onetile", 16, 0, 4, 1, speculate=True, grid3=True),
    Variant("onetile spec 3d m16 w1", "onetile", 16, 0, 1, 1, speculate=True, grid3=True),
    Variant("onetile spec 3d m32 w4", "onetile", 32, 0, 4, 1, speculate=True, grid3=True),
    # Larger query tiles: fewer programs re-reading a sequence's keys (BS 8 / 50%: 672
    # programs of 16 rows read 21 MB of K and V from L2, 96 of 128 rows 4.6 MB).
    Variant("onetile spec 3d m64 w4", "onetile", 64, 0, 4, 1, True, True, max_keys=128),
    Variant("onetile spec 3d m128 w4", "onetile", 128, 0, 4, 1, True, True, max_keys=128),
    Variant("onetile spec 3d m128 w8", "onetile", 128, 0, 8, 1, True, True, max_keys=128),
    Variant("onetile spec 3d m16 w2", "onetile", 16, 0, 2, 1, True, True, max_keys=128),
    Variant("loop 128x64 w8 s2", "loop", 128, 64, 8, 2),
    # Programmatic dependent launch: the launch latency between calls overlapped.
    Variant("loop 64x64 w4 s2 pdl", "loop", 64, 64, 4, 2, pdl=True),
    Variant("onetile m16 w4 pdl", "onetile", 16, 0, 4, 1, pdl=True),
    Variant("onetile spec 3d m16 w4 pdl", "onetile", 16, 0, 4, 1, True, True, pdl=True),
    Variant("onetile spec 3d m64 w4 pdl", "onetile", 64, 0, 4, 1, True, True, True, 128),
    Variant("onetile spec 3d m32 w4 pdl", "onetile", 32, 0, 4, 1, True, True, True, 128),
    Variant("onetile spec 3d m16 w2 pdl", "onetile", 16, 0, 2, 1, True, True, True, 128),
    Variant("loop 128x64 w8 s2 pdl", "loop", 128, 64, 8, 2, pdl=True),
    Variant("onetile spec 3d m128 w8 pdl", "onetile", 128, 0, 8, 1, True, True, True, 128),
    Variant("loop 64x64 w4 s2 pdl late", "loop", 64, 64, 4, 2, pdl=2),
    Variant("onetile spec 3d m16 w4 pdl late", "onetile", 16, 0, 4, 1, True, True, pdl=2),
    Variant("onetile spec 3d m64 w4 pdl late", "onetile", 64, 0, 4, 1, True, True, 2, 128),
    # BS 8 / 50% (8 x 99 tokens, 96 (sequence, head) pairs against 132 SMs): one program a
    # pair or two, every key in one tile, so K and V are read once a pair, one load round.
    Variant("onetile spec 3d m128 w4 pdl", "onetile", 128, 0, 4, 1, True, True, True, 128),
    Variant("onetile spec 3d m128 w8 pdl late", "onetile", 128, 0, 8, 1, True, True, 2, 128),
    Variant("onetile spec 3d m64 w2 pdl", "onetile", 64, 0, 2, 1, True, True, True, 128),
    Variant("onetile spec 3d m32 w2 pdl", "onetile", 32, 0, 2, 1, True, True, True, 128),
    Variant("onetile spec 3d m32 w4 pdl late", "onetile", 32, 0, 4, 1, True, True, 2, 128),
    # The loop with one 128-column key tile (no second iteration) and no pipeline prologue.
    Variant("loop 64x128 w4 s1 pdl late", "loop", 64, 128, 4, 1, pdl=2),
    Variant("loop 128x128 w8 s1 pdl late", "loop", 128, 128, 8, 1, pdl=2),
    Variant("loop 64x64 w4 s1 pdl late", "loop", 64, 64, 4, 1, pdl=2),
    Variant("loop 32x64 w4 s2 pdl late", "loop", 32, 64, 4, 2, pdl=2),
    # The fifth session's sweep, at BS 8 / 50% (docs/kernel.md): the loop kernel's tile with
    # every load that does not need cu_seqlens issued before it (``specloop``: the 3-D grid,
    # a compile-time number of key tiles, the speculative start), and the untried ideas.
    Variant("loop 64x64 w4 s3 pdl late", "loop", 64, 64, 4, 3, pdl=2),
    Variant("loop 64x64 w8 s2 pdl late", "loop", 64, 64, 8, 2, pdl=2),
    spec("specloop 64x64 w4 s2 pdl late", 64, 64, 4, 2),
    spec("specloop 64x64 w4 s3 pdl late", 64, 64, 4, 3),
    spec("specloop nospec 64x64 w4 s2 pdl late", 64, 64, 4, 2, speculate=False),
    spec("specloop 64x64 w4 s2 pdl", 64, 64, 4, 2, pdl=1),
    spec("specloop 64x64 w4 s2", 64, 64, 4, 2, pdl=0),
    spec("specloop fold 64x64 w4 s2 pdl late", 64, 64, 4, 2, fold=True),
    spec("specloop skip 64x64 w4 s2 pdl late", 64, 64, 4, 2, full_skip=True),
    spec("specloop fold skip 64x64 w4 s3 pdl late", 64, 64, 4, 3, fold=True, full_skip=True),
    spec("specloop vspec 64x64 w4 s3 pdl late", 64, 64, 4, 3, v_spec=True),
    spec("specloop vspec 64x64 w4 s2 pdl late", 64, 64, 4, 2, v_spec=True),
    spec("specloop 64x64 w8 s2 pdl late", 64, 64, 8, 2),
    spec("specloop 64x32 w4 s3 pdl late", 64, 32, 4, 3),
    spec("specloop 32x64 w4 s2 pdl late", 32, 64, 4, 2),
    spec("specloop 128x64 w8 s2 pdl late", 128, 64, 8, 2),
    # a persistent program per (sequence, head) pair: all 96 at BS 8 / 50%, walking its
    # query tiles of 64 rows (block_m = 128: the 65-128 bucket in one program)
    spec("specloop pair 128/64x64 w4 s2 pdl late", 128, 64, 4, 2, max_keys=128, sub_m=64),
    # The sixth session's, for 257-512 keys (DeiT-B 384 after the prune point: 5-8 key tiles):
    # a deeper pipeline, and PDL at once with 3 stages
    Variant("loop 64x64 w4 s4 pdl late", "loop", 64, 64, 4, 4, pdl=2),
    Variant("loop 64x64 w4 s3 pdl", "loop", 64, 64, 4, 3, pdl=True),
    spec("specloop 64x64 w4 s3 pdl", 64, 64, 4, 3, pdl=1),
    spec("specloop 64x64 w4 s4 pdl late", 64, 64, 4, 4),
    # The seventh session's: the loop with PDL triggered between the two, once every program
    # has issued its q load (the default at 17-128 keys since; forward.varlen_fwd_kernel's
    # PDL 3), and with 3 stages (129-512 keys)
    Variant("loop 64x64 w4 s2 pdl mid", "loop", 64, 64, 4, 2, pdl=3),
    Variant("loop 64x64 w4 s3 pdl mid", "loop", 64, 64, 4, 3, pdl=3),
)


def onetile_block_n(max_seqlen: int) -> int:
    """The key tile of a one-tile launch: every key of the longest sequence."""
    return max(16, triton.next_power_of_2(max(max_seqlen, 1)))


def run(
    variant: Variant,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens: torch.Tensor,
    max_seqlen: int,
    softmax_scale: float,
    out: torch.Tensor,
) -> torch.Tensor:
    """Launch ``variant`` on inputs ``ragged.varlen_attention`` would accept (q, k, v, out
    [T, heads, head_dim] with unit stride in head_dim, cu_seqlens int32 [B + 1]) -> out.
    No host synchronisation: capturable in a CUDA graph. ValueError where it does not apply."""
    if not variant.applies(max_seqlen, q.dtype):
        raise ValueError(f"{variant.name}: max_seqlen {max_seqlen} too long for one tile")
    if variant.pdl and q.is_cuda and torch.cuda.get_device_capability(q.device) < (9, 0):
        raise ValueError(f"{variant.name}: griddepcontrol needs sm_90 or later")
    if variant.kind == "loop" and variant.pdl and q.is_cuda:
        plan, grid, scalars, _ = attention.launch_args(q, k, v, out, cu_seqlens, max_seqlen,
                                                softmax_scale, variant.config())  # fmt: skip
        if grid[0]:
            forward.varlen_fwd_kernel[grid](
                q, k, v, out, cu_seqlens, *scalars, **(plan.constexprs | {"PDL": variant.pdl}),
                num_warps=variant.num_warps, num_stages=variant.num_stages, launch_pdl=True,
            )  # fmt: skip
        return out
    if variant.kind == "loop":
        return attention.varlen_attention_triton(
            q, k, v, cu_seqlens, max_seqlen, softmax_scale, out, variant.config()
        )
    total, heads, head_dim = q.shape
    batch = cu_seqlens.shape[0] - 1
    num_m_blocks, programs = attention.grid_of(max_seqlen, variant.block_m, batch, heads)
    if programs == 0:
        return out
    if variant.kind == "specloop":
        return run_specloop(variant, q, k, v, cu_seqlens, max_seqlen, softmax_scale, out)
    if variant.grid3 and (heads > 65535 or batch > 65535):
        raise ValueError(f"{variant.name}: a 3-D grid holds at most 65535 heads and sequences")
    grid = (num_m_blocks, heads, batch) if variant.grid3 else (programs,)
    pdl = variant.pdl if q.is_cuda else 0  # the interpreter has no grid dependency control
    launch = {"launch_pdl": True} if pdl else {}
    if variant.speculate and not variant.grid3:
        raise ValueError(f"{variant.name}: a speculative start needs the 3-D grid")
    ints = (total, total // batch) if variant.grid3 else (heads, num_m_blocks)
    onetile_kernel[grid](
        q, k, v, out, cu_seqlens, softmax_scale * attention.LOG2E,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), *ints,
        HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_M=variant.block_m, BLOCK_N=onetile_block_n(max_seqlen),
        IEEE_DOT=q.dtype == torch.float32, SPECULATE=variant.speculate, GRID3=variant.grid3,
        PDL=pdl, num_warps=variant.num_warps, num_stages=variant.num_stages, **launch,
    )  # fmt: skip
    return out


def specloop_keys(max_seqlen: int, block_n: int) -> int:
    """``specloop``'s compile-time key count: max_seqlen's power-of-two bucket, at least one
    key tile."""
    return max(block_n, triton.next_power_of_2(max(max_seqlen, 1)))


def run_specloop(variant, q, k, v, cu_seqlens, max_seqlen, softmax_scale, out):
    """``forward.specloop_kernel`` on the 3-D grid (query tiles, heads, sequences)."""
    total, heads, head_dim = q.shape
    batch = cu_seqlens.shape[0] - 1
    if heads > 65535 or batch > 65535:
        raise ValueError(f"{variant.name}: a 3-D grid holds at most 65535 heads and sequences")
    num_m_blocks, _ = attention.grid_of(max_seqlen, variant.block_m, batch, heads)
    pdl = variant.pdl if q.is_cuda else 0
    launch = {"launch_pdl": True} if pdl else {}
    forward.specloop_kernel[(num_m_blocks, heads, batch)](
        q, k, v, out, cu_seqlens, softmax_scale * attention.LOG2E,
        q.stride(0), q.stride(1), k.stride(0), k.stride(1), v.stride(0), v.stride(1),
        out.stride(0), out.stride(1), total, attention.guess_len(total, batch, max_seqlen),
        HEAD_DIM=head_dim, BLOCK_D=max(16, triton.next_power_of_2(head_dim)),
        BLOCK_M=variant.block_m, BLOCK_N=variant.block_n, IEEE_DOT=q.dtype == torch.float32,
        SUB_M=variant.sub_m or variant.block_m, KEYS=specloop_keys(max_seqlen, variant.block_n),
        SPECULATE=variant.speculate, FOLD=variant.fold, FULL_SKIP=variant.full_skip,
        V_SPEC=variant.v_spec, PDL=pdl,
        num_warps=variant.num_warps, num_stages=variant.num_stages, **launch,
    )  # fmt: skip
    return out
