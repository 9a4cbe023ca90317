"""The suite's own speed, with pytest-benchmark: ingest, the gate's comparison, detection, and
the dashboard's queries on a store of 1,000 commits (``ragbench.synth``).

    make bench-self   # = pytest selfbench --benchmark-json results/selfbench.json, then
                      #   ragbench ingest results/selfbench.json
"""

from __future__ import annotations

import os

import pytest

from ragbench import synth
from ragbench.history.series import stored_histories
from ragbench.policies import load_policies
from ragbench.result_files import ingest
from ragbench.store import Store
from ragbench.suite_views import SUITE_VIEWS
from ragbench.verdicts import comparison as compare

COMMITS = int(os.environ.get("RAGBENCH_SELFBENCH_COMMITS", 1000))  # fewer: the tests' smoke run


@pytest.fixture(scope="session")
def history(tmp_path_factory):
    return synth.write_history(tmp_path_factory.mktemp("history"), COMMITS)


@pytest.fixture(scope="session")
def store(history, tmp_path_factory):
    path = tmp_path_factory.mktemp("store") / "perf.duckdb"
    with Store(path, views=SUITE_VIEWS) as s:
        ingest(s, [history], branch="main")
    s = Store(path, read_only=True)
    yield s
    s.close()


def test_ingest_rows_per_second(benchmark, history, tmp_path):
    """1,000 result files into an empty store."""
    paths = iter(range(100))

    def run():
        with Store(tmp_path / f"s{next(paths)}.duckdb") as s:
            return ingest(s, [history], branch="main")

    report = benchmark.pedantic(run, rounds=3, iterations=1)
    assert len(report.stored) == COMMITS
    benchmark.extra_info["rows_per_s"] = report.rows / benchmark.stats.stats.median


def test_gate_comparison(benchmark, store):
    """The gate's work after measuring: load two commits' cells, compare every one."""
    runs = store.runs()
    policies = load_policies()

    def run():
        base = compare.cells(store, [runs[1]["run_id"]])
        head = compare.cells(store, [runs[0]["run_id"]])
        return compare.compare(base, head, policies)

    assert benchmark(run).verdicts


def test_detect_history(benchmark, store):
    """``ragbench detect``: the lookback (SQL) and the stored change points of every series
    (last 200 commits)."""
    policies = load_policies()
    reports = benchmark.pedantic(
        lambda: stored_histories(store, synth.MACHINE, policies), rounds=1, iterations=1
    )
    assert any(r.change_points for r in reports)


QUERIES = {
    "runs": lambda s: s.runs(machine=synth.MACHINE),
    "series": lambda s: s.series(benchmark="kernel.KernelLatency", metric="gpu_us",
                                 machine=synth.MACHINE, params={"backend": "triton"}),
    "dispatch_floors": lambda s: s.dispatch_floors(machine=synth.MACHINE),
    "speedups": lambda s: s.speedups(machine=synth.MACHINE),
    "drift": lambda s: s.drift(machine=synth.MACHINE),
}  # fmt: skip


@pytest.mark.parametrize("query", list(QUERIES))
def test_dashboard_query(benchmark, store, query):
    """The queries the dashboard's pages make, on 1,000 commits."""
    assert benchmark(QUERIES[query], store)
