"""``ragbench gate``: exit codes, the report, the re-measurement. A real gate through asv on this
machine runs in tests/test_workflows.py (the workflow rehearsal)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from ragbench import discovery
from ragbench.gate import gating as gate
from ragbench.gate.gate_json import to_json, write_json
from ragbench.policies import load_policies
from ragbench.store import Measurement, Run, Store
from ragbench.verdicts import comparison as compare
from ragbench.verdicts import evidence

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
    assert "interval of head/base" in report and "p (Holm)" in report
    # one story: the change in words, from the row's own base and head
    (row,) = [ln for ln in report.splitlines() if ln.startswith("| `kernel.KernelLatency.gpu_us`"
              " backend=triton")]  # fmt: skip
    base, head, change = (c.strip() for c in row.split("|")[2:5])
    assert change.endswith("% slower"), row  # base and head shown to 4 digits
    assert abs(float(change.split("%")[0]) - (float(head) / float(base) - 1) * 100) < 0.15, row
    assert "| regressions | 1 |" in report
    assert "| unchanged, shown with the power to see the threshold | 1 |" in report
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


def test_a_stored_gate_judges_the_cells_bench_selects(tmp_path):
    """Before: ``gate --stored --bench`` judged every stored cell (FAIL on a regression of a
    cell it did not select); asv's --bench selects by name, or by name with arguments."""
    path = tmp_path / "perf.duckdb"
    with Store(path) as store:
        add_run(store, PARENT, gpu_cells(seed=1))
        add_run(store, HEAD, gpu_cells(scale=1.10, seed=2, extra=True))
    out = run_cli(
        path, "--stored", "--base", "HEAD~1", "--bench", r"KernelLatency\.track_gpu_us\(.fa2"
    )
    assert out.returncode == 0, out.stderr
    assert "PASS" in out.stdout and "backend=triton" not in out.stdout
    assert "| unchanged, shown with the power to see the threshold | 1 |" in out.stdout
    out = run_cli(path, "--stored", "--base", "HEAD~1", "--bench", "^kernel.KernelLatency")
    assert out.returncode == 1 and "backend=triton" in out.stdout, out.stderr
    assert "numerics.Drift" not in out.stdout
    out = run_cli(path, "--stored", "--base", "HEAD~1", "--bench", "^nothing")
    assert out.returncode == 2 and "--bench '^nothing' selects no cell" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


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


@pytest.mark.parametrize(
    ("base", "head", "why"),
    [
        ("HEAD", "HEAD", "are the same commit"),  # passed as "X against X - PASS"
        (HEAD, "HEAD", "are the same commit"),  # the same once resolved
        ("HEAD~2", "HEAD~2..HEAD", "is a range of commits"),  # compared base with itself
        ("HEAD~3", "HEAD..HEAD~3", "is a range of commits"),  # internal error: IndexError
        ("HEAD~2", "HEAD~2...HEAD", "is a range of commits"),
        ("^HEAD~1", "HEAD", "is a range of commits"),
        ("HEAD~1^!", "HEAD", "is a range of commits"),
        ("HEAD", "HEAD~2", "is older than --base"),  # swapped
    ],
    ids=[
        "same",
        "same-resolved",
        "range",
        "empty-range",
        "symmetric",
        "caret",
        "caret-bang",
        "swapped",
    ],
)
@pytest.mark.parametrize("measure", [True, False])
def test_nonsense_revisions_are_refused_before_any_work(tmp_path, monkeypatch, base, head, why,
                                                        measure):  # fmt: skip
    def measured(*args, **kwargs):
        raise AssertionError("measured")

    monkeypatch.setattr(gate, "_measure", measured)
    with Store(tmp_path / "perf.duckdb") as store:
        for sha in (HEAD, PARENT):
            add_run(store, sha, gpu_cells())
        with pytest.raises(gate.GateError, match=why):
            gate.run_gate(store, base, head, policies=load_policies(), machine="m1",
                          measure=measure, paired_processes=0, log=lambda m: None)  # fmt: skip


def test_nonsense_revisions_exit_2_with_one_line(tmp_path):
    path = tmp_path / "perf.duckdb"
    Store(path).close()
    for head, why in (("HEAD", "are the same commit"), ("HEAD..HEAD~3", "is a range")):
        out = run_cli(path, "--stored", "--base", "HEAD", "--head", head)
        assert out.returncode == 2 and why in out.stderr, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "internal error" not in out.stderr


@pytest.mark.parametrize("recheck", ["reproduces", "within", "noisy"])
def test_flagged_cells_are_measured_again(tmp_path, monkeypatch, recheck):
    """Round runs say head is 10% slower; the re-measurement decides: it reproduces (fail), it
    shows with power that head is within the threshold (pass), or it is too noisy to show
    either (inconclusive, exit 1: before, a noisy re-measurement read as "not reproduced" and
    the gate passed)."""
    calls = []

    def fake_measure(store, sha, side, label, work, *, mode, machine, bench, log, environment):
        calls.append((side, label, list(bench)))
        cells = gpu_cells(seed=len(calls))
        if side == "head" and ("recheck" not in label or recheck == "reproduces"):
            cells = gpu_cells(1.1, seed=len(calls))
        elif "recheck" in label and recheck == "noisy":  # +10%, spread over 0.5x-1.5x
            rng = np.random.default_rng(len(calls))
            spread = rng.uniform(0.5, 1.5, 40) * (1.1 if side == "head" else 1.0)
            cells[("kernel.KernelLatency", "gpu_us", "triton")] = 10 * spread
        return [add_run(store, sha, cells, label)]

    monkeypatch.setattr(gate, "_measure", fake_measure)
    with Store(tmp_path / "perf.duckdb") as store:
        res = gate.run_gate(store, "HEAD~1", "HEAD", policies=load_policies(),
                            machine="m1", rounds=2, log=lambda m: None,
                            drift_check=False)  # fmt: skip
    sides = [c[0] for c in calls]
    assert sides == ["base", "head", "base", "head", "base", "head"]  # alternating, then again
    # only what was flagged: that cell's params of its benchmark
    assert calls[-1][2] == discovery.bench_regex([TRITON])
    (v,) = [v for v in res.comparison.verdicts if v.params.get("backend") == "triton"
            and v.key[1] == "gpu_us"]  # fmt: skip
    assert v.rechecked and res.rechecked == 1
    status = {"reproduces": "regression", "within": "unchanged", "noisy": "inconclusive"}
    assert v.status == status[recheck]
    assert res.exit_code == (0 if recheck == "within" else 1)
    assert res.comparison.headline == {"reproduces": "fail", "within": "pass",
                                       "noisy": "inconclusive"}[recheck]  # fmt: skip
    assert len(res.base_runs) == len(res.head_runs) == 2
    if recheck == "within":  # the figures shown are the re-measurement's, which decided
        assert "flagged at +10" in v.note and abs(v.change) < 0.02 and evidence.powered(v)
    if recheck == "noisy":
        assert "without the power to clear it" in v.note and v.change > 0.09
        doc = to_json(res)
        assert [f["status"] for f in doc["failures"]] == ["inconclusive"]


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
    picked = Benchmarks(conf, found, regex=discovery.bench_regex(keys))
    assert sorted(picked) == ["cpu.Plain.track_x", "kernel.KernelLatency.track_gpu_us"]
    # of track_gpu_us's cells, ('fa2', 1) alone (the product's third), not every backend's
    assert picked._benchmark_selection["kernel.KernelLatency.track_gpu_us"] == [2]


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
                        policies=load_policies(), machine="m1", rounds=1,
                        log=lambda m: None, drift_check=False)  # fmt: skip
    (v,) = [v for v in res.comparison.verdicts if v.params.get("backend") == "triton"
            and v.key[1] == "gpu_us"]  # fmt: skip
    assert v.rechecked and v.status == then and res.exit_code == 1


# --- settling what a gate left without evidence -----------------------------------------------

TRITON = ("kernel.KernelLatency", "gpu_us", "backend=triton")


def noisy_gate(store, monkeypatch, settle: str):
    """A gate whose triton cell stays inconclusive (+1.5%, samples spread 0.5x-1.5x, also when
    re-measured); its settle run's samples are ``tight`` (0.1% around the same +1.5%) or
    ``wide`` (0.02x-1.98x: the same samples each side, head's 1.5% slower)."""
    calls = []

    def fake_measure(store, sha, side, label, work, *, mode, machine, bench, log, environment=None):
        calls.append((side, label, list(bench)))
        cells = gpu_cells(seed=len(calls))
        spread = {"tight": 0.001, "wide": 0.98}[settle] if ":settle" in label else 0.5
        rng = np.random.default_rng(7 if settle == "wide" else len(calls))
        values = rng.uniform(1 - spread, 1 + spread, 40) * 10 * (1.015 if side == "head" else 1)
        cells[("kernel.KernelLatency", "gpu_us", "triton")] = values
        return [add_run(store, sha, cells, label)]

    monkeypatch.setattr(gate, "_measure", fake_measure)
    res = gate.run_gate(store, "HEAD~1", "HEAD", policies=load_policies(), machine="m1",
                        rounds=2, log=lambda m: None, drift_check=False)  # fmt: skip
    return res, calls


@pytest.mark.parametrize("settle", ["tight", "wide"])
def test_a_gate_says_what_settles_it_and_settle_merges_into_its_verdict(
    tmp_path, monkeypatch, settle
):
    """An inconclusive cell: the gate's JSON keeps the plan (that cell, the rounds its spread
    needs), the report ends with the command; the settle run measures only that cell, as
    many rounds, and its verdict replaces the cell's in the gate's: PASS with evidence, or
    still INCONCLUSIVE with a larger plan where its samples spread wider than the gate's (never
    a PASS without evidence)."""
    from ragbench.gate import rerun
    from ragbench.gate.report import gate_markdown

    store = Store(tmp_path / "perf.duckdb")
    res, calls = noisy_gate(store, monkeypatch, settle)
    assert res.comparison.headline == "inconclusive"
    assert res.plan.cells == [TRITON] and not res.plan.paired and res.plan.rounds > 2
    res.gate_id = rerun.record(store, to_json(res), source="gate")
    res.store = store.name
    res.json_path = write_json(res, tmp_path / "gate.json")
    text = gate_markdown(res)
    command = f"ragbench gate --settle {res.gate_id} --store {store.name} --machine m1"
    assert text.rstrip().splitlines()[-3] == f"`{command}`", text[-600:]
    first = len(calls)
    # the recorded gate, by its id or by the very JSON it wrote
    ref = res.gate_id if settle == "tight" else str(res.json_path)
    settled = gate.rerun_gate(store, ref, policies=load_policies(),
                              machine="m1", log=lambda m: None)  # fmt: skip
    again = calls[first:]
    assert [c[0] for c in again] == ["base", "head"] * res.plan.rounds
    assert all(c[2] == discovery.bench_regex([TRITON]) for c in again)
    (v,) = settled.comparison.verdicts  # the settled cell alone: the others passed
    assert v.key == TRITON and settled.rerun_of == res.gate_id
    # a regression the settle run shows again is settled: nothing more to measure
    assert rerun.plan(compare.Comparison([compare.Verdict(
        TRITON, {}, "us", v.policy, "regression", detectable=0.02)]), 4, 3,
        flagged=False) is None  # fmt: skip
    if settle == "tight":  # +1.5% under the 2% threshold, with the power to see it
        assert settled.comparison.headline == "pass" and settled.exit_code == 0
        assert evidence.powered(v) and settled.plan is None
    else:
        assert settled.comparison.headline == "inconclusive" and settled.exit_code == 1
        assert settled.plan.rounds > res.plan.rounds
    assert f"Settling the gate `{res.gate_id}`" in gate_markdown(settled)


def test_the_rounds_a_cell_needs_follow_its_spread():
    from ragbench.gate import rerun
    from ragbench.verdicts.status import Status

    policy = load_policies().for_metric("kernel.KernelLatency", "gpu_us", "us")
    t = policy.threshold

    def v(status, detectable=None, aa=None):
        return compare.Verdict(TRITON, {}, "us", policy, status, detectable=detectable, aa=aa)

    assert rerun.needed(v(Status.INCONCLUSIVE, 2 * t), 2) == 10  # (2)^2 x 1.25 x 2
    assert rerun.needed(v(Status.INCONCLUSIVE, 1.1 * t), 2) == 4  # at least one more
    assert rerun.needed(v(Status.INCONCLUSIVE, 100 * t), 2) == 2 * rerun.CAP
    assert rerun.needed(v(Status.INCONCLUSIVE, float("inf")), 3) == 8  # 2 x 1.25 x 3
    assert rerun.needed(v(Status.INCONCLUSIVE, 0.5 * t, aa=t), 3) == 15  # A/A: (t/(t/2))^2
    assert rerun.needed(v(Status.REGRESSION, 0.5 * t), 2) == 2  # reproduce at its power


def test_settle_refuses_what_it_cannot_settle(tmp_path, capsys):
    """Gates a store recorded (``rerun.record``, as a gate or the trusted verdict does) that
    leave nothing to settle, or that it cannot: one line, exit 2, nothing measured."""
    from ragbench import cli
    from ragbench.gate import rerun

    doc = {"schema": 2, "base": PARENT, "head": HEAD, "machine": "m1", "verdict": "pass",
           "failures": []}  # fmt: skip
    plan = {"cells": [list(TRITON)], "rounds": 4, "paired": [], "processes": 3}
    planned = {**doc, "verdict": "inconclusive", "settle": plan,
               "failures": [{"benchmark": TRITON[0], "metric": TRITON[1],
                             "param_key": TRITON[2], "status": "inconclusive"}]}  # fmt: skip
    itself = json.loads(json.dumps(planned).replace(PARENT, HEAD))  # A/A would pass
    with Store(tmp_path / "perf.duckdb") as store:
        ids = [rerun.record(store, d, source="gate") for d in (doc, itself, planned)]
    for args, why in ((["--settle", ids[0]], "nothing without evidence"),
                      (["--settle", ids[1]], "are the same commit"),
                      (["--settle", str(tmp_path / "none.json")], "none.json"),
                      (["--settle", "0123456789abcdef"], "recorded no gate 0123456789abcdef"),
                      (["--settle", ids[2], "--machine", "m2"], "ran on 'm1'"),
                      (["--settle", ids[2], "--mode", "full"], "measured in --mode quick"),
                      ([], "needs --base")):  # fmt: skip
        code = cli.main(["gate", "--store", str(tmp_path / "perf.duckdb"), "--machine", "m1",
                         *args])  # fmt: skip
        err = capsys.readouterr().err
        assert code == 2 and why in err and len(err.strip().splitlines()) == 1, err


def regression_gate(store, monkeypatch, tmp_path) -> tuple[gate.GateResult, Path]:
    """A measured gate that FAILs: head's triton cell 10% slower, reproduced when measured
    again, and the torch_varlen cell inconclusive (spread 0.5x-1.5x): its plan settles both.
    Recorded in ``store`` as ``ragbench gate`` records it; -> it and its JSON."""
    from ragbench.commands import gate as gate_cmd
    from ragbench.gate import rerun

    def fake_measure(store, sha, side, label, work, *, mode, machine, bench, log, environment=None):
        rng = np.random.default_rng(len(label) + (side == "head"))
        cells = gpu_cells(1.1 if side == "head" else 1.0, seed=int(rng.integers(99)), extra=True)
        cells[TORCH] = rng.uniform(0.5, 1.5, 40) * 20
        return [add_run(store, sha, cells, label)]

    monkeypatch.setattr(gate, "_measure", fake_measure)
    res = gate.run_gate(store, "HEAD~1", "HEAD", policies=load_policies(), machine="m1",
                        rounds=2, log=lambda m: None, drift_check=False)  # fmt: skip
    assert res.comparison.headline == "fail" and TRITON in res.plan.cells
    args = SimpleNamespace(store=store.name, history_branch=None)
    gate_cmd.record(args, store, res)
    assert res.gate_id and rerun.recorded(store, res.gate_id)["verdict"] == "fail"
    return res, write_json(res, tmp_path / "gate.json")


TORCH = ("kernel.KernelLatency", "gpu_us", "torch_varlen")


def test_settle_continues_only_the_gate_its_store_recorded(tmp_path, monkeypatch, capsys):
    """A gate that failed (triton 10% slower) is recorded with its plan. Its JSON with the
    regression taken out of the failures and the plan, another head's JSON with ``head``
    edited, a hand-written JSON naming one quiet cell, and a recorded plan of 1,000 rounds
    (a pull request's JSON as the trusted verdict records it): each refused in one line,
    exit 2, before anything is measured. Before, each settled to PASS (exit 0) for a head
    that is 10% slower. The genuine JSON and its id settle as before."""
    from ragbench import cli, pr

    store = Store(tmp_path / "perf.duckdb")
    res, path = regression_gate(store, monkeypatch, tmp_path)
    doc = json.loads(path.read_text())
    quiet = {"benchmark": "kernel.KernelLatency", "metric": "gpu_us", "param_key": "backend=fa2",
             "status": "inconclusive", "change": 0.0}  # fmt: skip
    edited = {
        "failure removed": {**doc, "verdict": "inconclusive", "failures": [
            f for f in doc["failures"] if f["param_key"] != "backend=triton"],
            "settle": {**doc["settle"], "cells": [c for c in doc["settle"]["cells"]
                                                  if c[2] != "backend=triton"]}},
        "head edited": {**doc, "head": PARENT, "base": git("rev-parse", "HEAD~2")},
        "hand-written": {"schema": 2, "base": PARENT, "head": HEAD, "machine": "m1",
                         "verdict": "inconclusive", "failures": [quiet],
                         "settle": {"cells": [[quiet["benchmark"], quiet["metric"],
                                               quiet["param_key"]]], "rounds": 2,
                                    "paired": [], "processes": 1}},
    }  # fmt: skip
    measured = []
    monkeypatch.setattr(gate, "_measure", lambda *a, **k: measured.append(a) or [])
    for name, forged in edited.items():
        p = tmp_path / f"{name}.json"
        p.write_text(json.dumps(forged, indent=2))
        code = cli.main(["gate", "--settle", str(p), "--store", store.name, "--machine", "m1"])
        err = capsys.readouterr().err
        assert code == 2 and "no gate recorded in" in err, (name, err)
        assert len(err.strip().splitlines()) == 1, err
    # a pull request's JSON, recorded by the trusted verdict, asking for 1,000 rounds
    greedy = tmp_path / "greedy.json"
    greedy.write_text(json.dumps({**doc, "rounds": 1000, "settle": {**doc["settle"],
                                                                    "rounds": 1000}}))  # fmt: skip
    pr.verdict(store, None, gate_json=greedy, report=None, pr=7, head=HEAD, machine=None,
               log=lambda m: None)  # fmt: skip
    for ref in (str(greedy), store.gate(7, HEAD)["gate_id"]):
        code = cli.main(["gate", "--settle", ref, "--store", store.name, "--machine", "m1"])
        err = capsys.readouterr().err
        assert code == 2 and "asks for 1000 round(s), more than 8x the gate's 2" in err, err
        assert len(err.strip().splitlines()) == 1, err
    assert not measured
    # the trusted verdict records the genuine JSON as the gate's own id: the PR comment's
    # settle command names it
    pr.verdict(store, None, gate_json=path, report=None, pr=8, head=HEAD, machine=None,
               log=lambda m: None)  # fmt: skip
    assert store.gate(8, HEAD)["gate_id"] == res.gate_id
    footer = pr.reproduce(8, PARENT, HEAD, None, store.gate_verdict(gate_id=res.gate_id))
    assert (f'`ragbench gate --settle {res.gate_id} --store "$RAGBENCH_STORE" --machine m1`'
            in footer)  # fmt: skip
    # the genuine JSON, byte for byte or re-indented, names the recorded gate
    path.write_text(json.dumps(doc))
    for ref in (str(path), res.gate_id):
        monkeypatch.setattr(gate, "_measure", lambda store, sha, side, label, *a, **k: [
            add_run(store, sha, gpu_cells(1.1 if side == "head" else 1.0, seed=len(label)),
                    label)])  # fmt: skip
        code = cli.main(["gate", "--settle", ref, "--store", store.name, "--machine", "m1",
                         "--no-drift", "--paired-processes", "0"])  # fmt: skip
        out = capsys.readouterr()
        assert code == 1 and f"Settling the gate `{res.gate_id}`" in out.out, out.err
        assert "### Regressions" in out.out


def test_the_default_json_is_private_and_never_follows_a_planted_link(tmp_path, monkeypatch,
                                                                     capsys):  # fmt: skip
    """A gate that leaves a plan and is given no --json writes it in a directory of this
    user's alone (0700, the file 0600), never at the guessable name in the shared temp
    directory where another user planted a link (before: ``$TMPDIR/ragbench-gate-HEAD.json``,
    followed); a planted link in place of that directory is not used either. The report's
    settle command names the recorded gate and its store, and runs."""
    import shlex
    import stat
    import tempfile

    from ragbench import cli

    shared = tmp_path / "tmp"
    shared.mkdir()
    monkeypatch.setenv("TMPDIR", str(shared))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(tempfile, "tempdir", None)
    victim = tmp_path / "victim"
    victim.write_text("keep")
    (shared / f"ragbench-gate-{HEAD[:12]}.json").symlink_to(victim)
    path = tmp_path / "perf.duckdb"
    with Store(path) as store:
        add_run(store, PARENT, gpu_cells(seed=1))
        noisy = gpu_cells(seed=2)
        noisy[("kernel.KernelLatency", "gpu_us", "triton")] = np.linspace(5, 15.3, 40)
        add_run(store, HEAD, noisy)
    argv = ["gate", "--stored", "--store", str(path), "--machine", "m1", "--base", "HEAD~1",
            "--no-drift", "--paired-processes", "0"]  # fmt: skip
    assert cli.main(argv) == 1
    report = capsys.readouterr().out
    assert victim.read_text() == "keep"
    private = shared / f"ragbench-{os.getuid()}"
    (written,) = private.iterdir()
    assert stat.S_IMODE(private.stat().st_mode) == 0o700
    assert stat.S_IMODE(written.stat().st_mode) == 0o600
    assert json.loads(written.read_text())["verdict"] == "inconclusive"
    (command,) = [ln.strip("`") for ln in report.splitlines()
                  if ln.startswith("`ragbench gate --settle")]  # fmt: skip
    words = shlex.split(command)
    assert words[3] == written.name.removeprefix("gate-").removesuffix(".json")
    monkeypatch.setattr(gate, "_measure", lambda store, sha, side, label, *a, **k: [
        add_run(store, sha, gpu_cells(seed=len(label)), label)])  # fmt: skip
    assert cli.main([*words[1:], "--no-drift"]) == 0, capsys.readouterr().err
    # another user's link where the private directory goes: a new private directory instead
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o777)
    written.unlink()
    private.rmdir()
    private.symlink_to(elsewhere)
    assert cli.main(argv) == 1
    capsys.readouterr()
    assert not list(elsewhere.iterdir()) and victim.read_text() == "keep"
    (made,) = [p for p in shared.iterdir() if p.name.startswith("ragbench-gate-") and p.is_dir()]
    assert stat.S_IMODE(made.stat().st_mode) == 0o700 and len(list(made.iterdir())) == 1


def test_make_gate_keeps_the_gates_exit_code(tmp_path):
    """``make gate`` (and gate-pr, gate-verdict): make turns any failed recipe into 2, so a
    FAIL (1) read as unusable input (2). The recipe leaves ragbench's code in GATE_RC
    (VERDICT_RC): 1 and 2 apart; gate-pr passes a FAIL on to the trusted verdict (0)."""
    fake = tmp_path / "bin"
    fake.mkdir()
    python = fake / "python"
    python.write_text('#!/bin/sh\nexit "$FAKE_RC"\n')
    python.chmod(0o755)
    for target, code, make_code in (("gate", 1, 2), ("gate", 2, 2), ("gate", 0, 0),
                                    ("gate-pr", 1, 0), ("gate-pr", 2, 2),
                                    ("gate-verdict", 1, 2), ("gate-verdict", 2, 2)):  # fmt: skip
        rc = tmp_path / f"{target}-{code}.rc"
        out = subprocess.run(
            ["make", "--no-print-directory", "-s", target, f"BIN={fake}", f"STAMP={python}",
             f"GATE_RC={rc}", f"VERDICT_RC={rc}", "PR=1", "GITHUB_ACTIONS="],
            cwd=REPO, capture_output=True, text=True, env={**os.environ, "FAKE_RC": str(code)},
        )  # fmt: skip
        assert out.returncode == make_code, (target, code, out.stderr)
        assert rc.read_text().strip() == str(code), (target, code)
