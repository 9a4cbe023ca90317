"""The first-call measurement (benchmarks/support/first_call.py): its counters and what it refuses,
on the CPU; its counts on a GPU."""

from __future__ import annotations

import os
import warnings
from types import SimpleNamespace

import pytest
import triton

from benchmarks.support import first_call


class FakeModes:
    """torch.cuda's get/set_sync_debug_mode, recorded."""

    def __init__(self, mode=0):
        self.mode, self.set = mode, []

    def get(self):
        return self.mode

    def put(self, mode):
        self.set.append(mode)
        self.mode = mode


def test_count_syncs_counts_torch_sync_warnings_and_restores_the_mode():
    modes = FakeModes(mode=2)
    with (
        pytest.warns(UserWarning, match="unrelated") as others,
        first_call.count_syncs(modes.get, modes.put) as syncs,
    ):
        assert modes.mode == "warn"
        for _ in range(3):  # one call site, every occurrence counted
            warnings.warn(
                f"{first_call.SYNC_WARNING} (Triggered internally)", UserWarning, stacklevel=1
            )
        warnings.warn("unrelated", UserWarning, stacklevel=1)
    assert syncs.count == 3 and modes.mode == 2 and modes.set == ["warn", 2]
    assert [str(w.message) for w in others] == ["unrelated"]  # passed on, the syncs not


def test_count_syncs_restores_the_mode_when_the_call_raises():
    modes = FakeModes()
    with pytest.raises(RuntimeError), first_call.count_syncs(modes.get, modes.put):
        raise RuntimeError("boom")
    assert modes.mode == 0


def test_count_compiles_chains_and_restores_the_hook():
    seen = []
    before = lambda **kw: seen.append(kw["key"])  # noqa: E731
    runtime = SimpleNamespace(jit_post_compile_hook=before)
    with first_call.count_compiles(runtime) as compiles:
        for key in ("a", "b"):  # as JITFunction._do_compile calls it
            runtime.jit_post_compile_hook(
                key=key, repr="", fn=None, compile={}, is_manual_warmup=False,
                already_compiled=False,
            )  # fmt: skip
    assert compiles.count == 2 and seen == ["a", "b"]
    assert runtime.jit_post_compile_hook is before
    runtime = SimpleNamespace(jit_post_compile_hook=None)
    with pytest.raises(KeyError), first_call.count_compiles(runtime) as compiles:
        runtime.jit_post_compile_hook(key="c")
        raise KeyError("boom")
    assert compiles.count == 1 and runtime.jit_post_compile_hook is None


def test_this_triton_has_the_knobs_the_measurement_uses():
    assert first_call.compile_hook_reason(triton.knobs.runtime) is None
    assert "jit_post_compile_hook" in first_call.compile_hook_reason(SimpleNamespace())
    assert "jit_post_compile_hook" in first_call.compile_hook_reason(None)


def test_empty_disk_cache_points_triton_at_an_empty_dir_and_restores_it():
    cache = triton.knobs.cache
    before_dir, before_env = cache.dir, os.environ.get("TRITON_CACHE_DIR")
    with first_call.empty_disk_cache(cache) as tmp:
        assert cache.dir == str(tmp) == os.environ["TRITON_CACHE_DIR"]
        assert tmp.is_dir() and not any(tmp.iterdir())
        (tmp / "kernel").write_text("x")
    assert not tmp.exists()
    assert cache.dir == before_dir and os.environ.get("TRITON_CACHE_DIR") == before_env


def fake_kernels():
    calls = []
    jit = SimpleNamespace(device_caches={0: ({}, {}, None, None, None)})
    launcher = SimpleNamespace(_cache={"plan": "direct"}, fn=jit)
    return SimpleNamespace(forget_plans=lambda: calls.append(1), _launcher=launcher), calls


def test_drop_memory_caches_drops_all_three():
    kernels, calls = fake_kernels()
    assert first_call.drop_memory_caches(kernels) is None
    assert (
        calls == [1] and kernels._launcher._cache == {} and kernels._launcher.fn.device_caches == {}
    )


def test_drop_memory_caches_drops_nothing_without_an_attribute():
    kernels, calls = fake_kernels()
    del kernels._launcher.fn.device_caches
    reason = first_call.drop_memory_caches(kernels)
    assert reason == "cannot drop the in-memory caches: no its JITFunction's device_caches"
    assert calls == [] and kernels._launcher._cache == {"plan": "direct"}


def test_drop_memory_caches_finds_what_this_ragged_keeps():
    """The private attributes new_head_dim_cached drops exist in this revision (under the
    interpreter the kernel is no JITFunction: only its device_caches may be missing)."""
    from ragged.kernels import attention

    reason = first_call.drop_memory_caches(attention)
    if isinstance(attention._launcher.fn, triton.runtime.JITFunction):
        assert reason is None
    else:
        assert reason == "cannot drop the in-memory caches: no its JITFunction's device_caches"


def test_sample_counts_the_first_call_only():
    runtime = SimpleNamespace(jit_post_compile_hook=None)
    modes, calls, syncs = FakeModes(), [], []

    def fn():
        calls.append(1)
        if len(calls) == 1:  # the first call compiles one kernel and syncs twice
            runtime.jit_post_compile_hook(key="k")
            for _ in range(2):
                warnings.warn(first_call.SYNC_WARNING, UserWarning, stacklevel=1)

    s = first_call.sample(fn, lambda: syncs.append(1), runtime, kept_calls=5,
                 syncs_counter=lambda: first_call.count_syncs(modes.get, modes.put))  # fmt: skip
    assert len(calls) == 6 and len(syncs) == 7  # before, after the first, after each kept
    assert s["compiles"] == 1 and s["host_syncs"] == 2
    assert s["first_call_us"] > 0 and s["kept_call_us"] > 0
    assert s["first_over_kept"] == pytest.approx(s["first_call_us"] / s["kept_call_us"])


def test_measure_refuses_unknown_cases():
    with pytest.raises(ValueError, match=r"unknown first-call cases \['new_batch'\]"):
        first_call.measure(["new_max_seqlen", "new_batch"])


def test_measure_skips_every_case_without_the_knobs(monkeypatch):
    monkeypatch.delattr(triton, "knobs")
    out = first_call.measure(["new_max_seqlen", "new_dtype"])
    assert list(out) == ["new_max_seqlen", "new_dtype"]
    assert all("jit_post_compile_hook" in m["skip"] for m in out.values())


def test_fastpath_build_says_why_it_cannot_build(monkeypatch):
    monkeypatch.setenv("CXX", "no-such-compiler-ragbench")
    assert (
        first_call.fastpath_build_s()
        == "cannot build: no C++ compiler 'no-such-compiler-ragbench' (set CXX)"
    )


def test_the_suite_skips_first_calls_without_a_gpu():
    from benchmarks.support import measure as _measure

    if _measure._gpu() is not None:
        pytest.skip("a CUDA GPU is here")
    cache = _measure.first_calls(None)
    assert cache == {"skip": "needs a CUDA GPU: first-call costs are GPU costs", "cells": {}}


def test_kernel_bench_first_call_needs_a_gpu(capsys):
    from scripts import kernel_bench

    if kernel_bench.torch.cuda.is_available():
        pytest.skip("a CUDA GPU is here")
    assert kernel_bench.main(["--first-call", "--no-table"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err


@pytest.mark.gpu
def test_a_new_max_seqlen_compiles_nothing_and_never_syncs():
    """The issue's promise for a new length within a compiled configuration (its cost, <= 2x
    a kept call, is the benchmark's: kernel.FirstCall)."""
    new = first_call.measure(["new_max_seqlen"], max_seqlens=(171, 183))["new_max_seqlen"]
    assert new["compiles"] == [0, 0] and new["host_syncs"] == [0, 0]


def test_kernel_bench_prints_the_first_call_table(monkeypatch, capsys):
    from scripts import kernel_bench

    cases = {
        "new_max_seqlen": {"first_call_us": [30.0, 10.0, 20.0], "kept_call_us": [10.0] * 3,
                           "first_over_kept": [3.0, 1.0, 2.0], "compiles": [0, 0, 0],
                           "host_syncs": [0, 1, 0]},
        "new_head_dim_cached": {"skip": "cannot drop the in-memory caches: no its _cache"},
    }  # fmt: skip
    monkeypatch.setattr(kernel_bench.first_call_cases, "measure", lambda: cases)
    monkeypatch.setattr(kernel_bench.first_call_cases, "fastpath_build_s", lambda: 9.87)
    assert kernel_bench.first_call(None) == {"cases": cases, "fastpath_build_s": 9.87}
    lines = capsys.readouterr().out.splitlines()
    assert "| new_max_seqlen | 20 (10-30) | 10.0 | 2.0 | 0 | 0-1 |" in lines
    assert "| new_head_dim_cached | skipped: cannot drop the in-memory caches: no its _cache |" \
        " | | | |" in lines  # fmt: skip
    assert "| C++ fast path build (once a machine) | 9.9 s | | | | |" in lines
