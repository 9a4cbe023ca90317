"""The DuckDB store and ingest: real suite results, pytest-benchmark JSON, bad files,
idempotence, concurrent ingests, views and Parquet export."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ragbench.ingest import ingest, parse
from ragbench.store import Store, StoreError

REPO = Path(__file__).resolve().parent.parent


def copy_results(quick_run, dest: Path) -> Path:
    """The quick run's results directory (result file, fingerprint, benchmarks.json)."""
    results, _ = quick_run
    shutil.copytree(results, dest)
    return dest


def result_file(results: Path) -> Path:
    return next(p for p in results.glob("*/*.json") if p.name != "machine.json")


def test_ingest_real_suite_results(quick_run, tmp_path):
    results = copy_results(quick_run, tmp_path / "results")
    data = json.loads(result_file(results).read_text())
    with Store(tmp_path / "perf.duckdb") as store:
        report = ingest(store, [results], branch="main")
        assert len(report.stored) == 1 and not report.failed and report.rows > 0
        (run,) = store.runs()
        assert run["commit_hash"] == data["commit_hash"] and run["machine"] == "ci"
        assert run["torch"] and run["triton"] and run["harness_version"] == 1
        assert run["mode"] == "quick" and run["commit_time"] is not None
        rows = store.series(samples=True)
        assert len(rows) == report.rows
        measured = {(r["benchmark"], r["metric"]) for r in rows}
        gpu = run["gpu"] is not None
        assert (
            ("kernel.KernelLatency", "call_us") in measured
            if gpu
            else (("cpu.Pipeline", "img_per_s") in measured)
        )
        for r in rows:  # every stored value is a number, raw samples where asv kept them
            assert r["median"] == r["median"] and r["unit"]
            if r["samples"]:
                assert r["median"] == pytest.approx(sorted(r["samples"])[len(r["samples"]) // 2])
        assert store.drift(), "the drift view is empty"
        speedups = store.speedups()
        assert speedups, "the speedups view is empty"
        assert {r["unit"] for r in speedups} <= {"us", "ms", "img/s"}  # no hash or drift ratio


def test_ingest_twice_changes_nothing(quick_run, tmp_path):
    results = copy_results(quick_run, tmp_path / "results")
    with Store(tmp_path / "perf.duckdb") as store:
        first = ingest(store, [results])
        counts = store.counts()
        second = ingest(store, [results, result_file(results)])
        assert store.counts() == counts
        assert second.rows == 0 and len(second.duplicate) == 1 and first.rows > 0


def test_corrupt_and_truncated_files_are_skipped_and_nothing_is_lost(quick_run, tmp_path):
    results = copy_results(quick_run, tmp_path / "results")
    good = result_file(results)
    text = good.read_text()
    with Store(tmp_path / "perf.duckdb") as store:
        ingest(store, [results], branch="main")
        before = store.counts()
        bad = tmp_path / "bad"
        bad.mkdir()
        (bad / "truncated.json").write_text(text[: len(text) // 2])
        (bad / "garbage.json").write_bytes(b"\xff\xfe not json")
        (bad / "other.json").write_text('{"hello": 1}')
        broken = json.loads(text)
        broken["results"] = {k: [[1.0], "not params"] for k in broken["results"]}
        (bad / "broken.json").write_text(json.dumps(broken))
        report = ingest(store, [bad])
        assert {p.name for p, _ in report.failed} == {
            "truncated.json", "garbage.json", "other.json", "broken.json",
        }  # fmt: skip
        assert all(reason for _, reason in report.failed)
        assert store.counts() == before


def test_cli_reports_bad_files_and_exits_1(quick_run, tmp_path):
    results = copy_results(quick_run, tmp_path / "results")
    (tmp_path / "truncated.json").write_text(result_file(results).read_text()[:100])
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "ingest", str(results), str(tmp_path / "truncated.json"),
         "--store", str(tmp_path / "s.duckdb")],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 1, out.stderr
    assert "refused" in out.stderr and "truncated.json" in out.stderr
    assert "1 file(s) stored" in out.stderr and "1 refused" in out.stderr


def fake_asv_results(src: Path, dest: Path, n: int) -> Path:
    """``n`` copies of a real result file as runs of other start times."""
    results = dest
    shutil.copytree(src, results)
    path = result_file(results)
    data = json.loads(path.read_text())
    col = data["result_columns"].index("started_at")
    for i in range(n):
        for row in data["results"].values():
            row[col] = (row[col] or 0) + 1000
        copy = path.with_name(f"{i:04d}{path.name[4:]}")
        copy.write_text(json.dumps(data))
        shutil.copy(path.with_suffix(".fingerprint"), copy.with_suffix(".fingerprint"))
    path.unlink()
    return results


def test_two_concurrent_ingests_lose_no_rows(quick_run, tmp_path):
    results, _ = quick_run
    a = fake_asv_results(results, tmp_path / "a", 6)
    b = fake_asv_results(results, tmp_path / "b", 6)
    for i, p in enumerate(sorted(b.glob("*/*.json"))):  # other runs than a's
        data = json.loads(p.read_text())
        data["env_name"] = f"other-{i}"
        p.write_text(json.dumps(data))
    store = tmp_path / "perf.duckdb"
    Store(store).close()
    cmd = [sys.executable, "-m", "ragbench", "ingest", "--store", str(store), "--branch", "main"]
    procs = [subprocess.Popen([*cmd, str(d)], cwd=REPO, stderr=subprocess.PIPE, text=True)
             for d in (a, b)]  # fmt: skip
    errors = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errors
    with Store(store, read_only=True) as s:
        runs = s.runs()
        per_run = len(parse(next(p for p in a.glob("*/*.json") if p.name != "machine.json"))[1])
        assert len(runs) == 12
        assert s.counts()["measurements"] == 12 * per_run


def pytest_benchmark_json(path: Path, commit: str, data: bool = True) -> Path:
    doc = {
        "machine_info": {"node": "ci-host", "python_version": "3.11.7",
                         "cpu": {"brand_raw": "Some CPU"}},
        "commit_info": {"id": commit, "time": "2026-11-20T10:00:00+00:00", "branch": "main",
                        "dirty": False},
        "benchmarks": [{
            "group": None, "name": "test_ingest[100]",
            "fullname": "selfbench/x.py::test_ingest[100]",
            "params": {"rows": 100}, "param": "100",
            "extra_info": {"rows_per_s": 12345.0, "note": "text is ignored"},
            "stats": {"min": 0.1, "max": 0.3, "mean": 0.2, "stddev": 0.05, "rounds": 3,
                      "median": 0.2, "q1": 0.15, "q3": 0.25, "iqr": 0.1,
                      **({"data": [0.1, 0.2, 0.3]} if data else {})},
        }],
        "datetime": "2026-11-20T10:05:00+00:00",
        "version": "5.2.3",
    }  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


def test_pytest_benchmark_json(tmp_path):
    path = pytest_benchmark_json(tmp_path / "pb.json", "a" * 40)
    with Store(tmp_path / "perf.duckdb") as store:
        report = ingest(store, [path])
        assert report.rows == 2
        (run,) = store.runs()
        assert run["source"] == "pytest-benchmark" and run["branch"] == "main"
        assert run["machine"] == "ci-host"
        rows = {r["metric"]: r for r in store.series(samples=True)}
        assert rows["time"]["benchmark"] == "selfbench/x.py::test_ingest"
        assert rows["time"]["samples"] == [0.1, 0.2, 0.3] and rows["time"]["unit"] == "s"
        assert json.loads(rows["time"]["params"]) == {"rows": 100}
        assert rows["rows_per_s"]["median"] == 12345.0 and rows["rows_per_s"]["unit"] == "rows/s"
        assert ingest(store, [path]).duplicate == [path]
    no_commit = json.loads(path.read_text())
    no_commit["commit_info"] = {}
    (tmp_path / "nc.json").write_text(json.dumps(no_commit))
    with pytest.raises(ValueError, match=r"commit_info\.id"):
        parse(tmp_path / "nc.json")


def test_export_parquet_and_read_only(quick_run, tmp_path):
    results = copy_results(quick_run, tmp_path / "results")
    path = tmp_path / "perf.duckdb"
    with Store(path) as store:
        ingest(store, [results], branch="main")
        n = store.counts()["measurements"]
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "export", "--store", str(path), "--out",
         str(tmp_path / "pq")], capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    import duckdb

    con = duckdb.connect()
    assert (
        con.execute(f"SELECT count(*) FROM '{tmp_path}/pq/measurements.parquet'").fetchone()[0] == n
    )
    for name in ("runs", "speedups", "dispatch_floors", "drift", "acceptances"):
        assert (tmp_path / "pq" / f"{name}.parquet").exists()
    with pytest.raises(FileNotFoundError, match="no results store"):
        Store(tmp_path / "missing.duckdb", read_only=True)


def test_store_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("RAGBENCH_STORE", str(tmp_path / "env.duckdb"))
    with Store() as store:
        assert store.path == tmp_path / "env.duckdb"
    assert (tmp_path / "env.duckdb").exists()


def test_acceptances_are_recorded(tmp_path):
    with Store(tmp_path / "perf.duckdb") as store:
        store.accept("c" * 40, "kernel.KernelLatency", "gpu_us", "backend=triton", "known", "me")
        store.accept("c" * 40, "kernel.KernelLatency", "gpu_us", "backend=triton", "again", "me")
        (row,) = store.acceptances("c" * 8)
        assert row["reason"] == "again" and row["accepted_by"] == "me"


def test_a_schema_1_store_is_migrated_and_keeps_its_rows(tmp_path):
    """A store written by ragbench's schema 1 (its store module from git) opens for writing
    as schema 2: every run and row kept, the new columns filled, its history main's."""
    import importlib.util

    old = tmp_path / "store_v1.py"
    old.write_text(subprocess.run(["git", "show", "83cd958:ragbench/store.py"], cwd=REPO,
                                  capture_output=True, text=True, check=True).stdout)  # fmt: skip
    spec = importlib.util.spec_from_file_location("store_v1", old)
    v1 = importlib.util.module_from_spec(spec)
    sys.modules["store_v1"] = v1  # dataclasses look their module up there
    spec.loader.exec_module(v1)
    path = tmp_path / "perf.duckdb"
    with v1.Store(path) as s:
        s.add_run(v1.Run("asv", "a" * 40, "m", 1.8e9, branch="main"),
                  [v1.Measurement("kernel.KernelLatency", "gpu_us", {"backend": "triton"}, "us",
                                  2.0, samples=[1.0, 2.0, 3.0])])  # fmt: skip
        s.accept("a" * 40, "kernel.KernelLatency", "gpu_us", "backend=triton", "r", "me")
    with pytest.raises(StoreError, match="schema 1: open it once for writing"):
        Store(path, read_only=True).runs()
    store = Store(path)  # a writer migrates
    (row,) = store.series(samples=True)
    assert row["status"] == "ok" and row["samples"] == [1.0, 2.0, 3.0]
    assert store.acceptances()[0]["pr"] is None and store.counts()["gates"] == 0
    assert Store(path, read_only=True).runs()[0]["commit_hash"] == "a" * 40
