"""The calibration: the injection's switch, and the analysis on runs of known behaviour."""

from __future__ import annotations

import json

import numpy as np
import pytest

from benchmarks.support import inject as _inject
from scripts import calibrate


def test_inject_fraction_from_the_environment(monkeypatch):
    monkeypatch.delenv(_inject.ENV, raising=False)
    assert _inject.fraction() is None
    monkeypatch.setenv(_inject.ENV, "0.05")
    assert _inject.fraction() == 0.05
    for bad in ("fast", "1.5", "-0.1"):
        monkeypatch.setenv(_inject.ENV, bad)
        with pytest.raises(ValueError, match=_inject.ENV):
            _inject.fraction()


def test_quantised_delays_stay_within_3_percent():
    for cycles in (20, 100, 333, 4097, 123456):
        assert abs(_inject._quantise(cycles) - cycles) <= 0.03 * cycles


def fake_run(rng, block, condition, side, inject, t):
    cells = []
    for backend in ("triton", "fa2"):
        for batch in (1, 64):
            slow = 1 + inject if backend == "triton" else 1.0
            params = {"backend": backend, "batch": batch, "prune": 0.8, "geometry": "deit_b",
                      "lengths": "uniform"}  # fmt: skip
            cells.append({"benchmark": "kernel.KernelLatency.track_gpu_us", "params": params,
                          "samples": list(rng.normal(10 * batch, 0.03 * batch, 20) * slow),
                          "injected": None})  # fmt: skip
            cells.append({"benchmark": "kernel.KernelLatency.track_call_us", "params": params,
                          "samples": list(rng.normal(40, 4, 200)), "injected": None})  # fmt: skip
    return {"inject": inject, "started": t, "seconds": 1.0, "cells": cells, "block": block,
            "condition": condition, "side": side}  # fmt: skip


def test_analysis_counts_false_alarms_and_detections(tmp_path, capsys):
    rng = np.random.default_rng(0)
    t = 0
    for block in range(8):
        condition = calibrate.CONDITIONS[block % 4]
        for i in range(2 * calibrate.BLOCK):
            side = "head" if i % 2 else "base"
            inject = condition if side == "head" else 0.0
            run = fake_run(rng, block, condition, side, inject, t)
            (tmp_path / f"run-{t:04d}.json").write_text(json.dumps(run))
            t += 1
    rates = calibrate.rates(calibrate.load_runs([tmp_path]), calibrate.detect_policies())
    assert rates[0.0]["gate_runs"] == 2 and rates[0.0]["false_alarm_runs"] == 0
    assert rates["aa_windows"]["gate_runs"] > 10 and rates["aa_windows"]["false_alarm_runs"] == 0
    assert rates[0.10]["caught"] == rates[0.10]["targets"] == 4  # 2 blocks x 2 triton cells
    assert rates[0.05]["caught"] == 4
    assert rates[0.05]["achieved_slowdown"] == pytest.approx(0.05, abs=0.005)
    assert rates[0.0]["inconclusive_runs"] == 0 and rates[0.10]["inconclusive"] == 0
    assert calibrate.main(["analyze", str(tmp_path), "--write", str(tmp_path / "c.md")]) == 0
    text = (tmp_path / "c.md").read_text()
    assert "A/A (blocks)" in text and "triton kernel +5%" in text and "Threshold sweep" in text
    assert "passed (missed)" in text and "runs inconclusive, no alarm" in text


def _paired_doc(design: str, rng, slow: dict) -> dict:
    """One calibration process of ``design``: a triton and an fa2 host_us cell, 40 rounds of
    1% noise, each arm's triton values slowed by ``slow[arm]``."""
    arms = calibrate.DESIGNS[design]
    cells = []
    for backend in ("triton", "fa2"):
        values = {}
        for arm in arms:
            f = 1 + (slow.get(arm, 0.0) if backend == "triton" else 0.0)
            values[arm] = list(10.0 * f * (1 + 0.01 * rng.standard_normal(40)))
        cells.append({"benchmark": "kernel.KernelLatency", "metric": "host_us", "unit": "us",
                      "params": {"backend": backend}, "values": values, "errors": {}})  # fmt: skip
    return {"arms": dict.fromkeys(arms, "src"), "errors": {}, "cells": cells}


def test_paired_analysis_counts_both_designs():
    """A detect collection gives one A/A and one comparison a planted slowdown a process
    group, an aa collection two A/A; planted +10% caught, no A/A alarm."""
    rng = np.random.default_rng(0)
    detect = [_paired_doc("detect", rng, {"h05": 0.05, "h10": 0.10}) for _ in range(3)]
    aa = [_paired_doc("aa", rng, {}) for _ in range(6)]
    r = calibrate.paired_rates([detect, aa], calibrate.detect_policies())
    assert r["groups"] == 3
    assert r["A/A"]["runs"] == 1 + 2 * 2 and r["A/A"]["alarm_runs"] == 0
    assert r["+10%"]["runs"] == 1 and r["+10%"]["per"][("kernel.KernelLatency.host_us", True)][
        "regression"] == 1  # fmt: skip
    assert r["A/A"]["per"][("kernel.KernelLatency.host_us", False)]["n"] == 2 * 5
    assert r["A/A"]["inconclusive_runs"] == 0
    # the gate's A/A arm slowed 8%: the A/A comparison's head lies 4% under the midpoint of base
    # and that arm, and its interval, widened by the 8%, reaches past the 3% threshold, so it is
    # inconclusive (no pass); the planted +10% still caught
    moved = [_paired_doc("detect", rng, {"aa": 0.08, "h10": 0.10}) for _ in range(3)]
    r = calibrate.paired_rates([moved], calibrate.detect_policies())
    assert r["A/A"]["inconclusive_runs"] == 1 and r["A/A"]["alarm_runs"] == 0
    assert r["+10%"]["per"][("kernel.KernelLatency.host_us", True)]["regression"] == 1


def test_the_alone_analysis_reports_what_the_fallback_could_not_judge(tmp_path, capsys):
    """Alternating single-revision processes, 3 a side: even a head twice as slow is
    inconclusive, and the table says no change was detectable."""
    rng = np.random.default_rng(1)
    for i in range(6):
        side = ("head", "base")[i % 2]
        doc = _paired_doc("aa", rng, {})
        for c in doc["cells"]:
            values = c["values"]["base"]
            c["values"] = {side: [v * (2 if side == "head" else 1) for v in values]}
        doc["arms"] = {side: "src"}
        (tmp_path / f"alone-{i:04d}.json").write_text(json.dumps(doc))
    assert calibrate.alone_analyze([tmp_path], None) == 0
    out = capsys.readouterr().out
    assert "3 processes a side" in out
    assert "| `kernel.KernelLatency.host_us` | 2 | inconclusive 2 | none, none |" in out


def test_the_rule_table_counts_aa_passes_and_planted_slowdowns(tmp_path, capsys):
    """rule-table on a paired collection whose planted +10% is caught and whose A/A comparison
    passes, and on synthetic cells: one row each, with the A/A gate runs that passed."""
    rng = np.random.default_rng(2)
    paired_dir = tmp_path / "pcal"
    paired_dir.mkdir()
    for i in range(6):
        doc = _paired_doc("detect", rng, {"h05": 0.05, "h10": 0.10})
        (paired_dir / f"paired-{i:04d}.json").write_text(json.dumps(doc))
    out = tmp_path / "table.md"
    assert calibrate.main(["rule-table", "--paired", str(paired_dir), "--seeds", "2",
                           "--write", str(out)]) == 0  # fmt: skip
    rows = {r.split(" |")[0]: r for r in out.read_text().splitlines()}
    for looks in ("one look", "the gate's two looks"):
        paired = rows[f"| paired, host-time cells in one process (6 processes, 3 at a time), "
                      f"{looks}"]  # fmt: skip
        assert "| 2 | 2/2 (100.0%) | 0/2 (0.0%) | 0/2 (0.0%) | - |" in paired
        assert "2/2 (100.0%) caught, 0 inc., 0 pass |" in paired
    noisy = rows["| synthetic cell, 30.0% spread, 2% threshold"]
    assert noisy.count(" 0 pass") == 3  # no planted slowdown of a noisy cell passes
