"""scripts/pipeline_bench.py's timing in turns and its share of the bound (no GPU needed)."""

from __future__ import annotations

import numpy as np
import pytest

from scripts import pipeline_bench


def test_turns_time_each_call_alone_in_a_rotating_order():
    now, log = [0.0], []
    cost = {"a": 3e-3, "b": 1e-3, "c": 2e-3}  # seconds a call

    def make(name):
        def fn():
            log.append(name)
            now[0] += cost[name]

        return fn

    def sync():
        log.append("sync")

    fns = {n: make(n) for n in cost}
    out = pipeline_bench.turns_us(fns, 4, target_us=10e3, sync=sync, clock=lambda: now[0])
    assert {n: [round(x, 6) for x in s] for n, s in out.items()} == {
        n: [c * 1e6] * 4 for n, c in cost.items()
    }
    calls = [e for e in log if e != "sync"]
    assert calls[:6] == ["a", "b", "c"] * 2  # the first call of each, then the calibration
    timed = calls[6:]
    assert len(timed) == 4 * 3 * 3  # 4 rounds of 3 turns (10 ms / the slowest 3 ms)
    turns = [timed[i : i + 3] for i in range(0, len(timed), 3)]
    assert turns[:3] == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert all(log[i + 1] == "sync" for i, e in enumerate(log) if e != "sync")


def rounds(rng, n, gain, share, drift=0.1, noise=0.03):
    """Per-round µs of fa2, triton and the bound: the bound ``gain`` faster than fa2, triton
    ``share`` of the way; every round's host speed drifts, each pipeline has its own noise."""
    host = 4000 * np.exp(rng.normal(0, drift, n))
    bound = host * np.exp(rng.normal(0, noise, n))
    fa2 = host * (1 + gain) * np.exp(rng.normal(0, noise, n))
    triton = host * (1 + gain) / (1 + share * gain) * np.exp(rng.normal(0, noise, n))
    return fa2, triton, bound


def test_the_share_of_the_bound_is_found_with_an_interval_that_holds_it():
    rng = np.random.default_rng(0)
    for true in (0.6, 0.8, 0.95):
        share, lo, hi = pipeline_bench.share_of_bound(*rounds(rng, 301, 0.14, true))
        assert abs(share - true) < 0.05
        assert lo < true < hi and hi - lo < 0.2


def test_a_share_from_exact_rounds_is_exact():
    fa2 = np.array([4000.0, 5000.0, 4500.0])
    share, lo, hi = pipeline_bench.share_of_bound(fa2, fa2 / 1.08, fa2 / 1.10)
    assert share == pytest.approx(0.8) and lo == pytest.approx(0.8) and hi == pytest.approx(0.8)


def test_a_share_of_a_bound_no_faster_than_fa2_is_refused():
    """Where the bound's gain over fa2 is not resolved (ATS under CUDA graphs: its interval
    reaches 0), the share is NaN, never a ratio over noise (it read -2.7 [-509, 103])."""
    rng = np.random.default_rng(1)
    fa2, triton, _ = rounds(rng, 101, 0.14, 0.8)
    bound = fa2 * np.exp(rng.normal(0, 0.01, 101))  # no faster than fa2
    assert all(np.isnan(pipeline_bench.share_of_bound(fa2, triton, bound)))
    assert pipeline_bench.share_cell({n: {"samples_us": x} for n, x in
                         (("fa2", fa2), ("triton", triton), ("b", bound))}, "b").startswith(
        "unresolved")  # fmt: skip


def bound_row(model, method, batch, rng):
    """A fake bound-section row: every pipeline's per-round µs and img/s."""
    fa2, triton, bound = rounds(rng, 41, 0.14, 0.8)
    us = {
        "fa2": fa2,
        "triton": triton,
        "no_attention": bound,
        "launch_only": bound * 1.02,
        "fa2_graph": fa2 / 3,
        "triton_graph": triton / 3,
        "no_attention_graph": bound / 3,
    }
    pipes = {n: {"samples_us": list(s), "img_per_s": batch / float(np.median(s)) * 1e6}
             for n, s in us.items()}  # fmt: skip
    return {"model": model, "method": method, "batch": batch, "pipelines": pipes,
            "ragged_attention_calls": 8, "timing": "turns"}  # fmt: skip


def test_the_bound_table_has_a_row_per_model_method_and_batch():
    rng = np.random.default_rng(1)
    rows = [bound_row(m, method, b, rng) for m in ("deit_base_224", "deit_base_384")
            for method in ("threshold_l2", "ats") for b in (1, 4)]  # fmt: skip
    lines = pipeline_bench.summary({"bound": rows}).splitlines()
    header = next(line for line in lines if line.startswith("| model |"))
    cols = [c.strip() for c in header.strip("|").split("|")]
    assert cols[:3] == ["model", "method", "BS"]
    body = [line for line in lines if line.startswith("| deit_")]
    assert len(body) == len(rows)
    for line, r in zip(body, rows, strict=True):
        cells = [c.strip() for c in line.strip("|").split("|")]
        assert len(cells) == len(cols)
        assert cells[:3] == [r["model"], r["method"], str(r["batch"])]
    assert lines[lines.index(header) + 1] == "|---" * len(cols) + "|"


def test_the_bound_section_narrows_to_the_models_methods_and_batches_asked(monkeypatch):
    calls = []

    def fake_run(model, batches, names, method, rounds, label, timing):
        calls.append((model, method, tuple(batches), rounds))
        return [bound_row(model, method, b, np.random.default_rng(b)) for b in batches]

    monkeypatch.setattr(pipeline_bench.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(pipeline_bench, "environment", dict)
    monkeypatch.setattr(pipeline_bench, "run_throughput", fake_run)
    assert pipeline_bench.main(["--sections", "bound", "--bound-batches", "1", "4"]) == 0
    assert calls == [(m, method, (1, 4), 101) for m in ("deit_base_224", "deit_base_384")
                     for method in ("threshold_l2", "ats")]  # fmt: skip
    calls.clear()
    pipeline_bench.main(["--sections", "bound", "--bound-models", "deit_base_384",
                         "--bound-methods", "ats", "--rounds", "201"])  # fmt: skip
    assert calls == [("deit_base_384", "ats", (1, 4), 201)]
