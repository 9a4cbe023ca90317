"""The suite's own benchmarks (selfbench/, pytest-benchmark) run and land in the store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ragbench.store import Store

REPO = Path(__file__).resolve().parent.parent


def test_selfbench_runs_and_is_ingested(tmp_path):
    out_json = tmp_path / "selfbench.json"
    # not as an xdist worker (make test's): pytest-benchmark would switch itself off
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}
    env["RAGBENCH_SELFBENCH_COMMITS"] = "30"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "selfbench", "-q", "-p", "no:cacheprovider",
         "--benchmark-json", str(out_json), "--benchmark-max-time=0.05"],
        capture_output=True, text=True, cwd=REPO, env=env, timeout=600,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-3000:]
    store = tmp_path / "perf.duckdb"
    ingest = subprocess.run(
        # --dirty: a working tree with changes is still this test's (a run of no commit)
        [sys.executable, "-m", "ragbench", "ingest", str(out_json), "--store", str(store),
         "--dirty"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert ingest.returncode == 0, ingest.stderr
    with Store(store, read_only=True) as s:
        (run_row,) = s.runs()
        assert run_row["source"] == "pytest-benchmark"
        rows = s.series(samples=True)
        names = {r["benchmark"].rsplit("::", 1)[-1] for r in rows}
        assert {"test_ingest_rows_per_second", "test_gate_comparison", "test_detect_history",
                "test_dashboard_query"} <= names  # fmt: skip
        rate = [r for r in rows if r["metric"] == "rows_per_s"]
        assert rate and rate[0]["median"] > 0 and rate[0]["unit"] == "rows/s"
        assert all(r["samples"] for r in rows if r["metric"] == "time")
