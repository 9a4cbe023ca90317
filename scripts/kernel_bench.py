"""Kernel-level timings on a CUDA GPU: the table of issue 2, launch paths, config sweep.

    python -m scripts.kernel_bench                    # table: every backend, DeiT-B/S geometry
    python -m scripts.kernel_bench --launch-paths     # host cost of each way to launch Triton
    python -m scripts.kernel_bench --sweep            # launch-config sweep behind the table in
                                                      # ragged/kernels/attention.py
    ... --out DIR                                     # also write JSON (raw samples) there

Metrics are defined in docs/metrics.md and measured by benchmarks/_harness.py. Ratios are
only ever taken between figures of the same run.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch
import triton

import ragged
from benchmarks import _harness as H
from ragged.kernels import attention as KA
from ragged.kernels import c_launch
from ragged.testing import kept_tokens, mixed_lengths, packed_qkv

TOKENS = 197  # DeiT at 224x224: 196 patches + CLS
MODELS = {"deit_b": 12, "deit_s": 6}  # heads; head_dim 64 for both
BATCHES = (1, 4, 32, 64)
PRUNE = (0.0, 0.5, 0.8)
BACKENDS = ("triton", "fa2", "torch_varlen", "nested_sdpa", "padded_sdpa")


def environment() -> dict:
    props = torch.cuda.get_device_properties(0)
    return {
        "gpu": props.name,
        "capability": f"{props.major}.{props.minor}",
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "driver": _driver(),
    }


def _driver() -> str | None:
    try:
        import subprocess

        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=10, check=True,
        )  # fmt: skip
        return out.stdout.strip()
    except Exception:
        return None


def _lengths(batch: int, prune: float, mode: str) -> list[int]:
    kept = kept_tokens(TOKENS, prune)
    if mode == "uniform" or batch == 1:
        return [kept] * batch
    return mixed_lengths(batch, kept * batch, TOKENS, seed=batch * 100 + int(prune * 100))


def table(args) -> list[dict]:
    """Every backend on every workload, measured in alternating rounds (see the harness)."""
    rows = []
    backends = [b for b in BACKENDS if b in ragged.available_backends()]
    if args.quick:
        backends = [b for b in backends if b != "nested_sdpa"]
    H.spin_up()
    for model, heads in MODELS.items():
        for batch, prune, mode in itertools.product(BATCHES, PRUNE, ("uniform", "mixed")):
            if mode == "mixed" and batch == 1:
                continue
            lengths = _lengths(batch, prune, mode)
            q, k, v, cu, max_seqlen = packed_qkv(lengths, heads, 64, device="cuda", seed=batch)
            fns = {
                b: functools.partial(
                    ragged.varlen_attention, q, k, v, cu, max_seqlen, backend=b, validate=False
                )
                for b in backends
            }
            results = H.measure_interleaved(fns, rounds=5, slow=frozenset({"nested_sdpa"}))
            clocks = H.gpu_clocks()
            for backend, metrics in results.items():
                row = {
                    "model": model, "heads": heads, "head_dim": 64, "dtype": "float16",
                    "batch": batch, "prune": prune, "lengths": mode,
                    "total_tokens": sum(lengths), "max_seqlen": max_seqlen, "backend": backend,
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


def launch_paths(args) -> list[dict]:
    """Host and call time of each way to launch the same kernel, BS=1 / 80%, DeiT-B."""
    lengths = [kept_tokens(TOKENS, 0.8)]
    q, k, v, cu, max_seqlen = packed_qkv(lengths, 12, 64, device="cuda")
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    scale = 0.125
    plan, grid, scalars, _ = KA.launch_args(q, k, v, out, cu, max_seqlen, scale)
    tensors = (q, k, v, out, cu)
    ptrs = tuple(t.data_ptr() for t in tensors)
    cfg = plan.config
    kernel = KA._varlen_fwd_kernel
    compiled = kernel[grid](*tensors, *scalars, **plan.constexprs, num_warps=cfg.num_warps,
                            num_stages=cfg.num_stages)  # fmt: skip
    tail = tuple(plan.constexprs.values())
    run, function, meta = compiled.run, compiled.function, compiled.packed_metadata
    stream = torch.cuda.current_stream().cuda_stream
    empty = _empty_kernel[(1,)](q)
    erun, efn, emeta = empty.run, empty.function, empty.packed_metadata

    def plain():
        kernel[grid](*tensors, *scalars, **plan.constexprs, num_warps=cfg.num_warps,
                     num_stages=cfg.num_stages)  # fmt: skip

    def compiled_getitem():
        compiled[grid](*tensors, *scalars, *tail)

    def compiled_run():
        run(grid[0], 1, 1, stream, function, meta, None, None, None, *tensors, *scalars, *tail)

    def compiled_run_ptrs():
        run(grid[0], 1, 1, stream, function, meta, None, None, None, *ptrs, *scalars, *tail)

    def c_launch_direct():  # Triton 3.6's C entry point, skipping CudaLauncher.__call__
        run.launch(grid[0], 1, 1, stream, function, run.launch_cooperative_grid, run.launch_pdl,
                   None, None, meta, None, None, None, *ptrs, *scalars, *tail)  # fmt: skip

    c_direct = c_launch.direct(compiled)

    def c_launch_ragged():
        c_direct(grid[0], 1, 1, stream, *ptrs, *scalars)

    def launcher():
        KA._launcher.launch(
            plan, grid, tensors, scalars, plan.constexprs, cfg.num_warps, cfg.num_stages, 0
        )

    def api_novalidate():
        ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False)

    def api_checked():  # what varlen_attention(validate=False) ran before launch_ready
        A._check_types(q, k, v, cu, max_seqlen, None)
        A._check_available(A.BACKENDS["triton"], q, q.shape[2])
        KA.varlen_attention_triton(q, k, v, cu, max_seqlen, 0.125, torch.empty_like(q))

    qkv = torch.stack((q, k, v), dim=1)  # [T, 3, H, d], as the qkv projection lays it out
    layout_call = ragged.LayoutAttention(cu, max_seqlen)
    layout_call(qkv)  # checked once: the launch is kept

    def api_layout():
        layout_call(qkv)

    def api_validate():
        ragged.varlen_attention(q, k, v, cu, max_seqlen)

    def api_out():
        ragged.varlen_attention(q, k, v, cu, max_seqlen, validate=False, out=out)

    def fa2_direct():
        torch.ops.aten._flash_attention_forward(
            q, k, v, cu, cu, max_seqlen, max_seqlen, 0.0, False, False, scale=scale
        )

    def fa2_api():
        ragged.varlen_attention(q, k, v, cu, max_seqlen, backend="fa2", validate=False)

    def empty_plain():
        _empty_kernel[(1,)](q)

    def empty_run():
        erun(1, 1, 1, stream, efn, emeta, None, None, None, q)

    scratch = torch.zeros(16, device="cuda")
    graph = torch.cuda.CUDAGraph()
    api_novalidate()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        api_novalidate()

    from ragged import attention as A
    from ragged.kernels import launch as L

    pieces = {
        "  piece: _check_types": lambda: A._check_types(q, k, v, cu, max_seqlen, None),
        "  piece: torch.empty_like(q)": lambda: torch.empty_like(q),
        "  piece: torch.empty(shape, dtype, device)": lambda: torch.empty(
            q.shape, dtype=q.dtype, device=q.device
        ),
        "  piece: launch_args": lambda: KA.launch_args(q, k, v, out, cu, max_seqlen, scale),
        "  piece: 5x data_ptr()": lambda: [t.data_ptr() for t in tensors],
        "  piece: _hooks_active + current_device": lambda: (
            L._hooks_active(),
            torch.cuda.current_device(),
        ),
    }
    paths = {
        "triton kernel[grid](...)": plain,
        "triton compiled[grid](...)": compiled_getitem,
        "triton compiled.run(...) direct": compiled_run,
        "triton compiled.run(...) direct, int pointers": compiled_run_ptrs,
        **(
            {"triton C launcher direct (3.6 layout), int pointers": c_launch_direct}
            if triton.__version__.startswith("3.6")
            else {}
        ),
        **(
            {"ragged C launcher (kernels/c_launch.py), int pointers": c_launch_ragged}
            if c_direct is not None
            else {}
        ),
        "ragged Launcher.launch": launcher,
        "ragged.varlen_attention(validate=False)": api_novalidate,
        "ragged.varlen_attention(validate=False, out=)": api_out,
        "  its checked path (the call before launch_ready)": api_checked,
        "ragged.LayoutAttention call, packed qkv (launch kept)": api_layout,
        "ragged.varlen_attention(validate=True)": api_validate,
        "CUDA graph replay of one call": graph.replay,
        "fa2 aten op direct": fa2_direct,
        "ragged.varlen_attention(backend=fa2)": fa2_api,
        "one aten op: x.add_(1)": lambda: scratch.add_(1),
        "empty triton kernel[grid]": empty_plain,
        "empty triton compiled.run direct": empty_run,
        **pieces,
    }
    measured = H.measure_interleaved(paths, rounds=args.rounds, gpu=False)
    rows = [{"path": name, **m} for name, m in measured.items()]
    ref = ragged.varlen_attention(q, k, v, cu, max_seqlen, backend="reference")
    plain()
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
    return rows


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
                cfg = KA.AttentionConfig(bm, bn, warps, st)
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
        default = KA.attention_config(
            head_dim, max_seqlen, dtype, torch.cuda.get_device_capability()
        )
        case = {"shape": (heads, head_dim, str(dtype), batch, length), "default": default,
                "fns": {}, "errors": {}}  # fmt: skip
        for cfg in _candidates(head_dim, dtype, default):
            if time.time() - t0 > args.sweep_seconds:
                break

            def fn(cfg=cfg, q=q, k=k, v=v, cu=cu, m=max_seqlen, out=out):
                KA.varlen_attention_triton(q, k, v, cu, m, q.shape[-1] ** -0.5, out, cfg)

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
    H.spin_up(0.5)
    rows = []
    for case in cases:
        timings = {
            cfg: H.gpu_us(fn, calls=20, replays=10).median for cfg, fn in case["fns"].items()
        }
        best = min(timings, key=timings.get) if timings else None
        d = case["default"]
        row = {
            "shape": case["shape"],
            "default": {"config": d.__dict__, "gpu_us": timings.get(d)},
            "best": best and {"config": best.__dict__, "gpu_us": timings[best]},
            "all": [{"config": c.__dict__, "gpu_us": t} for c, t in timings.items()],
            "errors": case["errors"], "clocks": H.gpu_clocks(),
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
    p.add_argument("--sweep", action="store_true", help="sweep kernel launch configs")
    p.add_argument("--sweep-seconds", type=float, default=240, help="time cap of the sweep")
    p.add_argument("--no-table", action="store_true", help="skip the backend table")
    p.add_argument("--quick", action="store_true", help="skip the slow NestedTensor backend")
    p.add_argument("--repeat", type=int, default=1, help="run the table this many times")
    p.add_argument("--out", type=Path, help="directory for JSON results with raw samples")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("kernel_bench needs a CUDA GPU; none is available here.", file=sys.stderr)
        return 2
    env = environment()
    print(json.dumps(env))
    results = {"environment": env, "harness_version": H.HARNESS_VERSION}
    if args.launch_paths:
        results["launch_paths"] = launch_paths(args)
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
