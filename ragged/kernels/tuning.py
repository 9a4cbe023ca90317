"""Launch configurations per GPU: the measured table where it was measured, a one-time sweep
cached on disk everywhere else.

``config.attention_config``'s table was swept on one GPU (``SWEPT``). On any other device
name the best tile depends on its SM count, shared memory and clocks, so ``tune()`` times the
candidates of each shape class once and writes the winners to
``$RAGGED_TUNING_DIR`` (default ``~/.cache/ragged``) as ``<device name>-triton<version>.json``:
a new device or a new Triton invalidates it by name, and deleting the file sweeps again.

``tune()`` runs only where it is called, outside timed regions and never inside CUDA graph
capture (it refuses there): the benchmarks call it in their set-up, before the first timing. The
launch path only reads the file (``config.config_for``): until a device was swept it uses the table,
and ``source()`` says which configuration runs (the fingerprint records it).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path

import torch
import triton

from . import attention, config
from .attention import varlen_attention_triton
from .config import (
    SWEPT,
    AttentionConfig,
    attention_config,
    cache_path,
    config_for,  # noqa: F401  (imported from here by callers)
    shape_class,  # noqa: F401
    source,
)

# Each shape class of the table, a representative problem (batch, tokens a sequence, head_dim,
# dtype) and the tiles tried; 12 heads, as DeiT-B.
CLASSES = {
    "fp32": (32, 197, 64, torch.float32, [(16, 16), (32, 32), (64, 32)]),
    "short": (4, 16, 64, torch.float16, [(16, 16), (32, 16), (32, 32)]),
    "d64": (32, 197, 64, torch.float16, [(32, 32), (64, 32), (64, 64), (128, 64), (128, 32)]),
    "dlarge": (32, 197, 128, torch.float16, [(32, 32), (64, 32), (64, 64), (128, 32)]),
}
WARPS = (4, 8)
HEADS = 12


class TuningError(RuntimeError):
    """A sweep asked for where it must not run (graph capture, no GPU)."""


def _time_us(config: AttentionConfig, problem: tuple, device_index: int) -> float:
    """Device time of one launch of ``problem`` with ``config``: a CUDA graph of 20 launches
    replayed, timed by CUDA events, median of 5 (launches back to back would time the host
    instead: 7.8-8.4 us a call for the short class on an H200, whatever the tile)."""
    batch, seqlen, head_dim, dtype, _ = problem
    dev = torch.device("cuda", device_index)
    g = torch.Generator(device=dev).manual_seed(0)
    q, k, v = (torch.randn(batch * seqlen, HEADS, head_dim, device=dev, dtype=dtype, generator=g)
               for _ in range(3))  # fmt: skip
    cu = torch.arange(0, batch * seqlen + 1, seqlen, device=dev, dtype=torch.int32)
    out = torch.empty_like(q)

    def call():
        varlen_attention_triton(q, k, v, cu, seqlen, head_dim**-0.5, out, config)

    call()  # compile, outside the capture
    torch.cuda.synchronize(dev)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(20):
            call()
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / 20)
    return sorted(times)[len(times) // 2]


MARGIN = 0.02  # a swept tile replaces the table's only when this much faster (timing noise)


def tune(device_index: int = 0, *, force: bool = False,
         timer: Callable[[AttentionConfig, tuple, int], float] = _time_us,
         log: Callable[[str], None] = lambda m: None) -> Path | None:  # fmt: skip
    """Sweep this device once (a no-op on ``SWEPT`` devices and where the file exists, unless
    ``force``); -> the cache file, or None where the table is used as measured."""
    if torch.cuda.is_current_stream_capturing():
        raise TuningError("tune() inside CUDA graph capture: call it before capturing")
    name = torch.cuda.get_device_name(device_index)
    if name in SWEPT and not force:
        return None
    path = cache_path(name)
    if path.exists() and not force and config.sweep_of(name) is not None:
        return path
    classes, timings = {}, {}
    for cls, problem in CLASSES.items():
        results = {}
        for (block_m, block_n), warps in ((t, w) for t in problem[4] for w in WARPS):
            cfg = AttentionConfig(block_m, block_n, num_warps=warps, num_stages=2)
            try:
                results[cfg] = timer(cfg, problem, device_index)
            except Exception as exc:  # a tile the device cannot hold (shared memory)
                log(f"tune: {cls} {block_m}x{block_n}/{warps} warps failed: {exc}")
        if not results:
            continue
        best = min(results, key=results.get)
        _, seqlen, head_dim, dtype, _ = problem
        capability = torch.cuda.get_device_capability(device_index)
        table = attention_config(head_dim, seqlen, dtype, capability)
        if table in results and results[table] <= results[best] * (1 + MARGIN):
            best = table
        classes[cls] = {"block_m": best.block_m, "block_n": best.block_n,
                        "num_warps": best.num_warps, "num_stages": best.num_stages}  # fmt: skip
        timings[cls] = {f"{c.block_m}x{c.block_n}/{c.num_warps}": round(t, 3)
                        for c, t in sorted(results.items(), key=lambda kv: kv[1])}  # fmt: skip
        log(f"tune: {cls}: {best.block_m}x{best.block_n}, {best.num_warps} warps "
            f"({results[best]:.2f} us)")  # fmt: skip
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")  # two processes sweeping: each its own
    tmp.write_text(json.dumps({"device": name, "triton": triton.__version__, "classes": classes,
                               "gpu_us": timings}, indent=1))  # fmt: skip
    tmp.replace(path)  # atomic: a reader sees the old file or the whole new one
    config.forget_sweep(name)
    attention.forget_plans()  # launches planned with the table re-plan with the sweep
    return path


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="Sweep this GPU's launch configurations once.")
    ap.add_argument("--device", type=int, default=0)
    ap.add_argument("--force", action="store_true", help="sweep again, even a SWEPT device")
    args = ap.parse_args()
    where = tune(args.device, force=args.force, log=print)
    print(json.dumps(json.loads(where.read_text()), indent=1) if where else source(args.device))
