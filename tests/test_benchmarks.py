"""The asv suite: its declarations, and a quick run through asv itself into a temporary dir."""

from __future__ import annotations

import importlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ragbench import asv_results
from ragbench import provenance as fingerprint

REPO = Path(__file__).resolve().parent.parent
MODULES = ["kernel", "pipeline", "numerics", "cpu"]


def suite_classes(mode: str) -> dict[str, type]:
    """{module.Class: class} of every benchmark class in ``mode``'s grid (fresh imports)."""
    os.environ["RAGBENCH_MODE"] = mode
    try:
        for name in [m for m in sys.modules if m.startswith("benchmarks")]:
            del sys.modules[name]
        out = {}
        for m in MODULES:
            module = importlib.import_module(f"benchmarks.{m}")
            for attr, cls in vars(module).items():
                if isinstance(cls, type) and not attr.startswith("_") and hasattr(cls, "params"):
                    out[f"{m}.{attr}"] = cls
        return out
    finally:
        os.environ.pop("RAGBENCH_MODE")


def tracks(cls) -> list[str]:
    return [a for a in dir(cls) if a.startswith("track_")]


@pytest.mark.parametrize("mode", ["quick", "full"])
def test_every_benchmark_declares_params_units_and_a_version(mode):
    classes = suite_classes(mode)
    assert len(classes) == 19
    for name, cls in classes.items():
        assert len(cls.params) == len(cls.param_names), name
        for axis in cls.params:
            assert axis and len(set(map(repr, axis))) == len(axis), (name, axis)
        assert tracks(cls), name
        for t in tracks(cls):
            unit = getattr(getattr(cls, t), "unit", None) or getattr(cls, "unit", None)
            assert isinstance(unit, str) and unit, f"{name}.{t} declares no unit"
        assert cls.version.startswith("harness"), name
        assert callable(cls.setup_cache) and cls.table, name


def test_asv_discovers_each_suite_class_once_and_not_their_shared_bases():
    """The bases in support/metrics.py are public and carry track_ methods: asv skips them only
    because they are abstract, so it finds the suite's classes, each once under its own name."""
    from ragbench import discovery

    found = {name.rpartition(".")[0] for name in discovery.discover.__wrapped__("quick")}
    assert found == set(suite_classes("quick"))


def test_asvs_discovery_imports_neither_torch_nor_the_workloads():
    """asv imports every module it walks under benchmarks/ twice a run (its discovery, and its
    forkserver before it forks), and finds no benchmark in support/. support/ is a namespace
    package (no ``__init__.py``), which asv's walk (``pkgutil.iter_modules``) does not enter:
    those two processes import what the benchmark modules import, not torch, ragged or the
    workloads (4.2 -> 0.4 s of CPU each here); setup_cache's own process imports them."""
    code = ("import json, sys; from asv_runner.discovery import disc_benchmarks; "
            "names = [b.name for b in disc_benchmarks(sys.argv[1])]; "
            "print(json.dumps([names, sorted(sys.modules)]))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "benchmarks")], cwd=REPO,
                         capture_output=True, text=True, check=True,
                         env={**os.environ, "RAGBENCH_MODE": "quick"})  # fmt: skip
    names, modules = json.loads(out.stdout)
    assert {n.rpartition(".")[0] for n in names} == set(suite_classes("quick"))
    heavy = [m for m in modules if m.split(".")[0] in ("torch", "triton", "ragged", "timm")]
    assert not heavy and "benchmarks.support.workloads" not in modules, heavy[:5]


def test_quick_grid_is_a_subset_of_the_full_grid():
    quick, full = suite_classes("quick"), suite_classes("full")
    assert quick.keys() == full.keys()
    for name in quick:
        for q, f in zip(quick[name].params, full[name].params, strict=True):
            assert set(q) <= set(f), (name, q, f)
    cells = {m: sum(math.prod(map(len, c.params)) * len(tracks(c)) for c in g.values())
             for m, g in (("quick", quick), ("full", full))}  # fmt: skip
    assert cells["quick"] < cells["full"] < 1000  # ~0.55 s of asv per cell on the H100 VM


def test_the_launch_promises_are_a_gpu_cell_skipped_here_with_a_reason():
    import torch

    cls = suite_classes("quick")["kernel.LaunchPromise"]
    assert set(tracks(cls)) == {"track_layout_over_launch", "track_api_over_aten"}
    assert cls.unit == "ratio" and cls.setup_cache.__qualname__ == "promises"
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: the promises are measured")
    cache = cls.setup_cache(None)
    with pytest.raises(NotImplementedError, match="needs a CUDA GPU"):
        cls().setup(cache, "deit_b")


def test_the_promises_pair_each_rounds_host_times(monkeypatch):
    """``promises.measure``'s ratios come from the same round of both arms."""
    from benchmarks.support import harness, promises

    us = {"layout": 6.0, "empty_kept": 5.0, "empty_direct": 4.0, "api": 9.0, "aten": 10.0}
    clock = {"round": 0}

    def host_us(fn, calls, rounds):  # every arm's time doubles each round: paired, it cancels
        value = fn() * 2 ** (clock["round"] // len(us))
        clock["round"] += 1
        return harness.Timing(value, [value])

    monkeypatch.setattr(promises, "arms", lambda *a: {n: (lambda v=v: v) for n, v in us.items()})
    monkeypatch.setattr(harness, "warmup", lambda fn: None)
    monkeypatch.setattr(harness, "host_us", host_us)
    ratios = promises.measure(None, None, None, None, 0, rounds=6)
    assert ratios == {"layout_over_launch": [1.5] * 6, "api_over_aten": [0.9] * 6,
                      "kept_over_launch": [1.25] * 6}  # fmt: skip


def test_the_gpu_floor_and_the_bound_shares_are_gpu_cells_skipped_here_with_a_reason(
    monkeypatch,
):
    import torch

    classes = suite_classes("quick")
    floor, share = classes["kernel.GpuFloor"], classes["pipeline.BoundShare"]
    assert set(tracks(floor)) == {"track_over_empty", "track_gpu_us", "track_empty_us"}
    assert set(tracks(share)) == {
        "track_share_of_bound", "track_share_of_launch_bound", "track_graph_share_of_bound"
    }  # fmt: skip
    assert floor.setup_cache.__qualname__ == "floors"
    assert share.setup_cache.__qualname__ == "bounds"
    if torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here: they are measured")
    with pytest.raises(NotImplementedError, match="needs a CUDA GPU"):
        floor().setup(floor.setup_cache(None), "1/80")
    # the shares are shown, never judged: a pull request's gate (the quick grid) skips them
    monkeypatch.setenv("RAGBENCH_MODE", "quick")
    with pytest.raises(NotImplementedError, match="measured on main"):
        share().setup(share.setup_cache(None), "deit_base_224", "threshold_l2", 1)
    monkeypatch.setenv("RAGBENCH_MODE", "full")
    with pytest.raises(NotImplementedError, match="needs a CUDA GPU"):
        share().setup(share.setup_cache(None), "deit_base_224", "threshold_l2", 1)


def test_the_floor_ratio_pairs_each_rounds_replays(monkeypatch):
    """``support.floor.measure``'s ratio is the kernel's median over the empty kernel's of the same
    round: a GPU clock that halves between rounds moves both, never the ratio."""
    from benchmarks.support import floor, harness

    state = {"replays": 0}

    class Graph:  # a captured graph whose replay takes ``us`` a call
        def __init__(self, us):
            self.us = us

        def replay(self):
            pass

    def replay_us(graph, calls, replays):
        state["replays"] += 1
        slow = 2.0 if state["replays"] > 2 else 1.0  # the clock drops after the first round
        return [graph.us * slow] * replays

    now = iter(range(1000))
    monkeypatch.setattr(harness, "capture", lambda fn, calls: Graph(fn()))
    monkeypatch.setattr(harness, "replay_us", replay_us)
    monkeypatch.setattr(floor.torch.cuda, "synchronize", lambda: None)
    monkeypatch.setattr(floor.time, "perf_counter", lambda: next(now))  # warm-up: one replay
    got = floor.measure(lambda: 3.0, lambda: 1.5, rounds=3)
    assert got["over_empty"] == [2.0, 2.0, 2.0]
    assert sorted(got["gpu_us"]) == [3.0, 6.0, 6.0] and sorted(got["empty_us"]) == [1.5, 3.0, 3.0]


def test_the_bound_shares_name_their_bounds():
    """``support.bound.shares``: each share from its own three arms, with its interval."""
    import numpy as np

    from benchmarks.support import bound

    fa2 = np.array([4000.0, 5000.0, 4500.0])
    samples = {"fa2": fa2, "triton": fa2 / 1.08, "no_attention": fa2 / 1.10,
               "launch_only": fa2 / 1.09, "fa2_graph": fa2 / 2, "triton_graph": fa2 / 2 / 1.03,
               "no_attention_graph": fa2 / 2 / 1.06}  # fmt: skip
    got = bound.shares(samples)
    assert got["share_of_bound"] == pytest.approx(0.8)
    assert got["share_of_launch_bound"] == pytest.approx(8 / 9)
    assert got["graph_share_of_bound"] == pytest.approx(0.5)
    assert got["graph_share_of_bound_low"] == pytest.approx(0.5)
    del samples["launch_only"]
    assert "share_of_launch_bound" not in bound.shares(samples)


def test_bad_mode_is_refused():
    code = "import benchmarks.kernel"
    env = {**os.environ, "RAGBENCH_MODE": "huge"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.returncode != 0 and "RAGBENCH_MODE must be one of quick, full" in out.stderr


def test_benchmark_modules_import_without_torch():
    """asv starts a process per cell: importing torch there would cost seconds each."""
    code = (
        "import sys\n"
        "import benchmarks.kernel, benchmarks.pipeline, benchmarks.numerics, benchmarks.cpu\n"
        "assert 'torch' not in sys.modules and 'ragged' not in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO)


def test_quick_run_records_every_benchmark(quick_run):
    results, summary = quick_run
    data = asv_results.load(Path(summary["result"]))
    expected = {f"{name}.{t}" for name, cls in suite_classes("quick").items() for t in tracks(cls)}
    assert set(data["results"]) == expected
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    assert data["commit_hash"] == summary["commit"] == head.stdout.strip()
    cells = list(asv_results.cells(data, asv_results.param_names(results)))
    by_name = {}
    for c in cells:
        by_name.setdefault(c.benchmark, []).append(c)
    gpu = summary_fingerprint(summary)["device"] == "cuda"
    for name, group in by_name.items():
        measured = [c for c in group if c.value is not None]
        if name.startswith("cpu.") != gpu:  # this machine's subset: every cell measured
            assert len(measured) == len(group), name
        elif not gpu:  # GPU benchmarks on a CPU machine: skipped, never faked
            assert not measured, name
    pipeline = [
        c
        for c in cells
        if c.benchmark
        == ("pipeline.Throughput.track_img_per_s" if gpu else "cpu.Pipeline.track_img_per_s")
    ]
    for c in pipeline:  # raw samples kept, the value is their median
        assert c.samples and len(c.samples) >= 3
        assert c.value == pytest.approx(sorted(c.samples)[len(c.samples) // 2])
        assert set(c.params) == {"pipeline", "method"} or "model" in c.params


def summary_fingerprint(summary) -> dict:
    fp = fingerprint.read(Path(summary["result"]))
    assert fp is not None
    return fp


def test_quick_run_writes_the_fingerprint_beside_the_results(quick_run):
    _, summary = quick_run
    fp = summary_fingerprint(summary)
    assert Path(summary["fingerprint"]) == fingerprint.path_for(Path(summary["result"]))
    for key in ("gpu", "compute_capability", "driver", "cuda", "torch", "triton", "timm",
                "python", "commit", "harness_version"):  # fmt: skip
        assert key in fp
    assert fp["commit"] == summary["commit"] and fp["mode"] == "quick"
    assert fp["machine"] == "ci" and fp["torch"] and fp["triton"] and fp["run_seconds"] > 0
    from benchmarks.support.harness import HARNESS_VERSION

    assert fp["harness_version"] == HARNESS_VERSION


def test_cpu_subset_values_are_sane(quick_run):
    results, summary = quick_run
    if summary_fingerprint(summary)["device"] == "cuda":
        pytest.skip("the CPU subset runs on machines without a GPU")
    data = asv_results.load(Path(summary["result"]))
    cells = {(c.benchmark, tuple(c.params.values())): c.value
             for c in asv_results.cells(data, asv_results.param_names(results))}  # fmt: skip
    drift = "cpu.Drift.track_max_abs_diff"
    assert cells[(drift, ("padded_max", "deit_tiny_224", "threshold_l2"))] == 0.0
    assert cells[(drift, ("triton", "deit_tiny_224", "threshold_l2"))] < 1e-4
    assert (
        cells[("cpu.Drift.track_top1_agreement", ("triton", "deit_tiny_224", "threshold_l2"))] == 1
    )
    for dtype in ("float32", "float16"):
        assert cells[("cpu.KernelError.track_error_ratio", ("triton", dtype))] <= 2.0


def test_run_rejects_a_bad_revision(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "run", "no-such-rev", "--results", str(tmp_path)],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 2 and "ragbench run: error: git rev-parse" in out.stderr


def test_asv_configs():
    conf = json.loads((REPO / "asv.conf.json").read_text())
    assert conf["environment_type"] == "existing" and conf["launch_method"] == "forkserver"
    assert conf["branches"] == ["main"] and conf["benchmark_dir"] == "benchmarks"
    venv = json.loads((REPO / "asv.virtualenv.conf.json").read_text())
    assert venv["environment_type"] == "virtualenv" and "torch" in venv["matrix"]["req"]


def test_the_floor_ratio_is_judged_and_the_bound_shares_are_shown():
    """policies.toml: GpuFloor's ratio judged as a latency at 3%; its two times and the bound
    shares shown only."""
    from ragbench.policies import load_policies

    pol = load_policies()
    ratio = pol.for_metric("kernel.GpuFloor", "over_empty", "ratio")
    assert ratio.kind == "latency" and ratio.threshold == pytest.approx(0.03)
    for metric in ("gpu_us", "empty_us"):
        assert pol.for_metric("kernel.GpuFloor", metric, "us").kind == "info"
    for metric in ("share_of_bound", "share_of_launch_bound", "graph_share_of_bound"):
        assert pol.for_metric("pipeline.BoundShare", metric, "ratio").kind == "info"


def test_every_command_reads_the_machine_name_one_way(monkeypatch):
    """--machine, else $RAGBENCH_MACHINE, else the host name; before, `make demo` and `ragbench
    fingerprint` ignored $RAGBENCH_MACHINE, which the other commands read."""
    import argparse

    from ragbench.commands import fingerprint as command

    monkeypatch.setenv("RAGBENCH_MACHINE", "runner-1")
    assert fingerprint.machine() == "runner-1" and fingerprint.machine("h100") == "h100"
    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers())
    assert parser.parse_args(["fingerprint"]).machine is None  # read when it runs, as above
    monkeypatch.setenv("RAGBENCH_MACHINE", "")
    assert fingerprint.machine() == fingerprint.default_machine()
    assert fingerprint.configured_machine() is None
