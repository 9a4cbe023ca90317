"""Which launch configuration the attention kernel uses: the table measured on one GPU
(``attention_config``), or this device's cached sweep (``config_for``; the sweep itself is
``tuning.tune``).

``kernels.attention`` plans its launches from here and ``kernels.tuning`` sweeps against it;
neither is imported here, so the two import this module and not each other.
"""

from __future__ import annotations

import functools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import torch
import triton

SWEPT = {"NVIDIA H100 80GB HBM3"}  # where attention_config's table was measured
SHORT = 16  # the longest max_seqlen of the "short" class: the table's one max_seqlen boundary
MAX_LENGTH = 2**31 - 1


@dataclass(frozen=True)
class AttentionConfig:
    """Tile sizes and launch parameters of the ragged attention kernel."""

    block_m: int
    block_n: int
    num_warps: int
    num_stages: int
    # Calibration only: every program spins this many SM cycles before it exits, a kernel
    # slowdown of known size for ragbench's detector (benchmarks/support/inject.py). 0 compiles
    # it out.
    delay_cycles: int = 0
    # "loop": the key-tile loop (forward.varlen_fwd_kernel, a 1-D grid); "onetile": every
    # key in one tile of block_n columns, speculative start, 3-D grid (forward.onetile_kernel)
    kind: str = "loop"
    # A programmatic dependent launch (sm_90 and later): 0 none, 1 the next kernel may launch
    # at once, 2 once every program stored its tile (attention.py's PDL constexpr)
    pdl: int = 0
    # The loop on the 3-D grid (query tiles, heads, sequences) and with its leaner softmax
    # (forward.varlen_fwd_kernel's GRID3 and LEAN)
    grid3: bool = False
    lean: bool = False
    # The loop reads its sequence's bounds before the wait for the kernel before it too, and
    # checks them once q's load is issued (forward.varlen_fwd_kernel's EARLY): the 3-D grid
    # only, whose last two ints hold total_tokens, which bounds that early read
    early: bool = False
    # At most this many of the loop's programs an SM (launch.occupy: the compiled function's
    # shared-memory carveout; forward.varlen_fwd_kernel's CTAS); 0: as many as fit
    ctas: int = 0

    def __post_init__(self):
        if self.early and not (self.kind == "loop" and self.grid3):
            raise ValueError("early: the loop on the 3-D grid only (its ints hold total_tokens)")
        if (self.ctas and self.kind != "loop") or self.ctas < 0:
            raise ValueError(f"ctas {self.ctas}: a cap of the loop's programs an SM, or 0")


@functools.lru_cache(maxsize=1024)
def attention_config(
    head_dim: int, max_seqlen: int, dtype: torch.dtype, capability: tuple[int, int]
) -> AttentionConfig:
    """The launch configuration, a plain function of the problem shape and the device.

    ``capability`` is ``torch.cuda.get_device_capability()``, or ``(0, 0)`` on the CPU (the
    Triton interpreter, where only correctness matters). The table was measured on sm_90
    (``python -m scripts.kernel_bench --sweep``, gpu_us, 12 heads); on other GPUs
    ``tuning.tune()`` sweeps once and ``config_for`` uses what it found. Best tile vs
    the runner-up, H100:
      d<=64 fp16/bf16: 64x64 (BS=64/L=197: 56.2 us vs 58.2 for 64x32, 62.5 for 128x64;
                       BS=32/L=40: 4.47 vs 4.67); L<=16: 16x16 (BS=4: 2.59 vs 2.65).
      64<d<=128, d>128: 64x32 (d=128 BS=32/L=197: 53.6 vs 57.9 for 64x64; d=256: 30.1 vs 37.8).
      fp32 (IEEE dots): 32x32 (516 us; 64x64 spills: 5.8 ms).
    The interpreter runs 128x128 past 16 keys, fp32 too: a program is numpy over its tiles,
    and its cost is the number of operations, not their size (the CPU's KernelError table,
    both dtypes: 9.1 s at 64x64, 4.4 s at 128x128, 3.4 s at 256x128; 128 rows keep two
    query tiles at 197 tokens, so the tests still cross a tile boundary on both axes).
    4 warps and 2 stages throughout (8 warps lost everywhere but 128-row tiles; stages <1%).
    """
    block_d = max(16, triton.next_power_of_2(head_dim))
    if dtype == torch.float32 and capability != (0, 0):
        block_m, block_n = 32, 32
    elif max_seqlen <= SHORT:
        block_m, block_n = 16, 16
    elif capability == (0, 0):
        block_m, block_n = 128, 128
    elif block_d <= 64:
        block_m, block_n = 64, 64
    else:
        block_m, block_n = 64, 32
    return AttentionConfig(block_m, block_n, num_warps=4, num_stages=2)


# Short batches (sm_90 and later, fp16/bf16, head_dim 33-64, 17-512 keys): a choice by the
# number of programs as well as by length, from one sweep of ``python -m experiments.kernel_floor``
# (H100, 12 workloads; docs/kernel.md "Short batches"). Times of the old default, µs per call:
#   one tile of 16 rows, PDL at once, while its grid is one wave (<= WAVE programs) and the
#   sequences fit one 128-column tile: BS 1 / 80% 1.99 vs 2.94, BS 2 / 80% 2.17 vs 2.97;
#   PDL after the store (at 256 keys the 1 / 0% class), "late": 1 / 50% 2.68 vs 3.74.
#   else the 64 x 64 loop with PDL after the store while its grid is at most LATE_WAVES waves:
#   4 / 80% 2.48 vs 2.86, 8 / 50% 4.21 vs 4.68, 32 / 80% 4.05 vs 4.42, 16 / 50% 5.13 vs
#   5.59, 1 / 0% 4.91 vs 5.34;
#   else the table (64 / 50% mixed: late 28.01 vs 26.24, at once 25.66 (noise); 64 / 0%: 63.71
#   and 56.71 vs 56.60).
# Two changes from the fifth session's two sweeps (two leases, the same day; µs, against the
# loop with PDL after the store in the same rounds):
#   33-64 keys, after the one-tile class up to half a wave of pairs: ``forward.specloop_kernel``
#   (the loop's tile on the 3-D grid, its loads issued before cu_seqlens where the batch is
#   uniform), PDL at once: 4 / 80% 2.34 and 2.49 vs 2.74 and 2.76 (at 96 pairs, 8 / 80%, it
#   lost: 2.99 and 3.27 vs 2.83 and 2.83);
#   129-256 keys: the loop with 3 stages (two key tiles in flight ahead): 1 / 0% 4.54 and 4.45
#   vs 4.94 and 4.82 (with 2 key tiles, 65-128, it lost: 8 / 50% 4.46 and 4.48 vs 4.35 and
#   4.34).
# The sixth session's sweep (one run; µs against the table's kernel, which ran there before):
#   257-512 keys (DeiT-B 384 after the prune point: 289), up to three waves of 8 key tiles (49
#   pairs): the loop with 3 stages, PDL after the store, as at 129-256: Threshold-L2's 289 at
#   BS 1 5.03 vs 6.15, at BS 4 7.15 vs 8.02; 2 x 450 9.12 vs 10.67; 4 ragged up to 512 11.49 vs
#   11.93; ATS's 4 short sequences in a 289-row bucket 3.41 vs 3.52 (4 stages: within 1%
#   where the keys fill the tiles, 3.62 on ATS's; specloop's 8 compile-time key tiles lost).
# The seventh session's two sweeps (experiments.kernel_parts, docs/kernel.md "Floors of the
# grid"; µs against the same loop with PDL after the store, same rounds, two leases):
#   17-128 keys, the loop's class: PDL triggered once every program has issued its q load,
#   before its key tiles (``PDL_MID``): 32 / 80% 3.81 and 4.02 vs 4.01 and 4.17, 8 / 50% 4.24
#   and 4.35 vs 4.27 and 4.45, 16 / 50% 5.29 and 5.08 vs 5.35 and 5.16; within the spread
#   elsewhere (4 / 80% mixed 3.49 vs 3.45).
# The ninth session's two sweeps (experiments.kernel_parts, docs/kernel.md "Fewer instructions
# a key tile"; µs against copies of the kernels they replace, same rounds, two leases):
#   65-128 keys up to one and a half waves of two-tile programs (GRID3_PROGRAMS): the loop on the
#   3-D grid (no integer divisions before the cu_seqlens load): 8 / 50% 4.17 and 4.03 vs 4.36
#   and 4.23, 4 / 50% 3.36 and 3.43 vs 3.54 and 3.66 (at 384 programs, with 128 registers
#   instead of 136, it lost: 32 / 80% 4.16 vs 3.89, 16 / 50% 5.86 vs 5.35);
#   the table's spans of these head dims and dtypes: the loop's leaner softmax (LEAN), the
#   same registers (128): 64 / 0% 55.40 and 55.89 vs 57.53 and 58.06, 64 / 50% mixed 25.67
#   and 24.91 vs 26.79 and 26.00; the default path before -> after, 8 / 50% 4.21 -> 4.06,
#   64 / 0% 58.34 -> 55.72, 64 / 80% 7.42 -> 6.83, 8 x 577 35.56 -> 34.04.
# The tenth session's sweep (experiments.kernel_parts, docs/kernel.md "Past three waves";
# µs against the ninth session's table's kernel with the leaner softmax, same rounds; the
# 1-D arm also in the ninth session's second sweep):
#   past the classes' grids and past 512 keys: the 3-stage loop with the leaner softmax and
#   PDL after the store (LARGE_LOOP): 64 / 0% 49.48 and 49.80 vs 55.60 and 55.89, 64 / 50% mixed
#   24.23 and 23.96 vs 25.66 and 24.91, 16 / 0% 13.46 vs 14.49, 8 x 577 32.63 and 32.64 vs
#   34.07 and 34.21, 64 / 80% 6.52 and 6.85 vs 6.49 and 6.89 (one key tile: no third stage);
#   17-64 keys past the one-tile and specloop classes: the 3-D grid up to 1.5 waves
#   (GRID3_PROGRAMS, as at 65-128 keys): 8 / 80% 2.51 and 2.46 vs 2.67 and 2.62, 16 / 80% 2.99
#   and 3.00 vs 3.16 and 3.15, 8 / 90% (20 keys) 2.35 vs 2.53, 16 / 90% 2.81 vs 3.03; past it
#   it lost (24 / 80%, 288 pairs: 3.97 vs 3.70; 32 / 80% 4.14 vs 3.83).
# The eleventh session's three sweeps (experiments.kernel_parts, docs/kernel.md "The bounds
# before the wait"; µs against LARGE_LOOP in the same rounds, three leases):
#   past the classes' grids and lengths, up to GRID3_PAIRS: LARGE_LOOP on the 3-D grid with PDL
#   after the q load (LARGE_GRID3): 64 / 50% mixed 23.25, 23.03 and 23.16 vs 24.25, 24.23 and
#   24.25, 64 / 0% 48.65, 49.23 and 49.97 vs 49.68, 50.75 and 50.81, 128 / 0% 93.46 vs 99.34,
#   64 / 80% 6.49 vs 6.86, 32 / 50% 8.53 vs 9.04, 1 x 577 8.40 and 8.29 vs 8.66 and 8.52,
#   8 x 577 32.74 vs 33.02, 8 ragged up to 577 18.70 vs 18.86; 2 x 577 10.89 vs 10.78.
#   17-128 keys on the 3-D grid: the bounds read before the wait and checked once q's load is
#   issued (early), against the same kernel without, H100 and H200: 8 / 50% 4.00 and 4.08 vs
#   4.06 and 4.19, 4 / 50% 3.25 and 3.15 vs 3.33 and 3.24, 8 / 80% 2.51 and 2.40 vs 2.58 and
#   2.47, 16 / 90% 2.81 and 2.78 vs 2.90 and 2.88.
# The twelfth session's sweeps (docs/kernel.md "The early read on the 1-D grid"): the same
# checked read on the 1-D grid loop past 1.5 waves lost, 32 / 80% 4.06-4.16 vs 3.77-3.80 and
# 16 / 50% 5.63-5.89 vs 5.07-5.29 (four runs), so that class reads its bounds after the wait;
# and the 3-D grid loop with it, one run of B x L batches (--uniform), won up to two waves of
# query tiles and lost past them: 204-264 programs 2.97-3.16 vs 3.61-3.76 (17-22 x 40) and
# 3.99-4.28 vs 4.77-4.85 (9-11 x 99); 288 programs 4.10 vs 3.78 (24 x 40), 5.48 vs 4.90 (12 x
# 99). GRID3_PROGRAMS was 1.5 waves (the ninth and tenth sessions measured 288 and 384 only).
# The thirteenth session's sweeps (docs/kernel.md "Three programs an SM past two waves"; µs
# against the 1-D grid loop in the same rounds, two leases): past two waves the same 3-D grid
# loop held to 3 programs an SM (its 40 KB of shared memory in a 132 KB carveout; uncapped it
# runs 4, at 120-128 registers) won where the 1-D one had served: 24 x 20 3.33 and 3.53 vs 3.54
# and 3.75, 24 x 40 3.45 and 3.62 vs 3.67 and 3.85, 28 x 40 3.56 and 3.63 vs 3.80 and 3.79, 12
# x 99 4.83 and 4.72 vs 5.03 and 4.94, 16 x 99 5.14 and 5.19 vs 5.21 and 5.27; the twelfth
# session's runs of the same carveout (its "2 an SM", 44%: 3 an SM) tied at 360 programs of 40
# keys (30 x 40 3.71 vs 3.73), gained at 360 of 99 (15 x 99 4.86 vs 5.10) and lost at 384 of
# 40 (32 / 80% 4.00 and 4.11 vs 3.80 and 3.94). Held to 2 an SM it lost everywhere (24 x 40
# 4.82).
PDL_MID = 3  # forward.varlen_fwd_kernel's PDL: the trigger after the q load
WAVE = 132  # the H100's SMs: one program each
LATE_WAVES = 3
SHORT_BATCH_KEYS = 512  # the longest max_seqlen measured
ONETILE_KEYS = 128  # one tile of keys: 256 columns spill (ptxas, docs/kernel.md)
SPECLOOP_KEYS = 64  # specloop's bucket: 33-64 keys (the only one where it won twice)
SPECLOOP_PAIRS = WAVE // 2  # and its pairs (won at 48: 4 / 80%; lost at 96: 8 / 80%)
GRID3_PROGRAMS = 2 * WAVE  # 17-128 keys: the 3-D grid up to 2 waves (8 / 50%: 192 programs)
# and then at most 3 programs an SM, up to these programs by query tiles a sequence (1: 17-64
# keys, 2: 65-128); the 1-D grid loop past them (at 17-64 keys), up to LATE_WAVES
CAPPED_PROGRAMS = {1: 336, 2: LATE_WAVES * WAVE}
# Past the classes' grids and lengths: the loop with 3 stages and the leaner softmax, on the
# 3-D grid (PDL after the q load) up to GRID3_PAIRS pairs, whose heads and batch then fit its
# y and z extents (65,535 each), the 1-D grid (PDL after the store) past them.
LARGE_GRID3 = AttentionConfig(64, 64, 4, 3, pdl=PDL_MID, grid3=True, lean=True)
LARGE_LOOP = AttentionConfig(64, 64, 4, 3, pdl=2, lean=True)
GRID3_PAIRS = 65535


def pow2_span(max_seqlen: int) -> tuple[int, int]:
    """(lo, hi): the power-of-two length bucket above SHORT that holds ``max_seqlen``."""
    hi = triton.next_power_of_2(max_seqlen)
    return max(SHORT + 1, hi // 2 + 1), hi


def short_batch(head_dim: int, max_seqlen: int, pairs: int, dtype: torch.dtype,
                capability: tuple[int, int]) -> tuple | None:  # fmt: skip
    """(config, (lo, hi), (pairs_lo, pairs_hi)) of the short-batch classes above for a batch
    of ``pairs`` (sequence, head) pairs whose longest sequence is ``max_seqlen``: every
    max_seqlen in [lo, hi] and pair count in [pairs_lo, pairs_hi] gets ``config`` (None: the
    table's; ``LARGE_GRID3`` and ``LARGE_LOOP``: past the classes' grids and lengths); None
    where they do not apply (before sm_90: no programmatic dependent launch; other dtypes,
    head dims and lengths: not measured)."""
    block_d = max(16, triton.next_power_of_2(head_dim))
    if (
        capability < (9, 0) or dtype not in (torch.float16, torch.bfloat16) or block_d != 64
        or max_seqlen <= SHORT
    ):  # fmt: skip
        return None
    if max_seqlen > SHORT_BATCH_KEYS:  # above the classes' lengths, at any pair count
        return _large((SHORT_BATCH_KEYS + 1, MAX_LENGTH), 0, pairs)
    if pairs < 1:  # an empty grid: nothing launches
        return None, (max_seqlen, max_seqlen), (pairs, pairs)
    lo, hi = pow2_span(max_seqlen)
    first = 1
    if hi <= ONETILE_KEYS:
        most = WAVE // (hi // 16)
        if pairs <= most:
            cfg = AttentionConfig(16, hi, 4, 1, kind="onetile", pdl=1 if hi <= 64 else 2)
            return cfg, (lo, hi), (1, most)
        first = most + 1
    if hi == SPECLOOP_KEYS and pairs <= SPECLOOP_PAIRS:
        cfg = AttentionConfig(64, 64, 4, 2, kind="specloop", pdl=1)
        return cfg, (lo, hi), (first, SPECLOOP_PAIRS)
    first = SPECLOOP_PAIRS + 1 if hi == SPECLOOP_KEYS else first
    if hi <= 2 * 64:  # the loop on the 3-D grid up to 2 waves of 64-row query tiles
        tiles = max(1, hi // 64)
        most = GRID3_PROGRAMS // tiles
        if pairs <= most:
            cfg = AttentionConfig(64, 64, 4, 2, pdl=PDL_MID, grid3=True, early=True)
            return cfg, (lo, hi), (first, most)
        first = most + 1
        most = CAPPED_PROGRAMS[tiles] // tiles
        if pairs <= most:  # then the same, at most 3 programs an SM
            cfg = AttentionConfig(64, 64, 4, 2, pdl=PDL_MID, grid3=True, early=True, ctas=3)
            return cfg, (lo, hi), (first, most)
        first = most + 1
    most = LATE_WAVES * WAVE // -(-hi // 64)
    if pairs <= most:  # 3 stages where a sequence has 4-8 key tiles (129-512 keys); with 1-2
        # the next kernel launches once every program issued its q load (PDL_MID)
        cfg = AttentionConfig(64, 64, 4, 3, pdl=2) if hi > 128 else AttentionConfig(
            64, 64, 4, 2, pdl=PDL_MID)  # fmt: skip
        return cfg, (lo, hi), (first, most)
    return _large((lo, hi), most + 1, pairs)


def _large(span: tuple[int, int], first: int, pairs: int) -> tuple:
    """``short_batch``'s answer past the classes' grids (from ``first`` pairs) or lengths."""
    if pairs <= GRID3_PAIRS:
        return LARGE_GRID3, span, (first, GRID3_PAIRS)
    return LARGE_LOOP, span, (GRID3_PAIRS + 1, MAX_LENGTH)


def shape_class(head_dim: int, max_seqlen: int, dtype: torch.dtype) -> str:
    """The table's branch this problem falls in (``attention_config``'s order)."""
    if dtype == torch.float32:
        return "fp32"
    if max_seqlen <= SHORT:
        return "short"
    return "d64" if max(16, triton.next_power_of_2(head_dim)) <= 64 else "dlarge"


def length_span(max_seqlen: int) -> tuple[int, int]:
    """(lo, hi): every max_seqlen from lo to hi gets the configuration ``max_seqlen`` gets,
    for any head_dim, dtype and device (``attention_config``'s branches and ``shape_class``
    change with max_seqlen only at ``SHORT``; sweeps are per class). A new max_seqlen in a
    span already launched then needs no plan and no compile."""
    return (0, SHORT) if max_seqlen <= SHORT else (SHORT + 1, MAX_LENGTH)


def cache_path(device_name: str) -> Path:
    root = Path(os.environ.get("RAGGED_TUNING_DIR") or Path.home() / ".cache" / "ragged")
    slug = re.sub(r"[^\w.]+", "-", device_name).strip("-")
    return root / f"{slug}-triton{triton.__version__}.json"


_loaded: dict[str, dict | None] = {}  # device name -> the cached sweep (None: not swept)


def sweep_of(device_name: str) -> dict | None:
    """The classes of ``device_name``'s sweep file (read once, then cached), or None where
    it has none (absent or unreadable: the table until ``tuning.tune`` runs)."""
    if device_name not in _loaded:
        path = cache_path(device_name)
        try:
            _loaded[device_name] = json.loads(path.read_text())["classes"]
        except (OSError, ValueError, KeyError, TypeError):
            _loaded[device_name] = None  # absent or unreadable: the table until tune() runs
    return _loaded[device_name]


def forget_sweep(device_name: str) -> None:
    """Drop ``device_name``'s cached sweep: the next ``sweep_of`` reads its file again."""
    _loaded.pop(device_name, None)


def choice(head_dim: int, max_seqlen: int, pairs: int, dtype: torch.dtype,
           capability: tuple[int, int]) -> tuple:  # fmt: skip
    """(config or None for the table's, (lo, hi), (pairs_lo, pairs_hi)): what a launch of
    ``pairs`` (sequence, head) pairs, the longest sequence ``max_seqlen``, runs on a GPU of
    ``capability``, and the lengths and pair counts that run the same."""
    short = short_batch(head_dim, max_seqlen, pairs, dtype, capability)
    return short or (None, length_span(max_seqlen), (0, MAX_LENGTH))


def classes(head_dim: int, dtype: torch.dtype, capability: tuple[int, int]) -> list[tuple]:
    """One (max_seqlen, pairs) of every class ``choice`` has for this head_dim and dtype on a
    GPU of ``capability``: every length span from 1 up and, within each, every span of batch x
    heads from 1 up. Their plans hold every kernel a launch of this head_dim and dtype can
    need, whatever its max_seqlen and batch (``attention.warm_classes``)."""
    out = []
    length = 1
    while True:
        pairs = 1
        while True:
            _, (_, hi), (_, pairs_hi) = choice(head_dim, length, pairs, dtype, capability)
            out.append((length, pairs))
            if pairs_hi >= MAX_LENGTH:
                break
            pairs = pairs_hi + 1
        if hi >= MAX_LENGTH:
            return out
        length = hi + 1


def capability_of(device_index: int) -> tuple[int, int]:
    """``torch.cuda.get_device_capability``, (0, 0) on the CPU (the interpreter)."""
    return (0, 0) if device_index < 0 else torch.cuda.get_device_capability(device_index)


def config_for(head_dim: int, max_seqlen: int, dtype: torch.dtype, device_index: int,
               pairs: int = 0) -> AttentionConfig:  # fmt: skip
    """The configuration a launch of ``pairs`` (sequence, head) pairs uses (0: the table's
    classes alone): the short-batch classes where they apply, else the table on the CPU and
    on ``SWEPT`` devices, the cached sweep elsewhere, the table until that device was swept."""
    if device_index < 0:
        return attention_config(head_dim, max_seqlen, dtype, (0, 0))
    name = torch.cuda.get_device_name(device_index)
    capability = torch.cuda.get_device_capability(device_index)
    short = choice(head_dim, max_seqlen, pairs, dtype, capability)[0] if pairs else None
    if short is not None:
        return short
    table = attention_config(head_dim, max_seqlen, dtype, capability)
    sweep = None if name in SWEPT else sweep_of(name)
    best = (sweep or {}).get(shape_class(head_dim, max_seqlen, dtype))
    return AttentionConfig(**best) if best else table


def source(device_index: int = 0) -> str:
    """Which configurations launches on this device use, in words (the fingerprint's)."""
    if device_index < 0 or not torch.cuda.is_available():
        return "table (CPU: the interpreter)"
    name = torch.cuda.get_device_name(device_index)
    if name in SWEPT:
        return f"table (measured on {name})"
    if sweep_of(name) is None:
        return f"table (not swept on {name} yet)"
    return f"swept on {name}: {cache_path(name)}"
