"""``ragbench gate``: exit codes, the report, the re-measurement. A real gate through asv on this
machine runs in tests/test_workflows.py (the workflow rehearsal)."""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench import detect, gate
from ragbench.store import Measurement, Run, Store

REPO = Path(__file__).resolve().parent.parent
_clock = itertools.count(1_800_000_000)


def git(*args) -> str:
    return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                          check=True).stdout.strip()  # fmt: skip


HEAD, PARENT = git("rev-parse", "HEAD"), git("rev-parse", "HEAD~1")


def add_run(store: Store, commit: str, cells: dict, label=None, machine="m1") -> str:
    """A run whose ``cells`` map (benchmark, metric, backend) -> samples (or one value)."""
    run = Run("asv", commit, machine, started_at=float(next(_clock)), label=label,
              fingerprint={"gpu": "Test GPU", "torch": "2.11.0", "triton": "3.6.0"})  # fmt: skip
    rows = [
        Measurement(bench, metric, {"backend": backend}, "us", float(np.median(values)),
                    samples=list(values) if len(values) > 1 else None)
        for (bench, metric, backend), values in cells.items()
    ]  # fmt: skip
    store.add_run(run, rows)
    return run.run_id


def gpu_cells(scale: float = 1.0, seed: int = 0, extra: bool = False) -> dict:
    rng = np.random.default_rng(seed)
    cells = {
        ("kernel.KernelLatency", "gpu_us", "triton"): rng.normal(10, 0.05, 40) * scale,
        ("kernel.KernelLatency", "gpu_us", "fa2"): rng.normal(12, 0.05, 40),
        ("numerics.Drift", "output_hash", "triton"): [1234.0],
    }
    if extra:
        cells[("kernel.KernelLatency", "gpu_us", "torch_varlen")] = rng.normal(20, 0.1, 40)
    return cells


def run_cli(store: Path, *args) -> subprocess.CompletedProcess:
    """The gate on stored cells; these tests' gates never compare the outputs of HEAD~1 and
    HEAD (that would depend on what those commits changed: tests/test_drift.py plants it)."""
    return subprocess.run(
        [sys.executable, "-m", "ragbench", "gate", "--store", str(store), "--machine", "m1",
         "--no-drift", *args], capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip


def test_stored_gate_exit_codes_and_report(tmp_path):
    path = tmp_path / "perf.duckdb"
    with Store(path) as store:
        add_run(store, PARENT, gpu_cells(seed=1))
        add_run(store, HEAD, gpu_cells(scale=1.10, seed=2, extra=True))
    out = run_cli(path, "--stored", "--base", "HEAD~1", "--head", "HEAD", "--report",
                  str(tmp_path / "r.md"))  # fmt: skip
    assert out.returncode == 1, out.stderr
    report = out.stdout
    assert "FAIL" in report and "### Regressions" in report
    assert "`kernel.KernelLatency.gpu_us` backend=triton" in report
    assert "+10." in report and "interval of head/base" in report and "p (Holm)" in report
    assert "| regressions | 1 |" in report and "| unchanged | 2 |" in report
    assert "### New on head (no baseline data)" in report and "backend=torch_varlen" in report
    assert "Smallest slowdown this run could have detected" in report
    assert "not measured alternating" in report
    assert (tmp_path / "r.md").read_text() == report.rstrip("\n") + "\n"

    with Store(path) as store:
        add_run(store, PARENT, gpu_cells(seed=3), machine="m2")
        add_run(store, HEAD, gpu_cells(seed=4), machine="m2")
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "gate", "--store", str(path), "--machine", "m2",
         "--stored", "--base", "HEAD~1", "--no-drift"], capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert "PASS" in out.stdout and "| regressions | 0 |" in out.stdout


def test_unusable_input_exits_2(tmp_path):
    path = tmp_path / "perf.duckdb"
    Store(path).close()
    out = run_cli(path, "--stored", "--base", "no-such-revision")
    assert out.returncode == 2 and "error" in out.stderr
    out = run_cli(path, "--stored", "--base", "HEAD~1")  # nothing stored for head
    assert out.returncode == 2 and "no run of head" in out.stderr
    bad = tmp_path / "p.toml"
    bad.write_text("[[policy]\n")
    out = run_cli(path, "--stored", "--base", "HEAD~1", "--policies", str(bad))
    assert out.returncode == 2 and "not a valid policies file" in out.stderr


@pytest.mark.parametrize("reproduces", [True, False])
def test_flagged_cells_are_measured_again(tmp_path, monkeypatch, reproduces):
    """Round runs say head is 10% slower; the re-measurement decides."""
    calls = []

    def fake_measure(store, sha, side, label, work, *, mode, machine, bench, log, environment):
        calls.append((side, label, list(bench)))
        slow = side == "head" and ("recheck" not in label or reproduces)
        return [add_run(store, sha, gpu_cells(1.1 if slow else 1.0, seed=len(calls)), label)]

    monkeypatch.setattr(gate, "_measure", fake_measure)
    with Store(tmp_path / "perf.duckdb") as store:
        res = gate.run_gate(store, "HEAD~1", "HEAD", policies=detect.load_policies(),
                            machine="m1", rounds=2, log=lambda m: None,
                            drift_check=False)  # fmt: skip
    sides = [c[0] for c in calls]
    assert sides == ["base", "head", "base", "head", "base", "head"]  # alternating, then again
    assert calls[-1][2] == [r"^kernel\.KernelLatency\.track_gpu_us(\(|$)"]  # only what was flagged
    (v,) = [v for v in res.comparison.verdicts if v.params.get("backend") == "triton"
            and v.key[1] == "gpu_us"]  # fmt: skip
    assert v.rechecked and res.rechecked == 1
    assert v.status == ("regression" if reproduces else "unchanged")
    assert res.exit_code == (1 if reproduces else 0)
    assert len(res.base_runs) == len(res.head_runs) == 2
    if not reproduces:
        assert "not reproduced" in v.note


def test_the_recheck_selects_exactly_the_flagged_benchmarks_in_asv():
    """asv's own filter (it matches a parameterized benchmark as ``name(params)``)."""
    from types import SimpleNamespace

    from asv.benchmarks import Benchmarks

    def bench(name, params):
        return {"name": name, "params": params, "param_names": [], "version": "1"}

    found = [bench("kernel.KernelLatency.track_gpu_us", [["'triton'", "'fa2'"], ["1", "64"]]),
             bench("kernel.KernelLatency.track_gpu_us_total", [["'triton'"]]),
             bench("kernel.KernelLatency.track_call_us", [["'triton'"]]),
             bench("cpu.Plain.track_x", [])]  # fmt: skip
    keys = [("kernel.KernelLatency", "gpu_us", "backend=fa2,batch=1"), ("cpu.Plain", "x", "")]
    conf = SimpleNamespace(benchmark_dir="benchmarks")
    picked = Benchmarks(conf, found, regex=gate._bench_regex(keys))
    assert sorted(picked) == ["cpu.Plain.track_x", "kernel.KernelLatency.track_gpu_us"]


@pytest.mark.parametrize("then", ["failed", "missing"])
def test_a_flagged_cell_that_breaks_when_measured_again_still_fails(tmp_path, monkeypatch,
                                                                    then):  # fmt: skip
    """Flagged 10% slower, then on the re-measurement head raises, or has no value: never
    'not reproduced'."""

    def fake_measure(store, sha, side, label, work, *, mode, machine, bench, log, environment):
        if side == "head" and "recheck" in label:  # the flagged cell raised, or is gone
            run = Run("asv", sha, "m1", started_at=float(next(_clock)), label=label)
            store.add_run(run, [
                Measurement("kernel.KernelLatency", "gpu_us", {"backend": "triton"}, "us", None,
                            status="failed") if then == "failed"
                else Measurement("kernel.Other", "gpu_us", {}, "us", 1.0)
            ])  # fmt: skip
            return [run.run_id]
        slow = side == "head"
        return [add_run(store, sha, gpu_cells(1.1 if slow else 1.0, seed=7), label)]

    monkeypatch.setattr(gate, "_measure", fake_measure)
    res = gate.run_gate(Store(tmp_path / "perf.duckdb"), "HEAD~1", "HEAD",
                        policies=detect.load_policies(), machine="m1", rounds=1,
                        log=lambda m: None, drift_check=False)  # fmt: skip
    (v,) = [v for v in res.comparison.verdicts if v.params.get("backend") == "triton"
            and v.key[1] == "gpu_us"]  # fmt: skip
    assert v.rechecked and v.status == then and res.exit_code == 1
