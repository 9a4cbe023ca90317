"""The numerics workloads' raw outputs, per revision, on the same inputs: what
``ragbench.gate.drift`` compares.

    python -m benchmarks.support.outputs --arm base=SRC --arm head=SRC --arm aa=SRC --out FILE.npz
        [--only REGEX] [--aa-where-moved]

An arm is a name and a source tree whose ``ragged/`` is loaded under a package name of its own
(``revision``, as the paired runner does); every arm runs in this one process, on this stack.
The cells are the numerics benchmarks' workloads (``grids``; ``RAGBENCH_MODE`` picks the
grid), each computed by every arm through ``workloads`` bound to it:

    drift.Pipeline  logits, keep_masks   numerics.Drift's grid and padded_max (the CPU subset:
                                         cpu.Drift's, DeiT-Ti fp32, Triton's interpreter)
    drift.Kernel    output               numerics.KernelError's grid (cpu.KernelError's): BS 8,
                                         50% pruned, DeiT-B geometry

The data (images; q, k and v) are built once, by the first arm, and given to every arm; each
arm builds its own model from the same seed (the model builder is the library's code).

``--aa-where-moved``: the ``aa`` arm (base's tree again, after head) is computed only for the
cells where head's outputs differ from base's: where they are equal (or one side raised) no
noise can matter, and a commit that does not touch numerics costs two arms, not three.

The output is one ``.npz``: the arrays ``c<i>.<arm>.<name>`` (logits float32; keep masks bool
[stages, B, N]; kernel outputs in their dtype, bfloat16 as float32, both exact) and
``meta``, a JSON document: ``{"schema", "arms": {arm: src}, "errors": {arm: why it did not
load}, "cells": [{"benchmark", "params", "arrays": {arm: [names]}, "errors": {arm: why},
"skipped": {arm: why}}], "device", "torch", "triton", "mode", "seconds"}``. Exit 0 whatever
the revisions did (their failures are in the document); 2 when this runner cannot run.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import os
import re
import sys
import time
from pathlib import Path

from . import grids, harness
from . import revision as _revision
from .suite import mode as grid_mode

SCHEMA = 1
PIPELINE, KERNEL = "drift.Pipeline", "drift.Kernel"
REFERENCE = "padded_max"  # the reference pipeline, always compared too
KERNEL_WORKLOAD = (8, 0.5, "deit_b")  # _measure's kernel-error workload: batch, prune, geometry


def _interpret_without_gpu() -> None:
    """Triton's interpreter where no GPU can run the kernels: set before torch imports triton
    (``ragbench.envs.CHECK`` does the same)."""
    if not os.path.exists("/dev/nvidiactl"):
        os.environ["TRITON_INTERPRET"] = "1"


def param_key(params: dict) -> str:
    """As the store keys cells: ``k=v`` sorted by name, comma-separated."""
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def _wanted(only, benchmark: str, params: dict) -> bool:
    """Whether ``--only`` (a regex over "benchmark param_key") selects this cell."""
    return only is None or only.search(f"{benchmark} {param_key(params)}") is not None


def _numpy(t):
    """A tensor as an exact numpy array: bfloat16 (which numpy lacks) as float32."""
    import torch

    t = t.detach().cpu()
    return (t.float() if t.dtype == torch.bfloat16 else t).numpy()


def _equal(a: dict, b: dict) -> bool:
    """Whether two arms' arrays of a cell are the same, bit for bit (NaN where NaN)."""
    import numpy as np

    return a.keys() == b.keys() and all(
        a[k].shape == b[k].shape and np.array_equal(a[k], b[k], equal_nan=a[k].dtype.kind == "f")
        for k in a
    )


def _moved(got: dict) -> bool:
    """Whether base and head both computed the cell and differ: where noise matters."""
    return "base" in got and "head" in got and not _equal(got["base"], got["head"])


class _Cells:
    """The document's cells and arrays as they are computed."""

    def __init__(self, arms: list[str], aa_where_moved: bool):
        self.arms, self.lazy = arms, aa_where_moved
        self.cells: list[dict] = []
        self.arrays: dict[str, object] = {}

    def run(self, benchmark: str, params: dict, compute: dict, errors: dict) -> None:
        """One cell: ``compute[arm]()`` -> {name: array} for each arm that could set it up
        (``errors``: why the others could not), in the arms' order."""
        i = len(self.cells)
        cell = {"benchmark": benchmark, "params": params, "arrays": {}, "errors": dict(errors),
                "skipped": {}}  # fmt: skip
        got: dict[str, dict] = {}
        for arm in self.arms:
            if arm not in compute:
                continue
            if arm == "aa" and self.lazy and not _moved(got):
                cell["skipped"][arm] = "head equals base, or one raised: no noise matters"
                continue
            try:
                got[arm] = compute[arm]()
            except Exception as exc:
                cell["errors"][arm] = harness.failure(exc, 300)
                continue
            cell["arrays"][arm] = sorted(got[arm])
            for name, array in got[arm].items():
                self.arrays[f"c{i}.{arm}.{name}"] = array
        self.cells.append(cell)


def _pipelines(W: dict, cells: _Cells, cpu: bool, only) -> None:
    import torch

    first = next(iter(W.values()))
    if cpu:
        dev = {"device": "cpu", "dtype": torch.float32}
        grid = [(grids.CPU_MODEL, grids.CPU_BATCH, grids.CPU_METHODS, grids.CPU_DRIFT_BACKENDS)]
    else:
        dev = {}
        grid = [(m, grids.DRIFT_BATCH[first.get_config(m).img_size], grids.DRIFT_METHODS,
                 grids.DRIFT_BACKENDS) for m in grids.DRIFT_MODELS]  # fmt: skip
    for model_name, batch, methods, backends in grid:
        keys = [
            (method, backend)
            for method, backend in itertools.product(methods, [REFERENCE, *backends])
            if _wanted(only, PIPELINE, {"backend": backend, "model": model_name, "method": method})
        ]
        keys = list(dict.fromkeys(keys))
        if not keys:
            continue
        images = first.images(model_name, batch, **dev)
        models, errors = {}, {}
        for arm, w in W.items():
            try:
                models[arm] = w.build(model_name, **dev)
            except Exception as exc:
                errors[arm] = harness.failure(exc, 300)
        for method_name, backend in keys:
            params = {"backend": backend, "model": model_name, "method": method_name}
            compute = {
                arm: functools.partial(_pipeline, W[arm], model, images, method_name, backend, dev)
                for arm, model in models.items()
            }
            cells.run(PIPELINE, params, compute, errors)
        del models
        if not cpu:
            torch.cuda.empty_cache()


def _pipeline(w, model, images, method_name: str, backend: str, dev: dict) -> dict:
    """One arm's logits and keep masks of one pipeline."""
    import torch

    with torch.inference_mode():
        method = w.make_method(method_name, model, **dev)
        logits, masks = w.pipeline_outputs(model, images, method, backend)
        return {"logits": _numpy(logits.float()), "keep_masks": _numpy(torch.stack(masks))}


def _kernels(W: dict, cells: _Cells, cpu: bool, only) -> None:
    import torch

    first = next(iter(W.values()))
    if cpu:
        grid = itertools.product(grids.CPU_DTYPES, ["mixed"])
        backends, device = grids.CPU_KERNEL_BACKENDS, "cpu"
    else:
        grid = itertools.product(grids.ERROR_DTYPES, grids.LENGTHS)
        backends, device = grids.KERNEL_BACKENDS, "cuda"
    for dtype, lengths in grid:
        keys = [
            b
            for b in backends
            if _wanted(only, KERNEL, {"backend": b, "dtype": dtype, "lengths": lengths})
        ]
        keys = [b for b in keys if b in first.ragged.available_backends()]
        if not keys:
            continue
        inputs = first.kernel_inputs(*KERNEL_WORKLOAD, lengths, device=device,
                                     dtype=getattr(torch, dtype))  # fmt: skip
        for backend in keys:
            compute = {arm: functools.partial(_kernel, w, backend, inputs) for arm, w in W.items()}
            params = {"backend": backend, "dtype": dtype, "lengths": lengths}
            cells.run(KERNEL, params, compute, {})


def _kernel(w, backend: str, inputs: tuple) -> dict:
    return {"output": _numpy(w.kernel_output(backend, *inputs))}


def measure(arms: dict[str, Path], *, only: str | None = None,
            aa_where_moved: bool = False) -> tuple[dict, dict]:  # fmt: skip
    """-> (meta document, arrays) of every cell of the grid for these arms (see the module)."""
    t0 = time.perf_counter()
    doc = {"schema": SCHEMA, "arms": {a: str(p) for a, p in arms.items()}, "errors": {},
           "mode": grid_mode()}  # fmt: skip
    W, errors = _revision.arms_workloads(arms, "ragged_out_")
    doc["errors"].update(errors)
    import torch
    import triton

    cpu = not torch.cuda.is_available()
    cells = _Cells(list(arms), aa_where_moved)
    if W:
        if not cpu:
            for w in W.values():
                harness.tune(w.ragged)  # the launch configurations the benchmarks run
        only_re = re.compile(only) if only else None
        _pipelines(W, cells, cpu, only_re)
        _kernels(W, cells, cpu, only_re)
    for cell in cells.cells:  # an arm that did not load has no value in any cell
        cell["errors"].update(doc["errors"])
    doc.update(cells=cells.cells, device="cpu" if cpu else torch.cuda.get_device_name(),
               torch=torch.__version__, triton=triton.__version__,
               seconds=round(time.perf_counter() - t0, 2))  # fmt: skip
    return doc, cells.arrays


def save(path: Path, doc: dict, arrays: dict) -> None:
    """The ``.npz`` of the module's docstring."""
    import numpy as np

    with open(path, "wb") as fh:  # np.savez would add ".npz" to a name without it
        np.savez(fh, meta=np.array(json.dumps(doc)), **arrays)


def _arm(text: str) -> tuple[str, str]:
    name, sep, value = text.partition("=")
    if not sep or not name.isidentifier():
        raise argparse.ArgumentTypeError(f"expected NAME=SRC, got {text!r}")
    return name, value


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arm", type=_arm, action="append", required=True,
                    help="NAME=SRC: a source tree holding ragged/ (base first: it builds the "
                    "data)")  # fmt: skip
    ap.add_argument("--out", type=Path, required=True, help="the .npz file")
    ap.add_argument("--only", default=None, metavar="REGEX",
                    help='the cells whose "benchmark param=value,..." matches')  # fmt: skip
    ap.add_argument(
        "--aa-where-moved",
        action="store_true",
        help="compute the aa arm only where head's outputs differ from base's",
    )
    args = ap.parse_args(argv)
    _interpret_without_gpu()
    try:
        names = [a for a, _ in args.arm]
        if len(set(names)) != len(names):
            raise ValueError(f"each --arm needs its own name, got {names}")
        if args.aa_where_moved and not {"base", "head", "aa"} <= set(names):
            raise ValueError("--aa-where-moved needs arms named base, head and aa")
        doc, arrays = measure({a: Path(p) for a, p in args.arm}, only=args.only,
                              aa_where_moved=args.aa_where_moved)  # fmt: skip
        save(args.out, doc, arrays)
    except (ValueError, OSError, re.error) as exc:
        print(f"outputs: error: {exc}", file=sys.stderr)
        return 2
    print(f"outputs: {len(doc['cells'])} cells, {len(doc['arms'])} arms in {doc['seconds']:.0f} s "
          f"({doc['device']})", file=sys.stderr)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
