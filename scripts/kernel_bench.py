"""Kernel-level timings on a CUDA GPU: the kernel table, launch paths, config sweep.

    python -m scripts.kernel_bench                    # table: every backend, DeiT-B/S geometry
    python -m scripts.kernel_bench --launch-paths     # host cost of each way to launch Triton,
                                                      # and the API's launch promises
    python -m scripts.kernel_bench --first-call --no-table  # first call of an unseen shape
    python -m scripts.kernel_bench --sweep            # launch-config sweep behind the table in
                                                      # ragged/kernels/attention.py
    ... --out DIR                                     # also write JSON (raw samples) there

Metrics are defined in docs/metrics.md and measured by benchmarks/support/harness.py, on the
suite's inputs (benchmarks/support/workloads.py) and backends (benchmarks/support/catalogue.py);
the launch paths come from scripts/launch_paths.py. Ratios are only ever taken between
figures of the same run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

import ragged
from benchmarks.support import catalogue, grids, harness, promises, workloads
from benchmarks.support import first_call as first_call_cases
from ragbench import provenance as fingerprint
from ragbench.stats import median_interval
from ragged.kernels import attention as kernel_attention
from ragged.testing import packed_qkv
from scripts.launch_paths import launch_paths as ragged_launch_paths

# The table's axes (docs/kernel.md's table, wider than the suite's grid); inputs as the suite's
MODELS = tuple(workloads.HEADS)  # attention geometry: heads, head_dim 64
BATCHES = (1, 4, 32, 64)
PRUNE = (0.0, 0.5, 0.8)


def environment() -> dict:
    """The suite's fingerprint (ragbench/provenance.py) and what each backend calls."""
    env = fingerprint.collect(commit=None, machine=fingerprint.default_machine(),
                              mode="kernel_bench")  # fmt: skip
    return env | {"backends": {b: ragged.backend_implementation(b)
                               for b in ragged.available_backends()}}  # fmt: skip


def table(args) -> list[dict]:
    """Every backend of the catalogue (``--quick``: of its quick grid) on every workload,
    measured as the suite measures them (``measure.kernels``: alternating rounds)."""
    rows = []
    tier = catalogue.QUICK if args.quick else catalogue.FULL
    backends = [b for b in catalogue.kernel_backends(tier) if b in ragged.available_backends()]
    harness.spin_up()
    for model in MODELS:
        for batch, prune, mode in itertools.product(BATCHES, PRUNE, ("uniform", "mixed")):
            if mode == "mixed" and batch == 1:
                continue
            q, k, v, cu, max_seqlen = workloads.kernel_inputs(batch, prune, model, mode)
            fns = {b: workloads.attention(b, q, k, v, cu, max_seqlen) for b in backends}
            results = harness.measure_interleaved(fns, rounds=5, slow=catalogue.slow_backends())
            clocks = harness.gpu_clocks()
            for backend, metrics in results.items():
                row = {
                    "model": model, "heads": workloads.HEADS[model], "head_dim": workloads.HEAD_DIM,
                    "dtype": "float16", "batch": batch, "prune": prune, "lengths": mode,
                    "total_tokens": q.shape[0], "max_seqlen": max_seqlen, "backend": backend,
                    "implementation": ragged.backend_implementation(backend),
                    **metrics, "clocks": clocks,
                }  # fmt: skip
                rows.append(row)
                print(_fmt_row(row), file=sys.stderr, flush=True)
    return rows


def _med(row, metric):
    m = row.get(metric)
    return m["median"] if m else float("nan")


def _fmt_row(row) -> str:
    return (
        f"{row['model']} BS={row['batch']:>3} prune={row['prune']:.0%} {row['lengths']:>7} "
        f"{row['backend']:>12}: call {_med(row, 'call_us'):8.1f}  gpu {_med(row, 'gpu_us'):8.1f}  "
        f"host {_med(row, 'host_us'):8.1f} us"
    )


def print_table(rows: list[dict]) -> None:
    backends = list(dict.fromkeys(r["backend"] for r in rows))
    by_key = {(r["model"], r["batch"], r["prune"], r["lengths"], r["backend"]): r for r in rows}
    keys = list(dict.fromkeys((r["model"], r["batch"], r["prune"], r["lengths"]) for r in rows))
    print("\ncall / gpu / host us (medians); " + ", ".join(backends))
    print("| model | BS | prune | lengths | " + " | ".join(backends) + " |")
    print("|---" * (4 + len(backends)) + "|")
    for key in keys:
        cells = []
        for b in backends:
            r = by_key.get((*key, b))
            cells.append(
                "-" if r is None else
                f"{_med(r, 'call_us'):.1f} / {_med(r, 'gpu_us'):.1f} / {_med(r, 'host_us'):.1f}"
            )  # fmt: skip
        model, batch, prune, mode = key
        print(f"| {model} | {batch} | {prune:.0%} | {mode} | " + " | ".join(cells) + " |")
    _print_targets(by_key)


def _print_targets(by_key) -> None:
    def ratio(batch, prune, metric, model="deit_b"):
        t = by_key.get((model, batch, prune, "uniform", "triton"))
        f = by_key.get((model, batch, prune, "uniform", "fa2"))
        if not t or not f:
            return float("nan")
        return _med(t, metric) / _med(f, metric)

    checks = [
        ("triton gpu_us / fa2 at BS=32, 80% (target <= 0.333)", ratio(32, 0.8, "gpu_us"), 1 / 3),
        ("triton host_us / fa2 at BS=1, 80% (target <= 0.5)", ratio(1, 0.8, "host_us"), 0.5),
        ("triton call_us / fa2 at BS=1, 80% (target <= 0.8)", ratio(1, 0.8, "call_us"), 0.8),
        ("triton gpu_us / fa2 at BS=64, 0% (target <= 1.0)", ratio(64, 0.0, "gpu_us"), 1.0),
    ]
    print("\nTargets (DeiT-B geometry, uniform lengths):")
    for name, value, limit in checks:
        print(f"  {name}: {value:.3f} {'MET' if value <= limit else 'NOT MET'}")


# --- launch paths -------------------------------------------------------------------------


@triton.jit
def _empty_kernel(x):
    pass


def launch_paths(args) -> tuple[list[dict], dict | None]:
    """Host and call time of each way to launch the same kernel, BS=1 / 80%, DeiT-B, beside
    the bare fa2 op, one aten op and empty Triton kernels (one with the kernel's 16
    parameters through the kept launch and through the C launcher); then the API's launch
    promises (``promises.measure``: per-round ratios by cell, or None where this machine
    keeps no launch)."""
    q, k, v, cu, max_seqlen = workloads.kernel_inputs(*grids.FLOOR[:2], "deit_b", grids.FLOOR[2])
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    scale = q.shape[-1] ** -0.5
    empty = _empty_kernel[(1,)](q)
    erun, efn, emeta = empty.run, empty.function, empty.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    scratch = torch.zeros(16, device="cuda")
    paths = {
        **ragged_launch_paths(q, k, v, cu, max_seqlen, out),
        "fa2 aten op direct": lambda: torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, max_seqlen, max_seqlen, 0.0, False, False, scale=scale
        ),
        "ragged.varlen_attention(backend=fa2)": workloads.attention("fa2", q, k, v, cu, max_seqlen),
        "one aten op: x.add_(1)": lambda: scratch.add_(1),
        "empty triton kernel[grid]": lambda: _empty_kernel[(1,)](q),
        "empty triton compiled.run direct": lambda: erun(
            1, 1, 1, stream, efn, emeta, None, None, None, q
        ),
    }
    try:
        arms = promises.arms(q, k, v, cu, max_seqlen)
    except RuntimeError as exc:  # no kept launch on this machine: no promise to check
        print(f"launch promises: not measured: {exc}", file=sys.stderr)
        arms = None
    else:
        paths.update({promises.ARM_NAMES[a]: arms[a] for a in ("empty_kept", "empty_direct")})
    measured = harness.measure_interleaved(paths, rounds=args.rounds, gpu=False)
    rows = [{"path": name, **m} for name, m in measured.items()]
    ref = ragged.varlen_attention(q, k, v, cu, max_seqlen, backend="reference")
    paths["triton kernel[grid](...)"]()
    ok = (out - ref).abs().max().item()
    print("\n| launch path (BS=1, 80%, DeiT-B) | call_us | host_us |\n|---|---|---|")
    for r in rows:
        print(f"| {r['path']} | {_med(r, 'call_us'):.1f} | {_med(r, 'host_us'):.1f} |")
    print(f"(max abs diff of the launched kernel vs reference: {ok:.2e})")
    print("\n| host_us / the bare fa2 op's, same round | median | min-max over rounds |")
    print("|---|---|---|")
    fa2 = measured["fa2 aten op direct"]["host_us"]["samples"]
    for name in (
        "ragged.varlen_attention(validate=False)",
        "ragged.varlen_attention(validate=False, out=)",
        "ragged.LayoutAttention call, packed qkv (launch kept)",
        "  its checked path (the call before launch_ready)",
        "one aten op: x.add_(1)",
    ):
        r = [a / b for a, b in zip(measured[name]["host_us"]["samples"], fa2, strict=True)]
        print(f"| {name.strip()} | {statistics.median(r):.2f} | {min(r):.2f}-{max(r):.2f} |")
    if arms is None:
        return rows, None
    ratios = promises.measure(q, k, v, cu, max_seqlen, rounds=args.promise_rounds)
    print_promises(ratios, args.promise_rounds)
    return rows, ratios


def promise_verdict(ratios: list[float], limit: float | None) -> str:
    """A promise's verdict from per-round ratios: "met" where the 95% interval of their
    median is wholly at or below ``limit``, "not met" where wholly above it, else
    "unresolved"; "-" for no promise."""
    if limit is None:
        return "-"
    lo, hi = median_interval(ratios, 0.95)
    return "met" if hi <= limit else "not met" if lo > limit else "unresolved"


def print_promises(ratios: dict[str, list[float]], rounds: int) -> None:
    print(
        f"\n| host time, per-round ratio ({rounds} rounds of {promises.CALLS} calls, arms in a "
        "random order; BS=1, 80%, DeiT-B) | median [95%] | promise | verdict |\n|---|---|---|---|"
    )
    for cell, (num, den, limit) in promises.CELLS.items():
        r = ratios[cell]
        lo, hi = median_interval(r, 0.95)
        print(
            f"| {cell}: {promises.ARM_NAMES[num]} / {promises.ARM_NAMES[den]} | "
            f"{statistics.median(r):.3f} "
            f"[{lo:.3f}, {hi:.3f}] | {'-' if limit is None else f'<= {limit}'} | "
            f"{promise_verdict(r, limit)} |"
        )


# --- first calls ----------------------------------------------------------------------------


def first_call(args) -> dict:
    """What the suite's ``kernel.NewLength`` and ``kernel.FirstCall`` measure (``first_call``),
    and the C++ fast path's build, which a cold machine pays once."""
    measured = first_call_cases.measure()
    build = first_call_cases.fastpath_build_s()
    print("\n| case | first call µs | kept call µs | first/kept | compiles | host syncs |")
    print("|---|---|---|---|---|---|")
    for case, m in measured.items():
        if "skip" in m:
            print(f"| {case} | skipped: {m['skip']} | | | | |")
            continue
        med = {k: statistics.median(v) for k, v in m.items()}
        first = m["first_call_us"]
        print(f"| {case} | {med['first_call_us']:.0f} ({min(first):.0f}-{max(first):.0f}) | "
              f"{med['kept_call_us']:.1f} | {med['first_over_kept']:.1f} | "
              f"{_span(m['compiles'])} | {_span(m['host_syncs'])} |")  # fmt: skip
    shown = f"{build:.1f} s" if isinstance(build, float) else build
    print(f"| C++ fast path build (once a machine) | {shown} | | | | |")
    cases = first_call_cases
    print(f"({len(cases.MAX_SEQLENS)} lengths, head_dims {cases.HEAD_DIMS}: one sample each; "
          "first call: median (min-max))")  # fmt: skip
    return {"cases": measured, "fastpath_build_s": build}


def _span(values) -> str:
    lo, hi = min(values), max(values)
    return f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}"


# --- config sweep ---------------------------------------------------------------------------

SWEEP_SHAPES = [  # (heads, head_dim, dtype, batch, length)
    (12, 64, torch.float16, 1, 40),
    (12, 64, torch.float16, 32, 40),
    (12, 64, torch.float16, 32, 99),
    (12, 64, torch.float16, 64, 99),
    (12, 64, torch.float16, 64, 197),
    (12, 64, torch.float16, 32, 289),
    (12, 64, torch.float16, 32, 577),
    (12, 64, torch.float16, 4, 16),
    (12, 128, torch.float16, 32, 99),
    (12, 128, torch.float16, 32, 197),
    (12, 80, torch.float16, 32, 197),
    (12, 256, torch.float16, 8, 197),
    (12, 64, torch.float32, 32, 197),
    (12, 64, torch.bfloat16, 32, 197),
]


def _candidates(head_dim, dtype, default):
    """Full tile grid for the DeiT case (d=64, fp16), a reduced one elsewhere (compile time).

    num_stages barely matters here (one or two key tiles per sequence: <1% apart in the first
    sweep), so it is swept only for the two leading tile shapes.
    """
    full = head_dim == 64 and dtype == torch.float16
    wide = head_dim > 128 or dtype == torch.float32
    out = [default]
    for bm, bn in itertools.product((16, 32, 64, 128), (16, 32, 64, 128)):
        if bm * bn > 8192 or (wide and bn > 64):
            continue
        if not full and (bm == 16 or bn not in (32, 64)):
            continue
        for warps in (2, 4) if bm <= 32 else (4, 8):
            if not full and warps == 2:
                continue
            stages = (1, 2) if (bm, bn) in ((64, 64), (128, 64)) else (2,)
            for st in stages:
                cfg = kernel_attention.AttentionConfig(bm, bn, warps, st)
                if cfg != default and not (not full and bm < 128 and warps == 8):
                    out.append(cfg)
    return out


def sweep(args) -> list[dict]:
    """Compile every candidate first, then time them all with the GPU at its boost clock."""
    cases = []
    t0 = time.time()
    for heads, head_dim, dtype, batch, length in SWEEP_SHAPES:
        q, k, v, cu, max_seqlen = packed_qkv([length] * batch, heads, head_dim, dtype=dtype,
                                             device="cuda")  # fmt: skip
        out = torch.empty_like(q)
        ref = ragged.varlen_attention(q, k, v, cu, max_seqlen, backend="reference").float()
        default = kernel_attention.attention_config(
            head_dim, max_seqlen, dtype, torch.cuda.get_device_capability()
        )
        case = {"shape": (heads, head_dim, str(dtype), batch, length), "default": default,
                "fns": {}, "errors": {}}  # fmt: skip
        for cfg in _candidates(head_dim, dtype, default):
            if time.time() - t0 > args.sweep_seconds:
                break

            def fn(cfg=cfg, q=q, k=k, v=v, cu=cu, m=max_seqlen, out=out):
                kernel_attention.varlen_attention_triton(
                    q, k, v, cu, m, q.shape[-1] ** -0.5, out, cfg
                )

            try:
                out.fill_(float("nan"))
                fn()
                err = (out.float() - ref).abs().max().item()
            except Exception as exc:  # out of resources etc.
                case["errors"][str(cfg)] = str(exc).splitlines()[0][:100]
                continue
            if not err < 0.05:
                case["errors"][str(cfg)] = f"max abs error {err}"
                continue
            case["fns"][cfg] = fn
        cases.append(case)
    print(f"sweep: compiled in {time.time() - t0:.0f} s", flush=True)
    harness.spin_up(0.5)
    rows = []
    for case in cases:
        timings = {
            cfg: harness.gpu_us(fn, calls=20, replays=10).median for cfg, fn in case["fns"].items()
        }
        best = min(timings, key=timings.get) if timings else None
        d = case["default"]
        row = {
            "shape": case["shape"],
            "default": {"config": d.__dict__, "gpu_us": timings.get(d)},
            "best": best and {"config": best.__dict__, "gpu_us": timings[best]},
            "all": [{"config": c.__dict__, "gpu_us": t} for c, t in timings.items()],
            "errors": case["errors"], "clocks": harness.gpu_clocks(),
        }  # fmt: skip
        rows.append(row)
        print(
            f"sweep h,d,dtype,BS,L={case['shape']}: best {best} {timings.get(best)} us; "
            f"default {d} {timings.get(d)} us; {len(timings)} ok, {len(case['errors'])} failed",
            flush=True,
        )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--launch-paths", action="store_true", help="compare Triton launch paths")
    p.add_argument("--rounds", type=int, default=15,
                   help="interleaved rounds of --launch-paths (its ratios pair them)")  # fmt: skip
    p.add_argument(
        "--first-call",
        action="store_true",
        help="first call of an unseen shape (measured before anything else)",
    )
    p.add_argument("--promise-rounds", type=int, default=promises.ROUNDS,
                   help="interleaved rounds of the launch promises (--launch-paths)")  # fmt: skip
    p.add_argument("--sweep", action="store_true", help="sweep kernel launch configs")
    p.add_argument("--sweep-seconds", type=float, default=240, help="time cap of the sweep")
    p.add_argument("--no-table", action="store_true", help="skip the backend table")
    p.add_argument("--quick", action="store_true",
                   help="the backends of the suite's quick grid only")  # fmt: skip
    p.add_argument("--repeat", type=int, default=1, help="run the table this many times")
    p.add_argument("--out", type=Path, help="directory for JSON results with raw samples")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernel_bench needs a CUDA GPU; none is available here.", file=sys.stderr)
        return 2
    env = environment()
    print(json.dumps(env))
    results = {"environment": env, "harness_version": harness.HARNESS_VERSION}
    if args.first_call:  # first: the others launch (and compile) the shapes it needs unseen
        results["first_call"] = first_call(args)
    if args.launch_paths:
        results["launch_paths"], results["launch_promises"] = launch_paths(args)
    if args.sweep:
        results["sweep"] = sweep(args)
    if not args.no_table:
        for i in range(args.repeat):
            key = "table" if i == 0 else f"table_repeat{i}"
            results[key] = table(args)
            print_table(results[key])
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "kernel_bench.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
