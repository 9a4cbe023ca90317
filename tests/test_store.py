"""The store and ingest, on both backends (a DuckDB file, a DuckLake on a Postgres the tests
start): real suite results, pytest-benchmark JSON, bad files, idempotence, concurrent ingests,
a reader during a write, views, Parquet export, copies between the two, maintenance."""

from __future__ import annotations

import contextlib
import itertools
import json
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from conftest import ingest

from ragbench import synth
from ragbench.result_files import parse
from ragbench.store import Store, StoreError
from ragbench.suite_views import SUITE_VIEWS

REPO = Path(__file__).resolve().parent.parent


def copy_results(quick_run, dest: Path) -> Path:
    """The quick run's results directory (result file, fingerprint, benchmarks.json)."""
    results, _ = quick_run
    shutil.copytree(results, dest)
    return dest


def result_file(results: Path) -> Path:
    return next(p for p in results.glob("*/*.json") if p.name != "machine.json")


def test_ingest_real_suite_results(quick_run, tmp_path, store_spec):
    results = copy_results(quick_run, tmp_path / "results")
    data = json.loads(result_file(results).read_text())
    with Store(store_spec, views=SUITE_VIEWS) as store:
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


def test_ingest_twice_changes_nothing(quick_run, tmp_path, store_spec):
    results = copy_results(quick_run, tmp_path / "results")
    with Store(store_spec) as store:
        first = ingest(store, [results])
        counts = store.counts()
        second = ingest(store, [results, result_file(results)])
        assert store.counts() == counts
        assert second.rows == 0 and len(second.duplicate) == 1 and first.rows > 0


def test_corrupt_and_truncated_files_are_skipped_and_nothing_is_lost(quick_run, tmp_path,
                                                                     store_spec):  # fmt: skip
    results = copy_results(quick_run, tmp_path / "results")
    good = result_file(results)
    text = good.read_text()
    with Store(store_spec) as store:
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


def test_cli_reports_bad_files_and_exits_1(quick_run, tmp_path, store_spec):
    results = copy_results(quick_run, tmp_path / "results")
    (tmp_path / "truncated.json").write_text(result_file(results).read_text()[:100])
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "ingest", str(results), str(tmp_path / "truncated.json"),
         "--store", str(store_spec)],
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


def runs_of(results: Path, n: int, tag: str, dest: Path) -> Path:
    """``n`` runs of the quick run's result, as other environments (``tag-<i>``)."""
    out = fake_asv_results(results, dest, n)
    for i, p in enumerate(sorted(out.glob("*/*.json"))):
        if p.name != "machine.json":
            data = json.loads(p.read_text())
            data["env_name"] = f"{tag}-{i}"
            p.write_text(json.dumps(data))
    return out


def test_four_concurrent_ingests_lose_and_duplicate_nothing(quick_run, tmp_path, store_spec,
                                                           record_property):  # fmt: skip
    """Four processes ingest at once, each 6 runs of its own and the same 3 shared runs: the
    store ends with every run once (4 x 6 + 3) and every row of each. On a lake nothing
    serialises them but the guard row's conflicts (and the store is created at once by all
    four)."""
    results, _ = quick_run
    shared = runs_of(results, 3, "shared", tmp_path / "shared")
    dirs = [runs_of(results, 6, f"p{k}", tmp_path / f"p{k}") for k in range(4)]
    cmd = [sys.executable, "-m", "ragbench", "ingest", "--store", str(store_spec), "--branch",
           "main"]  # fmt: skip
    t0 = time.perf_counter()
    procs = [subprocess.Popen([*cmd, str(d), str(shared)], cwd=REPO, stderr=subprocess.PIPE,
                              text=True) for d in dirs]  # fmt: skip
    errors = [p.communicate(timeout=300)[1] for p in procs]
    took = time.perf_counter() - t0
    assert [p.returncode for p in procs] == [0] * 4, errors
    per_run = len(parse(next(p for p in shared.glob("*/*.json") if p.name != "machine.json"))[1])
    with Store(store_spec, read_only=True) as s:
        runs = s.runs()
        assert len(runs) == len({r["run_id"] for r in runs}) == 4 * 6 + 3
        assert s.counts()["measurements"] == (4 * 6 + 3) * per_run
    stored = sum(int(e.split(" file(s) stored")[0].rsplit(" ", 1)[-1]) for e in errors)
    assert stored == 4 * 6 + 3, errors  # each shared run stored by one process, skipped by 3
    kind = "lake" if isinstance(store_spec, str) else "file"
    record_property("measured", f"4 processes x 9 files ({per_run} rows each) into a {kind}: "
                                f"{took:.1f} s")  # fmt: skip


def test_a_reader_during_a_write_sees_whole_runs(quick_run, tmp_path, store_spec):
    """While a process ingests 20 runs, readers keep reading: every read succeeds and sees
    whole runs only (rows = runs x rows per run), never fewer than the read before."""
    results, _ = quick_run
    many = runs_of(results, 20, "w", tmp_path / "many")
    per_run = len(parse(next(p for p in many.glob("*/*.json") if p.name != "machine.json"))[1])
    Store(store_spec).close()
    writer = subprocess.Popen([sys.executable, "-m", "ragbench", "ingest", "--store",
                               str(store_spec), "--branch", "main", str(many)], cwd=REPO,
                              stderr=subprocess.PIPE, text=True)  # fmt: skip
    seen = []
    while writer.poll() is None or len(seen) < 2:
        counts = Store(store_spec, read_only=True).counts()
        assert counts["measurements"] == counts["runs"] * per_run, counts
        seen.append(counts["runs"])
    assert writer.wait() == 0, writer.stderr.read()
    assert seen == sorted(seen) and seen[-1] == 20, seen


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


def test_pytest_benchmark_json(tmp_path, store_spec):
    path = pytest_benchmark_json(tmp_path / "pb.json", "a" * 40)
    with Store(store_spec) as store:
        report = ingest(store, [path])
        assert report.rows == 2
        (run,) = store.runs()
        assert run["source"] == "pytest-benchmark" and run["branch"] == "main"
        assert run["machine"] == "ci-host"
        rows = {r["metric"]: r for r in store.series(samples=True)}
        assert rows["time"]["benchmark"] == "selfbench/x.py::test_ingest"
        assert rows["time"]["samples"] == [0.1, 0.2, 0.3] and rows["time"]["unit"] == "s"
        assert json.loads(rows["time"]["params"]) == {"param": "100"}  # pytest's own id
        assert rows["rows_per_s"]["median"] == 12345.0 and rows["rows_per_s"]["unit"] == "rows/s"
        assert ingest(store, [path]).duplicate == [path]
    no_commit = json.loads(path.read_text())
    no_commit["commit_info"] = {}
    (tmp_path / "nc.json").write_text(json.dumps(no_commit))
    with pytest.raises(ValueError, match=r"commit_info\.id"):
        parse(tmp_path / "nc.json")


def test_export_parquet_and_read_only(quick_run, tmp_path, store_spec):
    results = copy_results(quick_run, tmp_path / "results")
    path = store_spec
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
    from ragbench.store.schema import OURS

    assert sorted(p.stem for p in (tmp_path / "pq").glob("*.parquet")) == sorted(OURS)
    assert "alerts" in OURS and "alert_cells" in OURS  # left out before
    with pytest.raises(StoreError, match="no results store"):
        Store(tmp_path / "missing.duckdb", read_only=True)


PROGRESS_SETTING = """
import sys
from ragbench.store import Store
with Store(sys.argv[1]).writing() as s, s._connect(write=True) as con:
    print(con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0])
with Store(sys.argv[1], read_only=True)._connect() as con:
    print(con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0])
"""


def test_no_connection_draws_a_progress_bar(tmp_path, store_spec):
    """DuckDB draws a progress bar on stdout for a query past 2 s where it thinks a terminal is
    there (on by default under a terminal): on a loaded machine it broke a reader's JSON output
    (test_faults.py::test_two_writers_and_a_reader). Every connection, the file's and the
    lake's, reading and writing, has it off, under a terminal too."""
    import os
    import pty

    main, child = pty.openpty()
    out = subprocess.run([sys.executable, "-c", PROGRESS_SETTING, str(store_spec)], stdin=child,
                         stdout=child, stderr=subprocess.PIPE, cwd=REPO, timeout=300)  # fmt: skip
    os.close(child)
    text = os.read(main, 4096).decode()
    os.close(main)
    assert out.returncode == 0, out.stderr.decode()[-2000:]
    assert text.split() == ["False", "False"]


def test_a_command_that_reads_never_makes_a_store(tmp_path, store_spec, capsys):
    """``gate --stored --store results/perf.duckbd`` (a typo) made that 800 kB file, then said
    "the store has no run of head": every command that reads, and maintenance, is exit 2 with
    one line naming the store and what makes one, and nothing is made (a file, or a lake)."""
    from ragbench import cli

    store = str(store_spec)
    for args in (["gate", "--stored", "--base", "HEAD~1", "--head", "HEAD"], ["detect"],
                 ["export", "--out", str(tmp_path / "pq")], ["store", "info"],
                 ["store", "maintain"]):  # fmt: skip
        assert cli.main([*args, "--store", store]) == 2, args
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "no results store at" in err and store in err, err
        assert "ragbench ingest --store" in err
    assert not (tmp_path / "pq").exists()
    if isinstance(store_spec, Path):
        assert not store_spec.exists() and list(tmp_path.iterdir()) == []
    else:  # the lake's catalog was never made: a writer would make it now
        with pytest.raises(StoreError, match="no results store at"):
            Store(store_spec, read_only=True).counts()


def test_store_from_environment(tmp_path, monkeypatch, store_spec):
    monkeypatch.setenv("RAGBENCH_STORE", str(store_spec))
    with Store() as store:
        assert store.name == str(store_spec)
        assert store.counts()["runs"] == 0


def test_acceptances_are_recorded(tmp_path, store_spec):
    with Store(store_spec) as store:
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


def table_rows(store: Store) -> dict[str, list]:
    """Every row of every table (``ingested_at`` and the like included), sorted."""
    names = (
        "runs",
        "measurements",
        "acceptances",
        "gates",
        "change_point_series",
        "change_points",
        "alerts",
        "alert_cells",
        "gate_verdicts",
        "gate_verdict_cells",
    )
    with store._connect() as con:
        return {t: sorted(map(repr, con.execute(f"SELECT * FROM {t}").fetchall())) for t in names}


def test_a_schema_5_store_gains_the_gate_verdicts_and_a_copy_brings_them(tmp_path):
    """Schema 6: a schema-5 store (no ``gate_verdicts``, no ``gates.gate_id``) is refused to
    readers, and the next writer migrates it, its rows kept; a gate's recorded verdict and its
    cells come with a copy, once."""
    import duckdb

    from ragbench.gate import rerun

    path = tmp_path / "perf.duckdb"
    with Store(path) as s:
        s.record_gate(7, "c" * 40, "b" * 40, "ci", [{"cell": "x"}], "report")
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE gate_verdict_cells; DROP TABLE gate_verdicts; "
                "ALTER TABLE gates DROP COLUMN gate_id; "
                "UPDATE meta SET value = '5' WHERE key = 'schema_version'")  # fmt: skip
    con.close()
    with pytest.raises(StoreError, match="schema 5: open it once for writing"):
        Store(path, read_only=True).runs()
    store = Store(path)  # a writer migrates
    kept = store.gate(7, "c" * 40)
    assert kept["report"] == "report" and kept["gate_id"] is None
    doc = {"schema": 2, "base": "b" * 40, "head": "c" * 40, "machine": "ci",
           "verdict": "fail", "failures": [{"benchmark": "k.K", "metric": "gpu_us",
                                            "param_key": "backend=triton", "status": "regression",
                                            "change": 0.1, "words": "10.0% slower", "note": ""}],
           "settle": {"cells": [["k.K", "gpu_us", "backend=triton"]], "rounds": 2, "paired": [],
                      "processes": 1}, "mode": "quick", "rounds": 2, "processes": 0}  # fmt: skip
    gate_id = rerun.record(store, doc, source="gate")
    assert rerun.record(store, doc, source="gate") == gate_id  # the same document, kept once
    target = Store(tmp_path / "copy.duckdb")
    added, _ = target.copy_from(Store(path, read_only=True))
    assert added["gate_verdicts"] == added["gate_verdict_cells"] == 1
    assert not any(target.copy_from(Store(path, read_only=True))[0].values())
    assert table_rows(target) == table_rows(Store(path, read_only=True))
    assert rerun.planned(target.gate_verdict(gate_id=gate_id)).rounds == 2


def test_copy_file_to_lake_to_file_round_trips_every_row(quick_run, tmp_path, postgres):
    """``ragbench store copy``: a runner's file into a lake, the lake back into a new file;
    every row of every table the same (run ids, raw samples, labels, acceptances, gates, the
    gates' own verdicts), and a second copy adds nothing."""
    from ragbench.gate import rerun

    results = copy_results(quick_run, tmp_path / "results")
    first = tmp_path / "runner.duckdb"
    with Store(first) as s:
        ingest(s, [results], branch="main")
        ingest(s, [runs_of(quick_run[0], 2, "gate", tmp_path / "g")], branch="pr-7",
               label="gate:x:head:0")  # fmt: skip
        s.accept("c" * 40, "kernel.KernelLatency", "gpu_us", "backend=triton", "known", "me", pr=7)
        s.record_gate(7, "c" * 40, "b" * 40, "ci", [{"cell": "x"}], "report")
        rerun.record(s, {"schema": 2, "base": "b" * 40, "head": "c" * 40, "machine": "ci",
                          "verdict": "fail", "failures": [{
                              "benchmark": "k.K", "metric": "gpu_us", "param_key": "",
                              "status": "regression", "change": 0.1}]}, source="gate")  # fmt: skip
    lake, back = postgres.lake(tmp_path), tmp_path / "back.duckdb"

    def copy(a, b):
        out = subprocess.run([sys.executable, "-m", "ragbench", "store", "copy", str(a), str(b)],
                             capture_output=True, text=True, cwd=REPO)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout)

    added = copy(first, lake)
    assert added["runs"] == 3 and added["acceptances"] == added["gates"] == 1
    assert added["gate_verdicts"] == added["gate_verdict_cells"] == 1
    assert not any(copy(first, lake).values())
    copy(lake, back)
    expected = table_rows(Store(first, read_only=True))
    assert table_rows(Store(lake, read_only=True)) == expected
    assert table_rows(Store(back, read_only=True)) == expected
    assert all(
        expected[t] for t in ("runs", "measurements", "acceptances", "gates", "change_point_series")
    )  # 3 commits: no change point


def test_maintain_merges_a_lakes_small_files_and_keeps_every_row(quick_run, tmp_path, postgres):
    """Ten one-run ingests leave ten small files per table; ``ragbench store maintain``
    merges them (DuckLake's calls) and every row stays."""
    lake = postgres.lake(tmp_path)
    many = runs_of(quick_run[0], 10, "m", tmp_path / "many")
    store = Store(lake)
    for path in sorted(many.glob("*/*.json")):
        if path.name != "machine.json":
            ingest(store, [path], branch="main")
    before = table_rows(store)
    out = subprocess.run([sys.executable, "-m", "ragbench", "store", "maintain", "--store", lake],
                         capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert out.returncode == 0, out.stderr
    sizes = json.loads(out.stdout)
    assert sizes["files_after"] < sizes["files_before"], sizes
    assert table_rows(Store(lake, read_only=True)) == before
    bad = subprocess.run(
        [sys.executable, "-m", "ragbench", "store", "maintain", "--store", lake,
         "--keep-days", "0"],
        capture_output=True, text=True, cwd=REPO,
    )  # fmt: skip
    assert bad.returncode == 2 and "between a day and a century" in bad.stderr


def test_maintenance_beside_an_ingest_breaks_neither(quick_run, tmp_path, postgres):
    """``store maintain`` in a loop while a process ingests 20 runs: the ingest stores every
    run (files that maintenance replaces stay an hour for whoever still reads them)."""
    lake = postgres.lake(tmp_path)
    many = runs_of(quick_run[0], 20, "x", tmp_path / "many")
    store = Store(lake)
    writer = subprocess.Popen([sys.executable, "-m", "ragbench", "ingest", "--store", lake,
                               "--branch", "main", str(many)], cwd=REPO, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    rounds = 0
    while writer.poll() is None or rounds < 2:
        store.maintain()
        rounds += 1
    assert writer.wait() == 0, writer.stderr.read()
    assert store.counts()["runs"] == 20


@pytest.mark.parametrize("password", ["password=s3cret", "password='s3cret'",
                                      "password = s3cret"])  # fmt: skip
def test_a_lake_string_with_a_password_never_prints_it(postgres, tmp_path, password):
    lake = postgres.lake(tmp_path).replace("user=lake", f"user=lake {password}")
    assert "s3cret" not in Store(lake).name
    for bad in (lake.replace("dbname=", "dbname=missing_"),
                "ducklake:postgres:postgresql://lake:s3cret@127.0.0.1:1/nothing"):  # fmt: skip
        out = subprocess.run([sys.executable, "-m", "ragbench", "store", "info", "--store",
                              bad], capture_output=True, text=True, cwd=REPO)  # fmt: skip
        assert out.returncode == 2 and "s3cret" not in out.stderr + out.stdout, out.stderr


def test_a_reader_never_makes_a_lake_and_a_writer_that_cannot_says_so(tmp_path):
    """Read-only, a lake that does not exist is an error and stays absent (its catalog, a
    DuckDB file here, is not created); a data path that cannot be written fails the ingest at
    once with exit 2, not after the writers' ten minutes of retries."""
    catalog = tmp_path / "meta.ducklake"
    with pytest.raises(StoreError, match="no results store at"):
        Store(f"ducklake:{catalog}", read_only=True).counts()
    assert not catalog.exists()
    (tmp_path / "afile").write_text("")
    history = synth.write_history(tmp_path / "h", 1)
    t0 = time.perf_counter()
    out = subprocess.run(
        [sys.executable, "-m", "ragbench", "ingest", "--branch", "main", str(history), "--store",
         f"ducklake:{catalog} data_path={tmp_path / 'afile' / 'sub'}/"],
        capture_output=True, text=True, cwd=REPO, timeout=120,
    )  # fmt: skip
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    assert time.perf_counter() - t0 < 60


def test_a_lake_with_its_data_in_s3(quick_run, tmp_path, postgres, monkeypatch):
    """The data path an S3 prefix (moto's S3 server on localhost, reached as any S3-compatible
    store through $AWS_ENDPOINT_URL): ingest, read, copy out and maintain as on a directory,
    and the Parquet files are in the bucket."""
    import boto3
    from moto.server import ThreadedMotoServer

    from scripts.pgserver import free_port

    port = free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    try:
        for k, v in {"AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                     "AWS_REGION": "us-east-1",
                     "AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}"}.items():  # fmt: skip
            monkeypatch.setenv(k, v)
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket="perf")
        lake = postgres.lake(tmp_path).rsplit("data_path=", 1)[0] + "data_path=s3://perf/lake/"
        results = copy_results(quick_run, tmp_path / "results")
        out = subprocess.run([sys.executable, "-m", "ragbench", "ingest", "--store", lake,
                              "--branch", "main", str(results)], capture_output=True, text=True,
                             cwd=REPO)  # fmt: skip
        assert out.returncode == 0, out.stderr
        assert s3.list_objects_v2(Bucket="perf", Prefix="lake/")["KeyCount"] > 0
        store = Store(lake, read_only=True)
        assert len(store.runs()) == 1 and any(r["samples"] for r in store.series(samples=True))
        back = Store(tmp_path / "back.duckdb")
        assert back.copy_from(store)[0]["runs"] == 1
        assert table_rows(back) == table_rows(store)
        assert Store(lake).maintain()["files_after"] > 0
    finally:
        server.stop()


def test_a_store_file_another_process_is_creating_is_waited_for(tmp_path, monkeypatch):
    """DuckDB creates a file empty, then writes its header: a second process opening it in
    between was told "not a valid DuckDB database file" (a CI failure of the test above). A file
    shorter than a header is waited for; one that stays so, or any corrupt longer file, is
    unusable (exit 2 elsewhere), never taken for a new store; a file replaced by a whole
    store while DuckDB read it empty is tried again."""
    import threading

    from ragbench.store import backends

    made = tmp_path / "made.duckdb"
    Store(made).close()  # a whole store, to appear where an empty file was
    path = tmp_path / "perf.duckdb"
    path.write_bytes(b"")
    t0 = time.perf_counter()  # before the timer starts: the file is replaced >= 0.3 s after t0
    threading.Timer(0.3, lambda: made.replace(path)).start()
    with Store(path) as s:  # waits for the header, then opens the store the other one made
        assert s.runs() == []
    assert 0.3 <= time.perf_counter() - t0 < backends.CREATING_WAIT
    # the race CI found: DuckDB reads the empty file, the whole store replaces it, and then the
    # refusal is judged: by the file it read, not by the store now there (under the default
    # CREATING_WAIT, so that a slow first try is not what this part tests)
    Store(made).close()  # a whole store again, to replace the empty file
    raced = tmp_path / "raced.duckdb"
    raced.write_bytes(b"")
    connect = duckdb.connect

    def replaced_during_the_try(database, *args, **kwargs):
        try:
            return connect(database, *args, **kwargs)
        except duckdb.Error:
            if made.exists():
                made.replace(raced)
            raise

    monkeypatch.setattr(duckdb, "connect", replaced_during_the_try)
    with Store(raced) as s:
        assert s.runs() == []
    monkeypatch.setattr(duckdb, "connect", connect)
    monkeypatch.setattr(backends, "CREATING_WAIT", 0.2)
    stuck = tmp_path / "stuck.duckdb"
    stuck.write_bytes(b"")
    with pytest.raises(StoreError, match="not a usable DuckDB store"):
        Store(stuck)
    garbage = tmp_path / "garbage.duckdb"
    garbage.write_bytes(b"\x00" * backends.HEADER_BYTES)
    waits = []  # a file of a header's length fails at once: no wait, on a machine of any speed
    monkeypatch.setattr(backends.time, "sleep", waits.append)
    with pytest.raises(StoreError, match="not a usable DuckDB store"):
        Store(garbage)
    assert waits == []
    assert path.exists() and stuck.read_bytes() == b""


# --- readers never wait for a parse, a refused file or a large write (issue 34) -----------------


class WriteConnections:
    """``duckdb.connect`` watched: how many read-write connections to a file are open now, and
    how many were opened."""

    def __init__(self, monkeypatch):
        import duckdb

        self.open = self.opened = 0
        connect = duckdb.connect
        watch = self

        class Held:
            def __init__(self, con):
                self._con = con

            def close(self):
                watch.open -= 1
                self._con.close()

            def __getattr__(self, name):
                return getattr(self._con, name)

        def connecting(database=":memory:", read_only=False, **kw):
            con = connect(database, read_only=read_only, **kw)
            if read_only or database == ":memory:":
                return con
            watch.open += 1
            watch.opened += 1
            return Held(con)

        monkeypatch.setattr(duckdb, "connect", connecting)


def big_and_refused(dest: Path, cells: int) -> tuple[Path, Path]:
    """A results directory of one good file of ``cells`` cells and a synthetic history of 3
    files, and another of 3 large files each refused at its last cell."""
    from ragbench.synth import big_result

    big_result(dest / "good", cells)
    synth.write_history(dest / "good" / "history", 3)
    for i in range(3):
        big_result(dest / "refused", 2_000, index=i + 1, refuse=True)
    return dest / "good", dest / "refused"


def test_files_are_read_before_the_store_is_opened_and_refused_ones_never_open_it(
    tmp_path, monkeypatch
):
    """Reading and checking a file (a 100,000-cell one took 3 s here) never happens while the
    ingest holds the file for writing, whatever the files: a reader waits for writes only.
    Files that are all refused never open it at all."""
    import ragbench.result_files as ingest_module

    good, refused = big_and_refused(tmp_path, 3_000)
    path = tmp_path / "s.duckdb"
    store = Store(path)
    watch = WriteConnections(monkeypatch)
    held_while_read = []
    parse = ingest_module.parse

    def parsing(p):
        held_while_read.append(watch.open)
        return parse(p)

    monkeypatch.setattr(ingest_module, "parse", parsing)
    report = ingest(store, [refused])
    assert len(report.failed) == 3 and all("not a finite non-negative" in why
                                           for _, why in report.failed)  # fmt: skip
    assert watch.opened == 0, "an ingest of refused files opened the store for writing"
    report = ingest(store, [refused, good], branch="main")
    assert len(report.stored) == 4 and len(report.failed) == 3
    assert len(held_while_read) == 3 + 7 and not any(held_while_read), held_while_read
    assert watch.open == 0 and Store(path, read_only=True).counts()["runs"] == 4


def test_a_large_run_is_written_in_slices_each_its_own_connection(tmp_path, monkeypatch):
    """A run of more rows than ``SLICE_ROWS`` is written in transactions of at most that many;
    with no time to share a connection (``WRITE_SLICE``, ``WRITE_HOLD`` 0), each one opens and
    closes the file, so a reader waits for one slice at most. The run shows whole, and a second
    ingest of it stores nothing."""
    from ragbench import store as store_api
    from ragbench.store import backends, writes
    from ragbench.synth import big_result

    monkeypatch.setattr(writes, "SLICE_ROWS", 1_000)
    monkeypatch.setattr(backends, "WRITE_SLICE", 0.0)
    monkeypatch.setattr(backends, "WRITE_HOLD", 0.0)
    big_result(tmp_path / "big", 4_500)
    path = tmp_path / "s.duckdb"
    store = Store(path)
    sizes = []
    insert = store_api.Store._insert_rows

    def inserting(con, cols, start, stop):
        sizes.append(stop - start)
        insert(con, cols, start, stop)

    monkeypatch.setattr(store_api.Store, "_insert_rows", staticmethod(inserting))
    watch = WriteConnections(monkeypatch)
    report = ingest(store, [tmp_path / "big"], branch="main")
    n = report.rows
    assert report.stored and n > 4 * 1_000 and sizes == [1_000] * (n // 1_000) + [n % 1_000]
    assert watch.opened >= len(sizes) and watch.open == 0
    assert Store(path, read_only=True).counts() == {"runs": 1, "measurements": n,
                                                    "acceptances": 0, "gates": 0}  # fmt: skip
    assert ingest(store, [tmp_path / "big"], branch="main").duplicate


SLICED = """
import os, signal, sys
from ragbench import store as store_api
from ragbench.store import backends, writes
# 500 rows a transaction, and a connection each
writes.SLICE_ROWS, backends.WRITE_SLICE, backends.WRITE_HOLD = 500, 0.0, 0.0
die_at = int(os.environ.get("DIE_AT_SLICE", "0"))
insert, calls = store_api.Store._insert_rows, []
def inserting(con, cols, start, stop):
    calls.append(start)
    if len(calls) == die_at:
        os.kill(os.getpid(), signal.SIGKILL)
    insert(con, cols, start, stop)
store_api.Store._insert_rows = staticmethod(inserting)
from ragbench.cli import main
sys.exit(main(sys.argv[1:]))
"""


def sliced_ingest(store: Path, *paths: Path, die_at: int = 0, wait: bool = True):
    """``ragbench ingest`` in a process that writes a large run 500 rows a transaction, each
    with a connection of its own (and kills itself at slice ``die_at``)."""
    import os

    proc = subprocess.Popen([sys.executable, "-c", SLICED, "ingest", "--branch", "main",
                             "--store", str(store), *map(str, paths)], cwd=REPO,
                            stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "DIE_AT_SLICE": str(die_at)})  # fmt: skip
    if not wait:
        return proc
    proc.communicate(timeout=300)
    return proc


def raw_rows(path: Path) -> tuple[int, list]:
    """Every measurement row of a file store, stored or not, and its ``meta`` claims."""
    import duckdb

    con = duckdb.connect(str(path), read_only=True)
    try:
        ((n,),) = con.execute("SELECT count(*) FROM measurements").fetchall()
        return n, con.execute("SELECT key FROM meta WHERE key LIKE 'ingest:%'").fetchall()
    finally:
        con.close()


def test_a_reader_never_sees_half_a_sliced_run_and_two_writers_store_it_once(tmp_path):
    """Two processes ingest the same 6,000-cell run in slices of 500 (and a run of their own)
    while this one reads: every read sees whole runs; the shared run is stored once (the
    second writer waits for the first's claim, then finds it stored)."""
    from ragbench.synth import big_result

    shared, mine = tmp_path / "shared", [tmp_path / "a", tmp_path / "b"]
    big_result(shared, 6_000)
    for i, d in enumerate(mine):
        big_result(d, 1_200, index=i + 1)
    path = tmp_path / "s.duckdb"
    Store(path)
    writers = [sliced_ingest(path, shared, d, wait=False) for d in mine]
    seen = []
    while any(w.poll() is None for w in writers) or not seen:
        seen.append(Store(path, read_only=True).counts()["measurements"])
    errors = [w.communicate(timeout=300)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    with Store(path, read_only=True) as s:
        sizes = [len(s.measurements([r["run_id"]])) for r in s.runs()]
    assert len(sizes) == 3 and sum("1 already stored" in e for e in errors) == 1, errors
    whole = {sum(c) for k in range(4) for c in itertools.combinations(sizes, k)}
    assert set(seen) <= whole, f"a read saw half a run: {sorted(set(seen) - whole)}"
    assert raw_rows(path) == (sum(sizes), [])


def test_a_writer_killed_mid_run_leaves_nothing_seen_and_nothing_kept(tmp_path):
    """A writer killed after 3 of 12 slices: no reader sees its rows, ``store maintain``
    deletes them; killed again, the next ingest of the file takes its claim over and stores
    the run whole."""
    from ragbench.synth import big_result

    big_result(tmp_path / "big", 6_000)
    path = tmp_path / "s.duckdb"
    Store(path)
    assert sliced_ingest(path, tmp_path / "big", die_at=4).returncode == -9
    assert raw_rows(path)[0] == 1_500 and len(raw_rows(path)[1]) == 1
    assert Store(path, read_only=True).counts()["measurements"] == 0
    out = subprocess.run([sys.executable, "-m", "ragbench", "store", "maintain", "--store",
                          str(path)], capture_output=True, text=True, cwd=REPO)  # fmt: skip
    assert out.returncode == 0, out.stderr
    assert raw_rows(path) == (0, [])
    assert sliced_ingest(path, tmp_path / "big", die_at=6).returncode == -9
    done = sliced_ingest(path, tmp_path / "big")
    assert done.returncode == 0
    n = Store(path, read_only=True).counts()["measurements"]
    assert n > 5_000 and raw_rows(path) == (n, [])


def test_a_live_writers_claim_is_waited_for_and_a_dead_ones_taken_over(tmp_path, monkeypatch):
    """A run another live process claimed is not written beside it: the ingest waits, and
    after its lock timeout says who holds it; once that process is gone the claim is stale
    and the ingest stores the run."""
    import duckdb

    from ragbench import store as store_api
    from ragbench.result_files import parse
    from ragbench.store import writes
    from ragbench.synth import big_result

    monkeypatch.setattr(writes, "SLICE_ROWS", 1_000)
    path = big_result(tmp_path / "big", 3_000)
    store_path = tmp_path / "s.duckdb"
    Store(store_path)
    run = parse(path)[0]
    run.branch = "main"
    holder = subprocess.Popen(["sleep", "60"])
    con = duckdb.connect(str(store_path))
    con.execute("INSERT INTO meta VALUES (?, ?)", [writes.CLAIM + run.run_id,
                f"{socket.gethostname()} {holder.pid} t0k3n {time.time():.0f}"])  # fmt: skip
    con.close()
    try:
        with pytest.raises(store_api.StoreLocked, match=f"stayed claimed .*{holder.pid} t0k3n"):
            ingest(Store(store_path, lock_timeout=0.5), [path], branch="main")
    finally:
        holder.kill()
        holder.wait()
    report = ingest(Store(store_path), [path], branch="main")
    assert report.stored and raw_rows(store_path) == (report.rows, [])


def test_a_slice_the_store_refuses_refuses_the_file_and_leaves_no_row(tmp_path, monkeypatch):
    import duckdb

    from ragbench import store as store_api
    from ragbench.store import writes
    from ragbench.synth import big_result

    monkeypatch.setattr(writes, "SLICE_ROWS", 1_000)
    big_result(tmp_path / "big", 4_000)
    synth.write_history(tmp_path / "small", 2)
    insert, calls = store_api.Store._insert_rows, []

    def inserting(con, cols, start, stop):
        calls.append(start)
        if len(calls) == 3:
            raise duckdb.ConversionException("a value no column takes")
        insert(con, cols, start, stop)

    monkeypatch.setattr(store_api.Store, "_insert_rows", staticmethod(inserting))
    path = tmp_path / "s.duckdb"
    report = ingest(Store(path), [tmp_path / "big", tmp_path / "small"], branch="main")
    (why,) = [w for _, w in report.failed]
    assert "the store refused its data" in why and len(report.stored) == 2
    assert raw_rows(path) == (2 * 59, [])


# --- a catalog that stops answering (issue 34) --------------------------------------------------


def test_a_lakes_catalog_gets_timeouts_unless_the_string_sets_its_own(postgres, tmp_path):
    from ragbench.store.lake import Lake

    lake = Lake.parse("ducklake:postgres:dbname=perf host=db user=r data_path=/d/")
    assert "connect_timeout='10'" in lake.conninfo and "statement_timeout=60s" in lake.conninfo
    own = Lake.parse("ducklake:postgres:dbname=perf connect_timeout=3 options='-c "
                     "statement_timeout=5s'")  # fmt: skip
    assert own.conninfo == own.catalog and own.timeout == 3
    uri = Lake.parse("ducklake:postgres:postgresql://r@db:6543/perf?connect_timeout=4")
    assert uri.timeout == 4 and uri.port == 6543
    assert "options=-c%20statement_timeout" in uri.conninfo
    for given, expected in (("", ("1min", "30s")), (" options='-c statement_timeout=5s'",
                                                    ("5s", "0"))):  # fmt: skip
        spec = postgres.lake(tmp_path).replace(" data_path=", f"{given} data_path=")
        with Store(spec)._connect() as con:
            got = con.execute("SELECT * FROM postgres_query('__ducklake_metadata_lake', 'SELECT "
                              "current_setting(''statement_timeout'') s, "
                              "current_setting(''lock_timeout'') l')").fetchall()  # fmt: skip
        assert got == [expected], given


@pytest.fixture
def frozen_postgres():
    """A PostgreSQL server of this test alone, to stop (``freeze``): thawed and stopped after."""
    import os
    import signal
    import tempfile

    from scripts.pgserver import Postgres

    root = Path(tempfile.mkdtemp(prefix="ragbench-pg-"))
    server = Postgres(root).start()
    frozen = []

    def freeze(everything: bool = False) -> None:
        """SIGSTOP the postmaster (new connections hang), or every process of the server."""
        postmaster = int((server.data / "postmaster.pid").read_text().split()[0])
        pids = [postmaster]
        if everything:
            for stat in Path("/proc").glob("[0-9]*/stat"):
                try:
                    if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == postmaster:
                        pids.append(int(stat.parent.name))
                except (OSError, IndexError, ValueError):
                    continue
        for pid in pids:
            os.kill(pid, signal.SIGSTOP)
            frozen.append(pid)

    server.freeze = freeze
    yield server
    for pid in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGCONT)
    server.stop()
    shutil.rmtree(root, ignore_errors=True)


def assert_unanswered(out_or_err: str, code: int, took: float, record_property) -> None:
    """Exit 2 with one line naming the catalog and what to check, well within the bound: the
    default connect_timeout is 10 s and a stopped server fails an operation after at most two
    of them (the operation's own wait, then the watch's question) plus the process's start,
    ~25 s on a loaded 2-core machine; 60 s leaves that margin twice over."""
    last = out_or_err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in out_or_err, out_or_err[-3000:]
    assert "did not answer within 10 s" in last and "pg_isready" in last, out_or_err[-3000:]
    assert took < 60, took
    record_property("measured", f"exit 2 after {took:.1f} s")


def test_a_catalog_whose_postmaster_stopped_is_exit_2_in_seconds(frozen_postgres, tmp_path,
                                                                  record_property):  # fmt: skip
    """``store info`` and ``ingest`` against a lake whose PostgreSQL postmaster is stopped
    (SIGSTOP: connections are accepted and never answered) hung for ever; now libpq's
    connect_timeout ends them, with one line saying what to check."""
    lake = frozen_postgres.lake(tmp_path)
    ingest(Store(lake), [synth.write_history(tmp_path / "h", 2)], branch="main")
    frozen_postgres.freeze()
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen([sys.executable, "-m", "ragbench", *args, "--store", lake], cwd=REPO,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for args in (["store", "info"], ["ingest", str(tmp_path / "h")])
    ]  # fmt: skip
    for p in procs:
        out = p.communicate(timeout=120)[0]
        assert_unanswered(out, p.returncode, time.perf_counter() - t0, record_property)


def test_a_catalog_that_freezes_mid_ingest_is_exit_2_in_seconds(frozen_postgres, tmp_path,
                                                                 record_property):  # fmt: skip
    """Every process of the catalog's server stopped while an ingest writes: the server
    enforces no statement timeout then, and the ingest waited on its connection for ever. Now
    the watch asks the server, hears nothing, and cuts the connection: exit 2, one line."""
    lake = frozen_postgres.lake(tmp_path)
    Store(lake)
    history = synth.write_history(tmp_path / "h", 400)
    writer = subprocess.Popen([sys.executable, "-m", "ragbench", "ingest", "--store", lake,
                               str(history)], cwd=REPO, stderr=subprocess.PIPE,
                              text=True)  # fmt: skip
    first = writer.stderr.readline()  # the first progress line: it is writing
    assert first.startswith("["), first
    frozen_postgres.freeze(everything=True)
    t0 = time.perf_counter()
    err = writer.communicate(timeout=120)[1]
    assert_unanswered(err, writer.returncode, time.perf_counter() - t0, record_property)


def test_a_new_file_store_is_made_aside_and_linked_whole(tmp_path, monkeypatch):
    """DuckDB truncates a file it opens to create; two processes creating one store at once
    could leave a file without a header (four concurrent ingests all failed on CI). DuckDB is
    never asked to open the store's path before it exists; a store made aside meanwhile by
    another process is used as it is."""
    import duckdb

    path = tmp_path / "perf.duckdb"
    opened = []
    connect = duckdb.connect

    def watching(database, *args, **kwargs):
        opened.append((Path(database).name, Path(database).exists()))
        return connect(database, *args, **kwargs)

    monkeypatch.setattr(duckdb, "connect", watching)
    with Store(path) as store:
        assert store.counts()["runs"] == 0
    assert (path.name, False) not in opened and (path.name, True) in opened
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # nothing left aside
    second = tmp_path / "second.duckdb"

    def beaten(src, dst):  # another process links its own file in first
        connect(str(dst)).close()
        raise FileExistsError(dst)

    monkeypatch.setattr("os.link", beaten)
    with Store(second) as store:
        assert store.counts()["runs"] == 0  # its file, given the schema
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, second.name]


def test_a_writer_keeps_the_file_until_a_process_waits_for_it(tmp_path, monkeypatch):
    """Between transactions an ingest closes the file (a checkpoint each time) only once a
    process waits for it, which that process says by touching ``waiting_marker``; with nobody
    waiting, after ``WRITE_HOLD``."""
    from ragbench import store as store_api
    from ragbench.store import backends

    path = tmp_path / "s.duckdb"
    writer = Store(path)
    monkeypatch.setattr(backends, "WRITE_SLICE", 0.0)
    monkeypatch.setattr(backends, "WRITE_HOLD", 3600.0)
    with writer.writing():
        writer._held()
        writer.yield_slice()
        assert writer._writer is not None  # nobody waits: kept
    holder = (f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', "
              "flush=True); time.sleep(60)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", holder], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "held"
        assert not writer.backend.waiting_marker.exists()
        with pytest.raises(
            store_api.StoreLocked
        ):  # the holder never lets go; the reader said it waits
            Store(path, read_only=True, lock_timeout=1.0)._open(write=False)
        assert writer.backend.waiting_marker.exists()
    finally:
        proc.kill()
        proc.wait()
    with writer.writing():
        writer._held()
        writer.yield_slice()
        assert writer._writer is None and not writer.backend.waiting_marker.exists()  # let go
    writer.backend.waiting_marker.touch()  # a process waited through the writer's last transaction
    with writer.writing():
        writer._held()
    assert not writer.backend.waiting_marker.exists()  # its end lets go, and leaves nothing behind


def test_a_writer_that_lets_go_stays_out_until_the_waiting_reader_is_in(tmp_path, monkeypatch):
    """Between transactions a writer that closed the file for a waiting reader opens it again
    only once that reader is in (it removes ``waiting_marker``), however late the reader's next
    try comes: reopening after a fixed pause won the file back from a reader not scheduled in
    time (reads of 1-2 s at a load of 8)."""
    from ragbench.store import backends

    path = tmp_path / "s.duckdb"
    writer = Store(path)
    monkeypatch.setattr(backends, "WRITE_SLICE", 0.0)
    monkeypatch.setattr(backends, "HAND_OVER", 120.0)  # a busy machine: the reader comes in time
    # A reader that tries every 0.5 s, far slower than the writer's pause: holds the file once in.
    reader = ("import sys, time; from ragbench.store import Store, backends; "
              "backends.LOCK_POLL = 0.5; "
              f"s = Store({str(path)!r}, read_only=True); c = s._open(write=False); "
              "print('in', flush=True); sys.stdin.read()")  # fmt: skip
    with writer.writing():
        writer._held()
        proc = subprocess.Popen([sys.executable, "-c", reader], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, text=True)  # fmt: skip
        try:
            while not writer.backend.waiting_marker.exists():  # the reader found the file locked
                assert proc.poll() is None
                time.sleep(0.01)
            writer.yield_slice()
            assert writer._writer is None
            with pytest.raises(duckdb.IOException, match="lock"):  # the reader has it now
                duckdb.connect(str(path))
            assert proc.stdout.readline().strip() == "in"
            assert not writer.backend.waiting_marker.exists()
        finally:
            proc.communicate("")


def test_change_points_are_written_a_slice_of_series_at_a_time(tmp_path, monkeypatch):
    """An ingest's change points go in transactions of ``SLICE_ROWS`` series, readers let in
    between, each series' state with its points: what is stored is what one transaction
    stored (one for 100,000 new series held the file 9 s against a reader)."""
    from ragbench.store import writes

    store = Store(tmp_path / "s.duckdb")
    ingest(store, [synth.write_history(tmp_path / "h", 12, seed=3)], branch="main")

    def tables():
        with store._connect() as con:
            return [con.execute(f"SELECT * FROM {t} ORDER BY ALL").fetchall()
                    for t in ("change_point_series", "change_points")]  # fmt: skip

    stored = tables()
    assert stored[1], "the synthetic history has change points"
    with store._connect() as con:
        states = [dict(zip([d[0] for d in con.description], r, strict=True), window_from=0)
                  for r in con.execute("SELECT * FROM change_point_series").fetchall()]  # fmt: skip
        found = [dict(zip([d[0] for d in con.description], r, strict=True))
                 for r in con.execute("SELECT * FROM change_points").fetchall()]  # fmt: skip
    writes_seen = []
    monkeypatch.setattr(writes, "SLICE_ROWS", 7)
    write = store._write
    monkeypatch.setattr(store, "_write", lambda work: writes_seen.append(1) or write(work))
    store.save_change_points(states, found)
    assert len(writes_seen) == -(-len(states) // 7) > 1
    assert tables() == stored
