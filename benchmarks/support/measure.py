"""The suite's ``setup_cache`` functions: kernels, pipelines, and the CPU subset's two.

Each measures every grid its classes declare, in one process. Classes that share a function
share asv's cache (asv keys it by the function's source line), so a run pays the torch import,
CUDA start-up and model builds (~10-15 s on the H100 VM) once per function, not once per
class. A cache is ``{"skip": reason or None, "cells": {table: {params tuple: {metric: value}}}}``.

torch and ragged are imported inside the functions: see ``suite``.
"""

from __future__ import annotations

import itertools
import os

# letter aliases kept: asv hashes a setup_cache's source into its benchmarks' versions
from . import grids as G
from .suite import mode, skipped


def _gpu():
    """torch, or None without a CUDA GPU."""
    import torch

    return torch if torch.cuda.is_available() else None


def kernels(self) -> dict:
    """Tables ``latency`` (call/gpu/host µs samples), ``clocks`` (per workload), ``error``."""
    torch = _gpu()
    if torch is None:
        return skipped("needs a CUDA GPU: kernel timings are GPU timings")
    from . import harness as H
    from . import inject as _inject
    from . import workloads as W

    available = set(W.ragged.available_backends())
    inject = _inject.fraction()  # set by the detector's calibration only
    latency, clocks, error = {}, {}, {}
    H.tune(W.ragged)
    H.spin_up()
    for workload in itertools.product(G.KERNEL_BATCHES, G.PRUNE, G.GEOMETRIES, G.LENGTHS):
        batch, prune, geometry, lengths = workload
        if lengths == "mixed" and batch == 1:
            for b in G.KERNEL_BACKENDS:
                latency[(b, *workload)] = {"skip": "one image has one length: mixed needs BS > 1"}
            clocks[workload] = {"skip": "not measured"}
            continue
        q, k, v, cu_seqlens, max_seqlen = W.kernel_inputs(batch, prune, geometry, lengths)
        fns = {
            b: W.attention(b, q, k, v, cu_seqlens, max_seqlen)
            for b in G.KERNEL_BACKENDS if b in available
        }  # fmt: skip
        injected = None
        if inject is not None and "triton" in fns:
            fns["triton"], injected = _inject.triton_fn(q, k, v, cu_seqlens, max_seqlen, inject)
        before = H.gpu_clocks()
        measured = H.measure_interleaved(fns, rounds=5, slow=frozenset({"nested_sdpa"}))
        after = H.gpu_clocks()
        for b in G.KERNEL_BACKENDS:
            m = measured.get(b)
            latency[(b, *workload)] = (
                {"skip": f"backend {b} is not available here"} if m is None else {
                    "call_us": m["call_us"]["samples"],
                    "host_us": m["host_us"]["samples"],
                    "gpu_us": m["gpu_us"]["samples"] if m["gpu_us"] else None,
                }
            )  # fmt: skip
            if b == "triton" and injected is not None:
                latency[(b, *workload)]["injected"] = injected
        clocks[workload] = (
            {"sm_clock_mhz": [before["sm_clock_mhz"], after["sm_clock_mhz"]],
             "throttle_reasons": before["throttle_reasons"] | after["throttle_reasons"]}
            if before and after else {"skip": "NVML cannot read this GPU's clocks"}
        )  # fmt: skip
    anchored = _anchored(W)
    for dtype, lengths in itertools.product(G.ERROR_DTYPES, G.LENGTHS):
        inputs = W.kernel_inputs(8, 0.5, "deit_b", lengths, dtype=getattr(torch, dtype))
        for b in G.KERNEL_BACKENDS:
            error[(b, dtype, lengths)] = (
                W.kernel_error(b, *inputs) if b in available
                else {"skip": f"backend {b} is not available here"}
            )  # fmt: skip
    cells = {"latency": latency, "clocks": clocks, "error": error, "anchor": anchored}
    return {"skip": None, "cells": cells}


def first_calls(self) -> dict:
    """Table ``first_call``: what the first call of an unseen shape costs (``first_call``),
    in a process of its own that launched nothing before: not ``kernels``, whose set-up tunes
    and launches the shapes first."""
    torch = _gpu()
    if torch is None:
        return skipped("needs a CUDA GPU: first-call costs are GPU costs")
    from . import first_call as _first_call
    from . import workloads as W

    if "triton" not in W.ragged.available_backends():
        return skipped("backend triton is not available here")
    measured = _first_call.measure([*G.NEW_LENGTH, *G.FIRST_CALL_CASES])
    return {"skip": None, "cells": {"first_call": {(c,): m for c, m in measured.items()}}}


ANCHOR_ENV = "RAGBENCH_ANCHOR"  # the anchor's source tree (ragbench.asv_run checks it out)
ANCHOR_ROUNDS = 40


def anchor_table(W) -> dict:
    """Table ``anchor``: the triton call at the dispatch floor's workload over the same call of
    the anchor revision (``harness.ANCHOR``), in interleaved rounds of this process; per-round
    ratios of ``call_us`` (``floor_ratio``) and ``host_us`` (``host_ratio``)."""
    import os
    import random

    from . import harness as H
    from . import revision as _revision

    src = os.environ.get(ANCHOR_ENV)
    if not src:
        return {(g,): {"skip": f"no anchor revision (${ANCHOR_ENV} unset)"} for g in G.GEOMETRIES}
    try:
        A = _revision.workloads(_revision.load(src, "ragged_anchor"))
    except Exception as exc:  # the anchor no longer runs with today's suite
        reason = f"the anchor {H.ANCHOR[:12]} does not load: {H.failure(exc, 250)}"
        return {(g,): {"skip": reason} for g in G.GEOMETRIES}
    cells = {}
    batch, prune, lengths = G.FLOOR
    for geometry in G.GEOMETRIES:
        samplers = {}
        for arm, w in (("commit", W), ("anchor", A)):
            fn = w.attention("triton", *w.kernel_inputs(batch, prune, geometry, lengths))
            H.warmup(fn)
            samplers[arm] = H.kernel_sampler(fn)
        m = H.interleaved_rounds(samplers, ANCHOR_ROUNDS, random.Random(0))
        if "error" in m["commit"]:
            raise RuntimeError(f"the triton call failed: {m['commit']['error']}")
        if "error" in m["anchor"]:
            cells[(geometry,)] = {"skip": f"the anchor failed: {m['anchor']['error']}"}
            continue
        c, a = m["commit"], m["anchor"]
        cells[(geometry,)] = {
            "floor_ratio": [x / y for x, y in zip(c["call_us"], a["call_us"], strict=True)],
            "host_ratio": [x / y for x, y in zip(c["host_us"], a["host_us"], strict=True)],
        }
    return cells


# ``kernels`` calls it by this name: asv hashes setup_cache's source into the version of every
# kernel benchmark, so a rename there would restart their series
_anchored = anchor_table


def promises(self) -> dict:
    """Table ``promise``: per geometry, at the dispatch floor's workload, the per-round
    host-time ratios of the API's launch promises (``promises.measure``). Its own cache: the
    kernels' cache's source is part of their asv version, which must not move."""
    torch = _gpu()
    if torch is None:
        return skipped("needs a CUDA GPU: the promises are host times of GPU launches")
    from . import harness as H
    from . import promises as P
    from . import workloads as W

    H.tune(W.ragged)
    H.spin_up()
    batch, prune, lengths = G.FLOOR
    cells = {(g,): P.measure(*W.kernel_inputs(batch, prune, g, lengths)) for g in G.GEOMETRIES}
    return {"skip": None, "cells": {"promise": cells}}


def floor_workload(label: str) -> tuple[int, float]:
    """(batch, share pruned) of a ``FLOOR_WORKLOADS`` label such as "8/50"."""
    batch, percent = label.split("/")
    return int(batch), int(percent) / 100


def floors(self) -> dict:
    """Table ``floor``: per ``FLOOR_WORKLOADS`` workload (DeiT-B, uniform lengths), the triton
    call's graph-replay µs, an empty kernel's, and their per-round ratio (``_floor.measure``).
    Its own cache, as ``promises``: the kernels' cache's source is part of their version."""
    torch = _gpu()
    if torch is None:
        return skipped("needs a CUDA GPU: the floor is GPU time")
    from . import floor as _floor
    from . import harness as H
    from . import workloads as W

    if "triton" not in W.ragged.available_backends():
        return skipped("backend triton is not available here")
    H.tune(W.ragged)
    H.spin_up()
    cells = {}
    for label in G.FLOOR_WORKLOADS:
        batch, prune = floor_workload(label)
        inputs = W.kernel_inputs(batch, prune, "deit_b", "uniform")
        cells[(label,)] = _floor.measure(W.attention("triton", *inputs))
    return {"skip": None, "cells": {"floor": cells}}


def bounds(self) -> dict:
    """Table ``bound``: triton's share of the bound (``_bound.measure``) per model, pruning
    method and batch of ``BOUND_*``: eager over no_attention and over launch_only, and under
    CUDA graphs over no_attention_graph. Its own cache (~20 s a row on the H100). Main's
    grid only: these shares are shown, never judged, and in the quick grid they made the whole
    gate of an A/A pair outlast 585 s on the H100 (572 s before)."""
    if mode() == "quick":
        return skipped("measured on main (the full grid) only: shown, never judged by a gate")
    torch = _gpu()
    if torch is None:
        return skipped("needs a CUDA GPU: the bound is measured on whole GPU forwards")
    from . import bound as _bound
    from . import harness as H
    from . import workloads as W

    if "triton" not in W.ragged.available_backends() or "fa2" not in W.ragged.available_backends():
        return skipped("needs the triton and fa2 backends")
    H.tune(W.ragged)
    H.spin_up()
    cells = {}
    for model_name in G.BOUND_MODELS:
        model = W.build(model_name)
        for method_name, batch in itertools.product(G.BOUND_METHODS, G.BOUND_BATCHES):
            images = W.images(model_name, batch)
            method = W.make_method(method_name, model)
            samples = _bound.turns_us(_bound.forwards(model, method, images), G.BOUND_ROUNDS)
            cells[(model_name, method_name, batch)] = _bound.shares(samples)
            torch.cuda.empty_cache()
        del model
        torch.cuda.empty_cache()
    return {"skip": None, "cells": {"bound": cells}}


def pipelines(self) -> dict:
    """Tables ``throughput`` and ``methods`` (img/s samples), ``memory``, ``ideal``,
    ``stages`` (ms samples) and ``drift``."""
    torch = _gpu()
    if torch is None:
        return skipped("needs a CUDA GPU (the CPU subset is cpu.py)")
    from ragged.models import get_config

    from . import harness as H
    from . import workloads as W

    cells: dict[str, dict] = {
        t: {} for t in ("throughput", "methods", "memory", "ideal", "stages", "drift")
    }
    H.tune(W.ragged)
    H.spin_up()
    for model_name in G.MODELS:
        model = W.build(model_name)
        for batch in sorted({*G.BATCHES, G.MEMORY_BATCH, G.METHOD_BATCH, G.STAGE_BATCH}):
            images = W.images(model_name, batch)
            for method_name in G.METHODS:
                method = W.make_method(method_name, model)
                if batch == G.METHOD_BATCH:
                    speedup = W.flop_ideal(model, images, method)
                    cells["ideal"][(model_name, method_name)] = {"speedup": speedup}
                tables = []  # (table, key) this workload fills
                if method_name == "threshold_l2" and batch in G.BATCHES:
                    tables.append(("throughput", (model_name, batch)))
                if model_name == G.METHOD_MODEL and batch == G.METHOD_BATCH:
                    tables.append(("methods", (method_name,)))
                if not tables:
                    continue
                pipes = {p: W.pipeline(model, method, p) for p in G.PIPELINES}
                if method_name == "threshold_l2" and batch == G.MEMORY_BATCH:
                    for p, pipe in pipes.items():  # each alone: its own working memory
                        cells["memory"][(p, model_name)] = {"peak_mib": _peak_mib(pipe, images)}
                fns = {
                    p: (lambda pipe=pipe, images=images: pipe.forward(images, check_overflow=False))
                    for p, pipe in pipes.items()
                }  # fmt: skip
                for p, values in W.img_per_s(fns, batch, rounds=7).items():
                    for table, key in tables:
                        cells[table][(p, *key)] = {"img_per_s": values}
                del pipes, fns
                torch.cuda.empty_cache()
            if model_name == G.STAGE_MODEL and batch == G.STAGE_BATCH:
                method = W.make_method("threshold_l2", model)
                for p in G.STAGE_PIPELINES:
                    times = W.stage_ms(W.pipeline(model, method, p), images, reps=20)
                    for stage in G.STAGES:
                        cells["stages"][(p, stage)] = {"ms": times[stage]}
        if model_name in G.DRIFT_MODELS:
            images = W.images(model_name, G.DRIFT_BATCH[get_config(model_name).img_size])
            for method_name in G.DRIFT_METHODS:
                method = W.make_method(method_name, model)
                for b, m in W.logit_drift(model, images, method, G.DRIFT_BACKENDS).items():
                    cells["drift"][(b, model_name, method_name)] = m
        del model
        torch.cuda.empty_cache()
    return {"skip": None, "cells": cells}


def _peak_mib(pipe, images) -> float:
    """GPU memory the pipeline's first forwards take beyond what was allocated before them
    (weights, images, other pipelines' graphs): activations, packed buffers, graph pools."""
    import torch

    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    for _ in range(2):  # the second forward of a graphed pipeline is its first replay
        pipe.forward(images, check_overflow=False)
    torch.cuda.synchronize()
    return (torch.cuda.max_memory_allocated() - base) / 2**20


ON_GPU = "a CUDA GPU is here: the GPU benchmarks measure these paths"


def _cpu():
    """torch for the CPU subset, or None where a CUDA GPU measures these paths instead."""
    if _gpu() is not None:
        return None
    os.environ["TRITON_INTERPRET"] = "1"  # before triton is first imported (by ragged)
    import torch

    return torch


def cpu_pipelines(self) -> dict:
    """Tables ``pipeline`` (img/s samples) and ``drift`` on the CPU."""
    torch = _cpu()
    if torch is None:
        return skipped(ON_GPU)
    from . import workloads as W

    cpu = {"device": "cpu", "dtype": torch.float32}
    model, images = W.build(G.CPU_MODEL, **cpu), W.images(G.CPU_MODEL, G.CPU_BATCH, **cpu)
    cells: dict[str, dict] = {"pipeline": {}, "drift": {}}
    for method_name in G.CPU_METHODS:
        method = W.make_method(method_name, model, **cpu)
        pipes = {p: W.pipeline(model, method, p) for p in G.CPU_PIPELINES}
        fns = {p: (lambda pipe=pipe: pipe.forward(images)) for p, pipe in pipes.items()}
        measured = W.img_per_s(fns, G.CPU_BATCH, rounds=3, target_us=0.2e6, sync=lambda: None)
        for p, values in measured.items():
            cells["pipeline"][(p, method_name)] = {"img_per_s": values}
        for b, m in W.logit_drift(model, images, method, G.CPU_DRIFT_BACKENDS).items():
            cells["drift"][(b, G.CPU_MODEL, method_name)] = m
    return {"skip": None, "cells": cells}


def cpu_kernel_error(self) -> dict:
    """Table ``error`` on the CPU. Apart from the pipelines (~30 s here) so that a run of this
    table alone (the workflow rehearsal in make test) takes seconds."""
    torch = _cpu()
    if torch is None:
        return skipped(ON_GPU)
    from . import workloads as W

    cells: dict[str, dict] = {"error": {}}
    for dtype in G.CPU_DTYPES:
        inputs = W.kernel_inputs(8, 0.5, "deit_b", "mixed", device="cpu",
                                 dtype=getattr(torch, dtype))  # fmt: skip
        for b in G.CPU_KERNEL_BACKENDS:
            cells["error"][(b, dtype)] = W.kernel_error(b, *inputs)
    return {"skip": None, "cells": cells}
