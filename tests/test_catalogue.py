"""The suite's catalogue (benchmarks/support/catalogue.py) against ragged's registry, and what a
backend's declared capabilities do."""

import dataclasses

import pytest
import torch

import ragged
from benchmarks.support import catalogue, grids
from ragged.models import build_model
from ragged.pipeline import PrunedViT, PruneStage, ragged_backends
from ragged.pruning import ATS, ThresholdL2
from ragged.testing import assert_attention_close, packed_qkv


def test_every_registry_backend_is_in_the_catalogue():
    assert [b.name for b in catalogue.BACKENDS] == list(
        dict.fromkeys(b.name for b in catalogue.BACKENDS)
    )
    assert {b.name for b in catalogue.BACKENDS} == set(ragged.BACKENDS)


def test_every_pipeline_backend_has_its_pipeline_and_no_other():
    ragged_pipes = [p for p in catalogue.PIPELINES if p.mode == "ragged"]
    assert {p.backend for p in ragged_pipes} == set(ragged_backends())
    for p in ragged_pipes:
        assert ragged.BACKENDS[p.backend].pipeline, p.name
        if p.cuda_graph:
            assert ragged.BACKENDS[p.backend].capture, p.name
        elif not p.no_attention:
            assert p.name == p.backend  # results name a ragged pipeline by its backend
    assert {p.mode for p in catalogue.PIPELINES} <= {"ragged", "padded_full", "padded_max", "dense"}


def test_the_grids_and_the_workloads_come_from_the_catalogue():
    from benchmarks.support import workloads

    model = build_model("deit_tiny_224", seed=0)
    method = ThresholdL2(keep_ratio=0.5)
    for p in catalogue.PIPELINES:
        pipe = workloads.pipeline(model, method, p.name)
        assert (pipe.mode, pipe.backend, pipe.cuda_graph) == (p.mode, p.backend, p.cuda_graph)
        assert (pipe.layout_attention is workloads.no_attention()) is p.no_attention
    ats = ATS(0.5)  # data-dependent kept lengths: the bound's buffer follows the rows
    assert workloads.rows_vary(model, ats) and not workloads.rows_vary(model, method)
    assert workloads.pipeline(
        model, ats, "no_attention"
    ).layout_attention is workloads.no_attention(True)
    assert set(grids.KERNEL_BACKENDS) <= {b.name for b in catalogue.BACKENDS if b.kernel}
    for names in (grids.PIPELINES, grids.STAGE_PIPELINES, grids.DRIFT_BACKENDS, grids.CPU_PIPELINES,
                  grids.CPU_DRIFT_BACKENDS):  # fmt: skip
        assert set(names) <= set(catalogue.PIPELINE_BY_NAME)
    for axis in ("throughput", "stages", "drift"):
        assert set(catalogue.pipelines(axis, catalogue.QUICK)) <= set(
            catalogue.pipelines(axis, catalogue.FULL)
        )
    assert set(catalogue.DEFAULT_BASELINES) <= set(catalogue.PIPELINE_BY_NAME)
    assert catalogue.candidates() == ["triton", "triton_graph"]


def test_no_attention_gives_a_buffer_of_the_calls_rows_where_rows_vary():
    from benchmarks.support import workloads

    fixed, varying = workloads.no_attention(), workloads.no_attention(rows_vary=True)
    assert fixed is not varying
    for cls in (fixed, varying):
        layout = cls(None, 0)
        first = layout(torch.zeros(5, 3, 2, 8))
        assert first.shape == (5, 2, 8) and layout(torch.zeros(5, 3, 2, 8)) is first
    layout = varying(None, 0)
    a = layout(torch.zeros(5, 3, 2, 8))
    b = layout(torch.zeros(7, 3, 2, 8))
    assert b.shape == (7, 2, 8) and layout(torch.zeros(7, 3, 2, 8)) is b and a is not b
    layout = fixed(None, 0)  # fixed ratios: no check per call, the first call's buffer
    assert layout(torch.zeros(5, 3, 2, 8)) is layout(torch.zeros(7, 3, 2, 8))


def test_the_version_locked_slow_set_matches_the_catalogue():
    """``measure.kernels`` spells the slow backends itself: its source is part of the kernel
    benchmarks' asv version, which must not move (the stored series continue)."""
    import inspect

    from benchmarks.support import measure as _measure

    names = ", ".join(f'"{n}"' for n in sorted(catalogue.slow_backends()))
    assert f"slow=frozenset({{{names}}})" in inspect.getsource(_measure.kernels)


def test_a_dtype_outside_a_backends_dtypes_is_refused_with_reason():
    half_only = dataclasses.replace(ragged.BACKENDS["padded_sdpa"], dtypes=(torch.float16,))
    assert half_only.unavailable(None, torch.float16, 64) is None
    reason = half_only.unavailable(None, torch.float32, 64)
    assert "float16 only" in reason and "float32" in reason


def test_a_backend_added_to_the_registry_is_picked_up(monkeypatch):
    """One registry entry: varlen_attention and PrunedViT take it; the catalogue test above
    then fails until the suite declares it."""
    extra = dataclasses.replace(ragged.BACKENDS["padded_sdpa"], name="extra", pipeline=True)
    monkeypatch.setitem(ragged.BACKENDS, "extra", extra)
    assert "extra" in ragged.available_backends() and "extra" in ragged_backends()
    q, k, v, cu, max_seqlen = packed_qkv([3, 0, 5], 2, 64, dtype=torch.float32)
    assert_attention_close(ragged.varlen_attention(q, k, v, cu, max_seqlen, backend="extra"),
                           q, k, v, cu)  # fmt: skip
    model = build_model("deit_tiny_224", seed=0)
    PrunedViT(model, PruneStage(1, ThresholdL2(keep_ratio=0.5)), backend="extra")
    with pytest.raises(AssertionError):
        test_every_registry_backend_is_in_the_catalogue()


def test_declared_capabilities_are_enforced_by_the_pipeline():
    model = build_model("deit_tiny_224", seed=0)
    stage = PruneStage(1, ThresholdL2(keep_ratio=0.5))
    exact = [n for n in ragged_backends() if ragged.BACKENDS[n].exact_total]
    syncs = [n for n in ragged_backends() if not ragged.BACKENDS[n].capture]
    assert exact and syncs  # nested_sdpa
    for name in exact:
        with pytest.raises(ValueError, match="exact packing"):
            PrunedViT(model, stage, backend=name, capacity=100)
    for name in syncs:
        with pytest.raises(ValueError, match="cannot be captured"):
            PrunedViT(model, stage, backend=name, cuda_graph=True)
