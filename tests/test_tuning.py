"""Launch configurations per GPU (ragged/kernels/tuning.py): the table where it was measured,
a one-time sweep cached per device name and Triton version elsewhere, never in graph capture.
The GPU is faked here (name, capability, a timer); the sweep itself ran on an H200 (docs)."""

from __future__ import annotations

import json

import pytest
import torch
import triton

from ragged.kernels import attention, config, tuning


@pytest.fixture
def fake_gpu(monkeypatch, tmp_path):
    """A GPU named "Fake GPU 48SM" (sm_89), the cache in tmp_path, a timer that prefers
    32x32 tiles with 8 warps and counts its calls."""
    monkeypatch.setenv("RAGGED_TUNING_DIR", str(tmp_path))
    name = {"value": "Fake GPU 48SM"}
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: name["value"])
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda i=0: (8, 9))
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: False)
    monkeypatch.setattr(config, "_loaded", {})
    calls = []

    def timer(cfg, problem, device_index):
        calls.append(cfg)
        return abs(cfg.block_m - 32) + abs(cfg.block_n - 32) + (0 if cfg.num_warps == 8 else 1)

    return name, calls, timer


def test_the_shape_classes_are_the_table_s_branches():
    cases = [(64, 197, torch.float32, "fp32"), (64, 16, torch.float16, "short"),
             (64, 197, torch.bfloat16, "d64"), (128, 197, torch.float16, "dlarge")]  # fmt: skip
    for head_dim, seqlen, dtype, cls in cases:
        assert tuning.shape_class(head_dim, seqlen, dtype) == cls
        problem = tuning.CLASSES[cls]
        assert tuning.shape_class(problem[2], problem[1], problem[3]) == cls


def test_a_device_without_a_table_is_swept_once_and_the_sweep_is_used(fake_gpu, tmp_path):
    _, calls, timer = fake_gpu
    table = tuning.config_for(64, 197, torch.float16, 0)
    assert (table.block_m, table.block_n) == (64, 64)  # the table until it is swept
    attention._plans[("sentinel",)] = None
    attention.ready_spans[("sentinel",)] = None
    path = tuning.tune(0, timer=timer)
    assert path == tmp_path / f"Fake-GPU-48SM-triton{triton.__version__}.json"
    assert ("sentinel",) not in attention._plans  # plans made with the table are re-planned
    assert ("sentinel",) not in attention.ready_spans  # and the fast path forgets them too
    doc = json.loads(path.read_text())
    assert doc["device"] == "Fake GPU 48SM" and set(doc["classes"]) == set(tuning.CLASSES)
    swept = tuning.config_for(64, 197, torch.float16, 0)
    assert (swept.block_m, swept.block_n, swept.num_warps) == (32, 32, 8)
    n = len(calls)
    assert tuning.tune(0, timer=timer) == path and len(calls) == n  # cached: no second sweep
    assert tuning.config_for(64, 197, torch.float16, -1) == attention.attention_config(
        64, 197, torch.float16, (0, 0))  # fmt: skip


def test_another_triton_or_a_broken_file_means_the_table_until_swept_again(fake_gpu, monkeypatch):
    _, calls, timer = fake_gpu
    path = tuning.tune(0, timer=timer)
    version = triton.__version__
    monkeypatch.setattr(triton, "__version__", "99.0.0")
    monkeypatch.setattr(config, "_loaded", {})
    assert tuning.config_for(64, 197, torch.float16, 0).block_m == 64  # not this triton's
    monkeypatch.setattr(triton, "__version__", version)
    monkeypatch.setattr(config, "_loaded", {})
    path.write_text("{not json")
    assert tuning.config_for(64, 197, torch.float16, 0).block_m == 64
    n = len(calls)
    tuning.tune(0, timer=timer)  # unreadable: swept again
    assert len(calls) > n


def test_the_measured_device_keeps_its_table_and_capture_is_refused(fake_gpu, monkeypatch):
    name, calls, timer = fake_gpu
    name["value"] = next(iter(tuning.SWEPT))
    assert tuning.tune(0, timer=timer) is None and not calls
    monkeypatch.setattr(torch.cuda, "is_current_stream_capturing", lambda: True)
    with pytest.raises(tuning.TuningError, match="graph capture"):
        tuning.tune(0, timer=timer)


def test_the_table_s_tile_stays_unless_a_candidate_is_clearly_faster(fake_gpu):
    """Within 2% (timing noise) of the best, the table's tile is kept."""
    tuning.tune(0, timer=lambda cfg, problem, i: 10.0 - 0.1 * (cfg.num_warps == 8))
    kept = tuning.config_for(64, 197, torch.float16, 0)
    assert kept == attention.attention_config(64, 197, torch.float16, (8, 9))
