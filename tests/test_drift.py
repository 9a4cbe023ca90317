"""Numeric drift against base (ragbench.gate.drift, benchmarks/support/outputs): planted numeric
changes are findings that fail the gate, the same code and a change that does not touch numerics
pass; the gate runs the comparison in both modes; ``versions`` compares two stacks' files the
same way.

The plants are scripts/drift_plants.py's (copies of ragged/ with one edit), on the smallest grid
that shows each: Threshold-L2 through padded_max and the triton pipeline, and one kernel cell;
on the CPU subset in Triton's interpreter (DeiT-Ti fp32 at BS 2), on a GPU its grid (DeiT-B
fp16 at BS 32)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from conftest import HAS_CUDA, REPO
from test_gate import HEAD, PARENT, add_run, gpu_cells

from benchmarks.support import grids as _grids
from benchmarks.support import outputs as _outputs
from ragbench.gate import drift
from ragbench.gate import gating as gate
from ragbench.gate.gate_json import to_json
from ragbench.gate.report import gate_markdown
from ragbench.policies import load_policies
from ragbench.store import Store
from ragbench.verdicts import comparison as compare
from ragbench.verdicts.status import Headline, Status, gate_document
from scripts.drift_plants import plant

PIPELINES = r"^drift\.Pipeline backend=(padded_max|triton),method=threshold_l2,"
MODEL = _grids.DRIFT_MODELS[0] if HAS_CUDA else _grids.CPU_MODEL
TRITON = f"backend=triton,method=threshold_l2,model={MODEL}"
PADDED = f"backend=padded_max,method=threshold_l2,model={MODEL}"
HEADS = ("scale", "pack", "prune", "comment")


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    """One runner process: base, each plant, and base again (aa, last) through the pipelines:
    ~25 s on 2 idle cores."""
    tmp = tmp_path_factory.mktemp("plants")
    trees = {"base": plant("aa", tmp / "base")}
    trees |= {name: plant(name, tmp / name) for name in HEADS}
    trees["aa"] = plant("aa", tmp / "aa")
    return drift.run_outputs(trees, tmp / "outputs.npz", only=PIPELINES, log=lambda m: None)


def judged(f: drift.Outputs, head: str) -> dict[tuple[str, str], drift.Output]:
    outputs = drift.judge((f, "base"), (f, head), [((f, "base"), (f, "aa"))], drift.MARGIN)
    return {(o.metric, o.key[2]): o for o in outputs}


@pytest.mark.parametrize(
    "head, moved",
    [
        ("scale", {("logits", TRITON)}),  # the kernel's softmax scale x1.002
        ("pack", {("logits", TRITON)}),  # one token moved by the ragged path's pack
        ("prune", {(m, p) for m in ("logits", "keep_masks") for p in (TRITON, PADDED)}),
    ],
)
def test_a_planted_numeric_change_is_a_drift_finding_that_fails(planted, head, moved):
    outputs = judged(planted, head)
    assert {k for k, o in outputs.items() if o.status == Status.DRIFT} == moved
    for key in moved:
        o = outputs[key]
        assert o.noise == 0.0  # measured: base computed again gives the same bits
        assert o.moved.measure > 0 and "run-to-run 0" in o.note
    if head == "prune":  # one patch dropped, another kept: two positions of one image
        masks = outputs[("keep_masks", PADDED)].moved
        assert (masks.elements, masks.rows) == (2, 1)
    comparison = compare.Comparison([o.verdict(drift.MARGIN) for o in outputs.values()])
    assert comparison.headline == Headline.FAIL
    failures = gate_document(PARENT, HEAD, "m", comparison)["failures"]
    assert {(f["benchmark"], f["metric"], f["param_key"]) for f in failures} == {
        ("drift.Pipeline", m, p) for m, p in moved
    }


@pytest.mark.parametrize("head", ["aa", "comment"])
def test_the_same_code_and_a_change_that_does_not_touch_numerics_pass(planted, head):
    outputs = judged(planted, head)
    assert len(outputs) == 4 and all(
        o.status == Status.UNCHANGED and o.moved is None for o in outputs.values()
    )


def test_the_gate_s_comparison_computes_base_again_only_where_head_moved(tmp_path):
    """compare_trees as the gate runs it, on one kernel cell that the scale plant moves and
    one it cannot (padded SDPA): base, head, and base again only for the moved one."""
    base, head = plant("aa", tmp_path / "base"), plant("scale", tmp_path / "scale")
    only = r"^drift\.Kernel backend=(triton|padded_sdpa),dtype=float16,lengths=mixed"
    report = drift.compare_trees(base, head, tmp_path, margin=3.0, only=only, log=lambda m: None)
    (finding,) = report.findings
    assert finding.key == ("drift.Kernel", "output", "backend=triton,dtype=float16,lengths=mixed")
    assert finding.noise == 0.0 and finding.moved.rows > 0
    cells = {c["params"]["backend"]: c for c in drift.Outputs(tmp_path / "outputs.npz").meta[
        "cells"]}  # fmt: skip
    assert set(cells["triton"]["arrays"]) == {"base", "head", "aa"}
    assert set(cells["padded_sdpa"]["arrays"]) == {"base", "head"} and cells["padded_sdpa"][
        "skipped"]["aa"]  # fmt: skip
    assert "--aa-where-moved" in report.command and "--only" in report.command
    # the command judges by the gate's margin (before: the default 2, whatever drift_margin said)
    assert report.command.endswith("ragbench.gate.drift outputs.npz --margin 3.0")


def test_nan_shape_and_raised_outputs(tmp_path):
    """A NaN where base has a number is infinitely far; NaN where NaN is equal; a new shape
    moves; a head that raises fails; a base that raised makes the output new."""
    a = np.array([[1.0, np.nan], [2.0, 3.0]], dtype=np.float32)
    b = a.copy()
    assert drift.difference("logits", a, b) is None
    b[1, 0] = np.nan
    d = drift.difference("logits", a, b)
    assert d.measure == np.inf and (d.elements, d.rows) == (1, 1)
    assert drift.difference("output", a, a[:1]).shape == "(2, 2) -> (1, 2)"
    args = ("drift.Kernel", "output", {"backend": "triton"})
    assert drift.judge_output(*args, a, None, [], 2.0, (None, "boom")).status == Status.FAILED
    assert drift.judge_output(*args, None, a, [], 2.0).status == Status.NEW
    assert drift.judge_output(*args, a, b, [], 2.0).status == Status.DRIFT  # noise unmeasured


def _stack_file(path, cells: dict[str, tuple], arms=("base", "aa")) -> drift.Outputs:
    """A runner file: ``cells`` maps a backend to one array per arm."""
    doc = {"schema": 1, "arms": dict.fromkeys(arms, "src"), "errors": {}, "cells": [],
           "device": "cpu"}  # fmt: skip
    arrays = {}
    for i, (backend, values) in enumerate(cells.items()):
        params = {"backend": backend, "dtype": "float32", "lengths": "mixed"}
        doc["cells"].append({"benchmark": "drift.Kernel", "params": params, "errors": {},
                             "arrays": {arm: ["output"] for arm in arms}})  # fmt: skip
        arrays |= {f"c{i}.{arm}.output": v for arm, v in zip(arms, values, strict=True)}
    _outputs.save(path, doc, arrays)
    return drift.Outputs(path)


def test_versions_compares_two_stacks_against_each_stack_s_noise(tmp_path):
    """Stack A computes ``noisy`` with a spread of 1e-3 run to run, B 0: B moving it 1.5e-3 is
    within 2x the noise, 5e-3 is drift between the stacks; ``exact`` moving at all is."""
    x = np.linspace(0, 1, 64, dtype=np.float32).reshape(8, 8)
    a = _stack_file(tmp_path / "a.npz", {"noisy": (x, x + 1e-3), "exact": (x, x),
                                          "moved": (x, x + 1e-3)})  # fmt: skip
    b = _stack_file(tmp_path / "b.npz", {"noisy": (x + 1.5e-3,) * 2, "exact": (x + 1e-6,) * 2,
                                          "moved": (x + 5e-3,) * 2})  # fmt: skip
    report = drift.between_stacks(a, b, margin=2.0)
    status = {o.params["backend"]: o.status for o in report.outputs}
    assert status == {"noisy": Status.UNCHANGED, "exact": Status.DRIFT, "moved": Status.DRIFT}
    noise = {o.params["backend"]: o.noise for o in report.outputs}
    assert noise["noisy"] == pytest.approx(1e-3, rel=1e-3) and noise["exact"] == 0.0
    out = subprocess.run([sys.executable, "-m", "ragbench.gate.drift", a.path, b.path],
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "### Numeric drift between the stacks" in out.stdout and "backend=exact" in out.stdout
    out = subprocess.run([sys.executable, "-m", "ragbench.gate.drift", a.path],
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert out.returncode == 2 and "no arms base and head" in out.stderr


def test_a_stack_moving_between_its_own_processes_is_noise(tmp_path):
    """versions' second pass: where the stacks differed, each computed those cells again in a
    fresh process; A's base moving 1.5e-3 from one process to the next makes B's 2e-3 noise."""
    x = np.ones((4, 4), dtype=np.float32)
    a = _stack_file(tmp_path / "a.npz", {"c": (x,)}, arms=("base",))
    b = _stack_file(tmp_path / "b.npz", {"c": (x + 2e-3,)}, arms=("base",))
    (o,) = drift.between_stacks(a, b).outputs
    assert o.status == Status.DRIFT and "noise not measured" in o.note  # no second run: fails
    again = [_stack_file(tmp_path / "a2.npz", {"c": (x + 1.5e-3,) * 2}),
             _stack_file(tmp_path / "b2.npz", {"c": (x + 2e-3,) * 2})]  # fmt: skip
    (o,) = drift.between_stacks(a, b, again=again).outputs
    assert o.status == Status.UNCHANGED and o.noise == pytest.approx(1.5e-3, rel=1e-3)


def test_the_gate_s_bench_selects_the_parts_and_same_trees_are_not_run(tmp_path):
    assert drift.only_for([]) is None
    assert drift.only_for([r"^cpu\.KernelError"]) == r"^(drift\.Kernel) "
    assert drift.only_for([r"^kernel\.KernelLatency"]) == ""
    assert drift.against_base(HEAD, HEAD, tmp_path).skipped.startswith("base and head have")
    assert "not in this clone" in drift.against_base("e" * 40, HEAD, tmp_path).skipped


@pytest.mark.parametrize("measure", [True, False])
def test_the_gate_fails_on_a_drift_finding_in_both_modes_and_reports_it(
    tmp_path, monkeypatch, planted, measure
):
    """run_gate calls the comparison after its own (measuring, and --stored): its findings are
    failing verdicts in gate.json and a section of the report."""
    calls = []

    def fake_against_base(base, head, work, **kw):
        calls.append((base, head, kw["mode"]))
        noise = [((planted, "base"), (planted, "aa"))]
        outputs = drift.judge((planted, "base"), (planted, "pack"), noise, kw["margin"])
        return drift.DriftReport(outputs, kw["margin"], device="cpu", command="the command")

    def fake_measure(store, sha, side, label, work, *, mode, machine, bench, log, environment):
        return [add_run(store, sha, gpu_cells(seed=len(label)), label)]

    monkeypatch.setattr(drift, "against_base", fake_against_base)
    monkeypatch.setattr(gate, "_measure", fake_measure)
    with Store(tmp_path / "perf.duckdb") as store:
        if not measure:
            add_run(store, PARENT, gpu_cells(seed=1))
            add_run(store, HEAD, gpu_cells(seed=2))
        res = gate.run_gate(store, "HEAD~1", "HEAD", policies=load_policies(),
                            machine="m1", measure=measure, paired_processes=0,
                            log=lambda m: None)  # fmt: skip
    assert calls == [(PARENT, HEAD, "quick")]
    assert res.exit_code == 1 and res.comparison.headline == Headline.FAIL
    doc = to_json(res)
    assert [(f["metric"], f["param_key"], f["status"]) for f in doc["failures"]] == [
        ("logits", TRITON, "drift")
    ]
    text = gate_markdown(res)
    assert "### Outputs against base (numeric drift)" in text
    assert "1 drift finding(s)" in text and "Reproduce: `the command`" in text
    assert json.loads(json.dumps(doc)) == doc
