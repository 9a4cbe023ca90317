"""Revisions timed in one process, in randomized interleaved rounds: the paired runner.

    python -m benchmarks.support.paired --arm base=SRC --arm aa=SRC --arm head=SRC --out FILE
        [--rounds 40] [--pipeline-rounds 30] [--seed 0] [--slow ARM=FRACTION] [--only REGEX]

``ragbench gate`` runs it in a few fresh processes (``ragbench.gate.paired``) for the metrics that
include host time: those move 1.6-2.1x from one process to the next on our VMs, and two arms
interleaved in one process agree within 0.5% (docs/calibration.md). An arm is a name and a
source tree whose ``ragged/`` is loaded under a package name of its own (``revision``); the
gate's arms are base, head, and ``aa``: base loaded a second time, whose ratio to base says
how far this process moves what did not change.

The cells are the suite's own (same benchmark names and parameters, ``grids`` axes, the
workloads of ``workloads`` bound to each revision, the ``harness`` timers):

    kernel.KernelLatency   host_us, call_us     every workload of the kernel grid
    kernel.DispatchFloor   floor_us, dispatch_us    (dispatch: the round's call_us less the
                                                    round's graph-replayed gpu_us)
    pipeline.Throughput    img_per_s            Threshold-L2, every pipeline, model, batch
    cpu.Pipeline           img_per_s            without a GPU (dense and padded pipelines)

One round of a cell takes one value of each metric from each arm, arms in a fresh random
order each round; round ``i`` of the arms pairs into the ratio the gate tests.

``--slow ARM=F`` (the calibration only, ``scripts/calibrate.py``) plants a slowdown of known
size in that arm's triton calls: a spin on the calling thread of F times the call's host time
(kernel cells), and for the triton pipelines also a device-side ``torch.cuda._sleep`` of F
times a forward's wall time: a host-bound forward grows by F through the spin, a GPU-bound one
through the sleep.

The output is one JSON document: ``{"schema", "seed", "arms", "errors": {arm: why it did not
load}, "slowed": {...}, "cells": [{"benchmark", "metric", "params", "unit", "values": {arm:
[...]}, "errors": {arm: why}}], "device", "seconds"}``. Exit 0 whatever the revisions
did (their failures are in the document); 2 when this runner itself cannot run.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import re
import sys
import time
from pathlib import Path

from . import grids, harness
from . import revision as _revision

SCHEMA = 1
GRAPH_CALLS = 20  # calls per graph replay (gpu_us of the round: harness.kernel_sampler)
TARGET_US = 15e3  # wall time of one img_per_s value: a few forwards back to back
CPU_TARGET_US = 0.1e6  # on the CPU (DeiT-Ti, ~30 ms a forward): a single forward is noise


def _cell(out, benchmark, metric, params, unit, values: dict, errors: dict) -> None:
    out.append({"benchmark": benchmark, "metric": metric, "params": params, "unit": unit,
                "values": values, "errors": errors})  # fmt: skip


def _split(measured: dict, metric: str) -> tuple[dict, dict]:
    """({arm: values of ``metric``}, {arm: error}) of interleaved_rounds' result."""
    values = {a: m[metric] for a, m in measured.items() if metric in m}
    errors = {a: m["error"] for a, m in measured.items() if "error" in m}
    return values, errors


def _slow_kernel(fn, fraction: float, info: dict):
    """``fn`` behind a spin of ``fraction`` of its host time per call."""
    seconds = fraction * harness.host_us(fn, calls=100, rounds=5).median * 1e-6
    info["spin_us"] = round(seconds * 1e6, 3)

    def slow():
        harness.spin(seconds)
        return fn()

    return slow


def _slow_pipeline(fn, fraction: float, info: dict, wall_us):
    """``fn`` behind a host spin of ``fraction`` of its host time and a device sleep of
    ``fraction`` of its wall time (``torch.cuda._sleep`` spins a number of GPU cycles)."""
    import torch

    host = harness.host_us(fn, calls=3, rounds=3).median
    wall = wall_us(fn, 5)
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    torch.cuda._sleep(1_000_000)
    end.record()
    end.synchronize()
    cycles_per_us = 1_000_000 / (start.elapsed_time(end) * 1e3)
    seconds, cycles = fraction * host * 1e-6, int(fraction * wall * cycles_per_us)
    info.update(spin_us=round(seconds * 1e6, 3), sleep_cycles=cycles)

    def slow():
        harness.spin(seconds)
        torch.cuda._sleep(cycles)
        return fn()

    return slow


def _wanted(only, benchmark: str, params: dict) -> bool:
    """Whether ``--only`` (a regex over "benchmark param_key") selects this group."""
    key = ",".join(f"{k}={params[k]}" for k in sorted(params))
    return only is None or only.search(f"{benchmark} {key}") is not None


def _kernels(W: dict, slow: dict, rounds: int, rng: random.Random, out: list, slowed: dict,
             only=None):  # fmt: skip
    """The kernel grid: every workload and backend, the arms interleaved."""
    for workload in itertools.product(
        grids.KERNEL_BATCHES, grids.PRUNE, grids.GEOMETRIES, grids.LENGTHS
    ):
        batch, prune, geometry, lengths = workload
        if lengths == "mixed" and batch == 1:
            continue
        for backend in grids.KERNEL_BACKENDS:
            params = dict(zip(("backend", "batch", "prune", "geometry", "lengths"),
                              (backend, *workload), strict=True))  # fmt: skip
            if not _wanted(only, "kernel.KernelLatency", params):
                continue
            samplers, errors = {}, {}
            for arm, w in W.items():
                try:
                    if backend not in w.ragged.available_backends():
                        continue
                    fn = w.attention(backend, *w.kernel_inputs(*workload))
                    harness.warmup(fn)
                    graph = (
                        harness.capture(fn, GRAPH_CALLS) if not harness.synchronises(fn) else None
                    )
                    if arm in slow and backend == "triton":
                        info = slowed.setdefault(f"{arm}:{backend}:{workload}", {})
                        fn = _slow_kernel(fn, slow[arm], info)
                    samplers[arm] = harness.kernel_sampler(fn, graph, graph_calls=GRAPH_CALLS)
                except Exception as exc:
                    errors[arm] = harness.failure(exc)
            if not samplers and not errors:
                continue  # the backend runs in no arm here
            measured = harness.interleaved_rounds(samplers, rounds, rng)
            for metric in ("host_us", "call_us"):
                values, errs = _split(measured, metric)
                _cell(out, "kernel.KernelLatency", metric, params, "us", values, errors | errs)
            if (batch, prune, lengths) == grids.FLOOR:
                floor = {"backend": backend, "geometry": geometry}
                values, errs = _split(measured, "call_us")
                _cell(out, "kernel.DispatchFloor", "floor_us", floor, "us", values, errors | errs)
                dispatch = {
                    a: [c - g for c, g in zip(m["call_us"], m["gpu_us"], strict=True)]
                    for a, m in measured.items() if "gpu_us" in m
                }  # fmt: skip
                _cell(out, "kernel.DispatchFloor", "dispatch_us", floor, "us", dispatch,
                      errors | errs)  # fmt: skip


def _pipelines(W: dict, slow: dict, rounds: int, rng, out: list, slowed: dict, cpu: bool,
               only=None):  # fmt: skip
    """img/s of the Threshold-L2 pipelines (GPU: Throughput's grid; CPU: cpu.Pipeline's)."""
    dev = {}
    if cpu:
        import torch

        dev = {"device": "cpu", "dtype": torch.float32}
        grid = [(grids.CPU_MODEL, grids.CPU_BATCH)]
        names = [p for p in grids.CPU_PIPELINES if p != "triton"]  # the interpreter: seconds a call
    else:
        grid = list(itertools.product(grids.MODELS, grids.BATCHES))
        names = grids.PIPELINES

    def key_of(model_name, batch, name):
        if cpu:
            return ("cpu.Pipeline", {"pipeline": name, "method": "threshold_l2"})
        return ("pipeline.Throughput", {"pipeline": name, "model": model_name, "batch": batch})

    for model_name in dict.fromkeys(m for m, _ in grid):
        batches = [b for m, b in grid if m == model_name]
        if not any(_wanted(only, *key_of(model_name, b, n)) for b in batches for n in names):
            continue  # --only selects none of this model's cells: it is not built
        models, errors = {}, {}
        for arm, w in W.items():
            try:
                models[arm] = w.build(model_name, **dev)
            except Exception as exc:
                errors[arm] = harness.failure(exc)
        for batch in batches:
            for name in names:
                key = key_of(model_name, batch, name)
                if not _wanted(only, *key):
                    continue
                samplers, errs = {}, dict(errors)
                for arm, model in models.items():
                    w = W[arm]
                    try:
                        pipe = w.pipeline(model, w.make_method("threshold_l2", model, **dev), name)
                        images = w.images(model_name, batch, **dev)

                        def fn(pipe=pipe, images=images):
                            return pipe.forward(images, check_overflow=False)

                        if arm in slow and name.startswith("triton") and not cpu:
                            info = slowed.setdefault(f"{arm}:{name}:{model_name}:{batch}", {})
                            fn()  # compiled before the slowdown is sized
                            fn = _slow_pipeline(fn, slow[arm], info, w.wall_us)
                        samplers[arm] = _img_sampler(w, fn, batch, cpu)
                    except Exception as exc:
                        errs[arm] = harness.failure(exc)
                measured = harness.interleaved_rounds(samplers, rounds, rng)
                values, e = _split(measured, "img_per_s")
                _cell(out, key[0], "img_per_s", key[1], "img/s", values, errs | e)


def _img_sampler(w, fn, batch: int, cpu: bool):
    """img/s of one timed batch of back-to-back forwards lasting about TARGET_US."""
    kw = {"sync": lambda: None} if cpu else {}
    fn()  # compilation, graph capture
    calls = max(1, int((CPU_TARGET_US if cpu else TARGET_US) / w.wall_us(fn, 2, **kw)))

    def sample() -> dict[str, float]:
        return {"img_per_s": batch / w.wall_us(fn, calls, **kw) * 1e6}

    return sample


def measure(arms: dict[str, Path], *, rounds: int, pipeline_rounds: int, seed: int,
            slow: dict[str, float], only: str | None = None) -> dict:  # fmt: skip
    """Every paired cell of the grid (``RAGBENCH_MODE``) for these arms; see the module."""
    t0 = time.perf_counter()
    doc = {"schema": SCHEMA, "seed": seed, "arms": {a: str(p) for a, p in arms.items()},
           "errors": {}, "slowed": {}, "cells": []}  # fmt: skip
    W, errors = _revision.arms_workloads(arms, "ragged_")
    doc["errors"].update(errors)
    import torch

    cpu = not torch.cuda.is_available()
    rng = random.Random(seed)
    only = re.compile(only) if only else None
    if W and not cpu:
        for w in W.values():
            harness.tune(w.ragged)
        harness.spin_up()
        _kernels(W, slow, rounds, rng, doc["cells"], doc["slowed"], only)
    if W:
        _pipelines(W, slow, pipeline_rounds, rng, doc["cells"], doc["slowed"], cpu, only)
    doc["device"] = "cpu" if cpu else torch.cuda.get_device_name()
    doc["seconds"] = round(time.perf_counter() - t0, 2)
    return doc


def _arm(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return name, value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--arm",
        type=_arm,
        action="append",
        required=True,
        help="NAME=SRC: a source tree holding ragged/ (repeat: base, aa, head)",
    )
    ap.add_argument("--out", type=Path, required=True, help="the JSON document")
    ap.add_argument("--rounds", type=int, default=40, help="rounds of each kernel cell")
    ap.add_argument("--pipeline-rounds", type=int, default=30, help="rounds of each pipeline")
    ap.add_argument("--seed", type=int, default=0, help="of the arms' order in each round")
    ap.add_argument(
        "--slow",
        type=_arm,
        action="append",
        default=[],
        help="ARM=FRACTION: plant a slowdown in that arm's triton calls (calibration)",
    )
    ap.add_argument(
        "--only",
        default=None,
        metavar="REGEX",
        help='measure the cells whose "benchmark param=value,..." matches',
    )
    args = ap.parse_args(argv)
    try:
        slow = {a: float(f) for a, f in args.slow}
        if not all(0 <= f < 1 for f in slow.values()) or not set(slow) <= {a for a, _ in args.arm}:
            raise ValueError(f"--slow needs a known arm and a fraction in [0, 1): {args.slow}")
        if args.rounds < 1 or args.pipeline_rounds < 1:
            raise ValueError("--rounds and --pipeline-rounds must be at least 1")
        doc = measure({a: Path(p) for a, p in args.arm}, rounds=args.rounds,
                      pipeline_rounds=args.pipeline_rounds, seed=args.seed, slow=slow,
                      only=args.only)  # fmt: skip
        args.out.write_text(json.dumps(doc))
    except (ValueError, OSError) as exc:
        print(f"paired: error: {exc}", file=sys.stderr)
        return 2
    n = len(doc["cells"])
    print(f"paired: {n} cells, {len(doc['arms'])} arms in {doc['seconds']:.0f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
