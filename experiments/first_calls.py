"""The first calls of one head_dim in a new process, Triton's disk cache empty: what the first
call of a (head_dim, dtype) costs, and then what the first call of every other length bucket
and batch class costs (``kernel.NewLength`` covers one batch, BS 1, and head dims the
short-batch classes do not have; this covers head_dim 64, fp16, the DeiT geometry, at
every class of ``config.classes``).

One sample a case, each a shape the process has not called: host time of
``varlen_attention(..., validate=False)`` (perf_counter, the GPU synchronised after it, outside
the timing), the median of 20 calls of it after (kept), and the kernels Triton compiled or
loaded during the first call (``triton.knobs.runtime.jit_post_compile_hook``).

    python -m experiments.first_calls --out $OUT/first_calls.json   # GPU, ~10-40 s
    python -m experiments.first_calls --cpu-smoke                   # interpreter: plumbing

``--cpu-smoke`` runs the first three cases on the Triton interpreter, one kept call each.

Run it in a process of its own: Triton's cache directory is set before Triton is imported.
Exit codes: 0 measured, 2 unusable (no GPU and no ``--cpu-smoke``).
"""

from __future__ import annotations

import os
import sys
import tempfile

if "--cpu-smoke" in sys.argv:  # before triton is first imported (ragged imports it)
    os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="first-calls-")  # empty: a cold disk

import argparse
import json
from pathlib import Path

import torch
import triton

import ragged
from benchmarks.support import first_call
from ragged.testing import packed_qkv

HEADS, HEAD_DIM = 12, 64
# (label, lengths): the first call, then one fresh shape of each class after it
CASES = (
    ("first call of the head_dim (BS 1, 40)", [40]),
    ("BS 1, 20 (17-32)", [20]),
    ("BS 1, 50 (33-64)", [50]),
    ("BS 1, 100 (65-128)", [100]),
    ("BS 1, 200 (129-256)", [200]),
    ("BS 1, 300 (> 256)", [300]),
    ("BS 1, 10 (<= 16)", [10]),
    ("BS 8, 99 (the loop)", [99] * 8),
    ("BS 6, 20 (the loop)", [20] * 6),
    ("BS 16, 150 (the table)", [150] * 16),
    ("BS 64, 60 (the table)", [60] * 64),
)
KEPT = 20


def one(lengths, device, sync, runtime, kept_calls=KEPT) -> dict:
    """The first call of a fresh shape and ``kept_calls`` calls after it, timed and counted
    as ``kernel.NewLength`` times them (``first_call.sample``)."""
    q, k, v, cu, max_seqlen = packed_qkv(lengths, HEADS, HEAD_DIM, device=device, seed=len(lengths))

    def call():
        return ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)

    def no_syncs():  # the CPU has no sync debug mode: none counted
        return first_call.count_syncs(lambda: 0, lambda mode: None)

    syncs = first_call.count_syncs if device == "cuda" else no_syncs
    return first_call.sample(call, sync, runtime, kept_calls, syncs_counter=syncs)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, help="write the rows as JSON here")
    p.add_argument("--cpu-smoke", action="store_true", help="the interpreter: plumbing only")
    args = p.parse_args(argv)
    if not args.cpu_smoke and not torch.cuda.is_available():
        print("first_calls needs a CUDA GPU (or --cpu-smoke).", file=sys.stderr)
        return 2
    device = "cpu" if args.cpu_smoke else "cuda"
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    runtime = getattr(getattr(triton, "knobs", None), "runtime", None)
    if (why := first_call.compile_hook_reason(runtime)) is not None:
        print(f"first_calls: {why}.", file=sys.stderr)
        return 2
    rows = []
    print("| case | first call µs | kept call µs | first/kept | compiles |\n|---|---|---|---|---|")
    for label, lengths in CASES[:3] if args.cpu_smoke else CASES:  # smoke: the first three
        row = {"case": label, **one(lengths, device, sync, runtime, 1 if args.cpu_smoke else KEPT)}
        rows.append(row)
        print(f"| {label} | {row['first_call_us']:.0f} | {row['kept_call_us']:.1f} | "
              f"{row['first_over_kept']:.1f} | {row['compiles']} |", flush=True)  # fmt: skip
    if args.out:
        env = {"torch": torch.__version__, "triton": triton.__version__,
               "device": torch.cuda.get_device_name() if device == "cuda" else "cpu"}  # fmt: skip
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"environment": env, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
