"""Environments and cell identity as asv and pytest-benchmark define them (issue 35, items 3
and 4): asv's env_name and pytest-benchmark's Python and CPU are part of a series' key, the
stored gate compares like with like, ``[machines]`` names hosted runners, cells keep their
identity across runs, and a change point names asv's number changing as its cause."""

from __future__ import annotations

import hashlib
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO

from ragbench import asv_results, synth
from ragbench import result_files as ingest
from ragbench.history import series as history
from ragbench.policies import load_policies
from ragbench.store import ENV_FIELDS, Store

COLUMNS = ["result", "params", "version", "started_at", "duration", "stats_ci_99_a",
           "stats_ci_99_b", "stats_q_25", "stats_q_75", "stats_number", "stats_repeat",
           "samples", "profile"]  # fmt: skip
BENCH = "bench.Sort.time_sort"
T0 = 1.77e9
LATENCY = '[[policy]]\nmatch = "*"\nkind = "latency"\nthreshold = 0.05\n'


def ragbench(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "ragbench", *map(str, args)], cwd=REPO,
                          capture_output=True, text=True, timeout=600)  # fmt: skip


def sha(i: int) -> str:
    return hashlib.sha1(str(i).encode()).hexdigest()


def asv_file(results: Path, commit: str, env: str, value: float, *, t: float,
             number: int = 100, axes: list | None = None, fingerprint: dict | None = None,
             ) -> Path:  # fmt: skip
    """An asv 0.5+ result file of one benchmark, as asv writes it (Django's layout)."""
    axes = axes if axes is not None else [["'a'", "'b'"]]
    cells = math.prod(len(a) for a in axes)
    samples = [[value * (1 + 0.001 * k) for k in range(-2, 3)] for _ in range(cells)]
    row = [[value] * cells, axes, "1", int(t * 1e3), 1.0, None, None, None, None,
           [number] * cells, [5] * cells, samples, None]  # fmt: skip
    (results / "m").mkdir(parents=True, exist_ok=True)
    names = [f"p{i}" for i in range(len(axes))]
    (results / "benchmarks.json").write_text(json.dumps({BENCH: {
        "name": BENCH, "param_names": names, "params": axes, "unit": "seconds", "version": "1",
    }, "version": 2}))  # fmt: skip
    data = {"commit_hash": commit, "env_name": env, "date": int(t * 1e3),
            "params": {"machine": "m", "python": env[-4:]}, "python": env[-4:],
            "requirements": {}, "env_vars": {}, "result_columns": COLUMNS,
            "results": {BENCH: row}, "durations": {}, "version": 2}  # fmt: skip
    path = results / "m" / f"{commit[:8]}-{env}.json"
    path.write_text(json.dumps(data))
    if fingerprint is not None:
        path.with_suffix(".fingerprint").write_text(json.dumps(fingerprint))
    return path


def two_pythons(results: Path, commits: int = 8) -> None:
    """Each commit measured under py3.12 and py3.13, 19% apart (Django's figures), steady."""
    for i in range(commits):
        asv_file(results, sha(i), "conda-py3.12", 1.0, t=T0 + 3600 * i)
        asv_file(results, sha(i), "conda-py3.13", 1.19, t=T0 + 3600 * i + 60)


def test_asv_environments_are_series_of_their_own(tmp_path):
    """Two environments of one cell are two series: before, they had one env_key, each
    commit's point was the median of both (1.095), and the gate pooled their samples."""
    two_pythons(tmp_path / "r")
    store = Store(tmp_path / "s.duckdb")
    assert not ingest.ingest(store, [tmp_path / "r"], branch="main").failed
    runs = store.runs(machine="m")
    assert {r["environment"] for r in runs} == {"conda-py3.12", "conda-py3.13"}
    assert len({r["env_key"] for r in runs}) == 2
    policies = load_policies(_policies(tmp_path))
    reports = history.histories(store.series(machine="m"), policies)
    assert len(reports) == 2 * 2  # two cells, two environments each
    by_env = {(r.key[2], r.environment): {p.value for p in r.points} for r in reports}
    assert by_env[("p0=a", "conda-py3.12")] == {1.0}
    assert by_env[("p0=a", "conda-py3.13")] == {1.19}
    assert all(len(r.points) == 8 and not r.change_points for r in reports)


def stored_gate(db: Path, machine: str, tmp_path: Path) -> tuple:
    """``ragbench gate --stored`` of commit 0 against commit 1 on ``machine``: its arguments."""
    return ("gate", "--stored", "--store", db, "--machine", machine, "--base", sha(0),
            "--head", sha(1), "--paired-processes", "0", "--no-drift", "--policies",
            _policies(tmp_path))  # fmt: skip


def _policies(tmp_path: Path, extra: str = "") -> Path:
    path = tmp_path / "policies.toml"
    path.write_text(LATENCY + extra)
    return path


def test_the_stored_gate_refuses_two_environments_and_says_how(tmp_path):
    """Base and head each ran under two Pythons: the gate refuses to pool them, in one line
    with the command that compares one environment; --environment compares that one,
    --across-environments pools them and the report says the Pythons differ."""
    two_pythons(tmp_path / "r", commits=2)
    db = tmp_path / "s.duckdb"
    ingest.ingest(Store(db), [tmp_path / "r"], branch="main")
    gate = stored_gate(db, "m", tmp_path)
    out = ragbench(*gate)
    assert out.returncode == 2 and "Traceback" not in out.stderr, out.stderr
    line = out.stderr.strip().splitlines()[-1]
    assert "different environments are not compared" in line
    assert "--environment conda-py3.13" in line and "--across-environments" in line
    one = ragbench(*gate, "--environment", "conda-py3.12")
    assert one.returncode in (0, 1) and "Traceback" not in one.stderr, one.stderr  # 5 samples
    assert "1 base run(s), 1 head run(s)" in one.stdout
    pooled = ragbench(*gate, "--across-environments")
    assert pooled.returncode in (0, 1), pooled.stderr
    assert "2 base run(s), 2 head run(s)" in pooled.stdout


def pb_json(path: Path, commit: str, *, node: str, python: str, address: str, t: str,
            cpu: str = "AMD EPYC 7763 64-Core Processor") -> Path:  # fmt: skip
    """pytest-benchmark JSON as its ``--benchmark-json`` writes it: a parametrized benchmark
    whose params hold an object (pytest-benchmark writes its repr, memory address and all)."""
    benchmarks = []
    for n in (3, 30):
        data = [0.001 * n * (1 + 0.01 * k) for k in range(-3, 4)]
        benchmarks.append({
            "group": None, "name": f"test_sort[obj0-{n}]",
            "fullname": f"tests/test_perf.py::test_sort[obj0-{n}]",
            "params": {"obj": f"<perf.Sorter object at {address}>", "n": n},
            "param": f"obj0-{n}", "extra_info": {},
            "options": {"disable_gc": False, "timer": "perf_counter", "min_rounds": 5,
                        "max_time": 1.0, "min_time": 5e-06, "warmup": False},
            "stats": {"min": min(data), "max": max(data), "mean": sum(data) / 7,
                      "stddev": 0.0, "rounds": 7, "median": sorted(data)[3],
                      "iqr": data[5] - data[1], "q1": data[1], "q3": data[5],
                      "iqr_outliers": 0, "stddev_outliers": 0, "outliers": "0;0",
                      "ld15iqr": min(data), "hd15iqr": max(data), "ops": 1 / data[3],
                      "total": sum(data), "data": data, "iterations": 1},
        })  # fmt: skip
    doc = {
        "machine_info": {"node": node, "processor": "x86_64", "machine": "x86_64",
                         "python_compiler": "GCC 11.4.0", "python_implementation": "CPython",
                         "python_implementation_version": python, "python_version": python,
                         "python_build": ["main", "Jun 11 2024"], "release": "6.5.0-1021-azure",
                         "system": "Linux", "cpu": {"python_version": python, "arch": "X86_64",
                                                    "bits": 64, "count": 4, "brand_raw": cpu}},
        "commit_info": {"id": commit, "time": "2026-11-20T10:00:00+00:00",
                        "author_time": "2026-11-20T10:00:00+00:00", "dirty": False,
                        "project": "perf", "branch": "main"},
        "benchmarks": benchmarks, "datetime": t, "version": "4.0.0",
    }  # fmt: skip
    path.write_text(json.dumps(doc))
    return path


def test_pytest_benchmark_cells_keep_their_identity_across_runs(tmp_path):
    """Two consecutive CI runs of one benchmark whose params hold an object: the same cells
    (pytest-benchmark's ``param``), so the gate finds nothing missing; before, each run's
    memory address made new cells and the gate failed with every cell missing on head."""
    pb_json(tmp_path / "a.json", sha(0), node="fv-az101-1", python="3.10.12",
            address="0x7f3a2c1d5e50", t="2026-11-20T10:05:00+00:00")  # fmt: skip
    pb_json(tmp_path / "b.json", sha(1), node="fv-az202-7", python="3.10.14",
            address="0x7f9b11aa0c10", t="2026-11-20T11:05:00+00:00")  # fmt: skip
    pol = _policies(tmp_path, '[machines]\n"fv-az*" = "github-ubuntu"\n')
    db = tmp_path / "s.duckdb"
    out = ragbench("ingest", tmp_path / "a.json", tmp_path / "b.json", "--store", db,
                   "--policies", pol)  # fmt: skip
    assert out.returncode == 0, out.stderr
    store = Store(db, read_only=True)
    runs = store.runs()
    assert {r["machine"] for r in runs} == {"github-ubuntu"}  # [machines]: one machine
    assert {r["runner"] for r in runs} == {"fv-az101-1", "fv-az202-7"}
    # a patch release of the image's Python is no new environment
    assert {r["environment"] for r in runs} == {"python 3.10, AMD EPYC 7763 64-Core Processor"}
    keys = {r["param_key"] for r in store.series(machine="github-ubuntu")}
    assert keys == {"param=obj0-3", "param=obj0-30"}
    gate = ragbench("gate", "--stored", "--store", db, "--machine", "github-ubuntu", "--base",
                    sha(0), "--head", sha(1), "--paired-processes", "0", "--no-drift",
                    "--policies", pol)  # fmt: skip
    assert gate.returncode in (0, 1) and "Traceback" not in gate.stderr, gate.stderr
    assert "| missing on head (base has a value: NaN, skipped or gone) | 0 |" in gate.stdout
    # the report says the runs came from two runners that [machines] made one
    assert "Base ran on runner fv-az101-1, head on fv-az202-7." in gate.stdout
    # the runner's own name identifies the run: ingesting it again without the mapping
    again = ingest.ingest(Store(db), [tmp_path / "a.json"])
    assert again.duplicate and not again.stored


def test_the_gate_refuses_python_38_against_310_and_says_so(tmp_path):
    """pytest-benchmark runs of two Pythons on one machine: refused, one line naming both
    and the override; with --across-environments the report names the two Pythons."""
    pb_json(tmp_path / "a.json", sha(0), node="ci", python="3.8.18", address="0x1",
            t="2026-11-20T10:05:00+00:00")  # fmt: skip
    pb_json(tmp_path / "b.json", sha(1), node="ci", python="3.10.12", address="0x2",
            t="2026-11-20T11:05:00+00:00")  # fmt: skip
    db = tmp_path / "s.duckdb"
    ingest.ingest(Store(db), [tmp_path / "a.json", tmp_path / "b.json"])
    gate = stored_gate(db, "ci", tmp_path)
    out = ragbench(*gate)
    assert out.returncode == 2, out.stdout + out.stderr
    assert "base ran in python 3.8, AMD EPYC" in out.stderr
    assert "no environment in common" in out.stderr and "--across-environments" in out.stderr
    out = ragbench(*gate, "--across-environments")
    assert out.returncode in (0, 1) and "Traceback" not in out.stderr, out.stderr
    assert "Base ran on Python 3.8.18, head on 3.10.12." in out.stdout


def test_asv_cells_are_keyed_by_the_values_as_asv_writes_them(tmp_path):
    """asv writes each parameter value's repr. A tuple stays as written (before, it was read
    into a tuple and the file refused: not a flat parameter); '1' and 1 are two cells (before:
    'the same cell twice', refused); this suite's plain values read as before ('a' -> a)."""
    r = tmp_path / "r"
    asv_file(r, sha(0), "e", 1.0, t=T0, axes=[["(1, 2)", "(3, 4)"]])
    _, rows = ingest.parse(next((r / "m").glob("*.json")))
    assert [m.params for m in rows] == [{"p0": "(1, 2)"}, {"p0": "(3, 4)"}]
    asv_file(r, sha(1), "e", 1.0, t=T0, axes=[["'1'", "1"], ["None", "'x'"]])
    _, rows = ingest.parse(r / "m" / f"{sha(1)[:8]}-e.json")
    assert len({m.params["p0"] for m in rows}) == 2  # asv's texts kept: '1' and 1
    assert {m.params["p1"] for m in rows} == {None, "x"}
    assert asv_results.param_values(["'triton'", "64", "1.5", "True"]) == ["triton", 64, 1.5, True]
    assert asv_results.param_values(["<function f at 0x7f>"]) == ["<function f at 0x7f>"]


def test_this_suites_runs_keep_their_env_keys(tmp_path):
    """A run with this suite's fingerprint keeps the env_key it always had (the hash of the
    fingerprint's ENV_FIELDS), and no environment of another harness's: one series across a
    torch upgrade, whatever asv's env_name."""
    fp = {"gpu": "G", "driver": "1", "cuda": "13.0", "torch": "2.10.0", "triton": "3.6.0",
          "python": "3.12.3", "mode": "quick", "harness_version": 1}  # fmt: skip
    path = asv_file(tmp_path / "r", sha(0), "existing-py_x", 1.0, t=T0, fingerprint=fp)
    run, _ = ingest.parse(path)
    old = json.dumps({k: fp.get(k) for k in ENV_FIELDS}, sort_keys=True)
    assert run.environment is None
    assert run.env_key == hashlib.sha256(old.encode()).hexdigest()[:12]


def test_an_older_store_keeps_its_series(tmp_path):
    """A schema-2 store (its foreign runs all under one env_key, no environment column) is
    migrated on its first write: this suite's runs keep their env_key, another harness's get
    their environment's, and a new run of the same environment joins its series."""
    synth.write_history(tmp_path / "own", 2)
    two_pythons(tmp_path / "r", commits=2)
    pb_json(tmp_path / "pb.json", sha(5), node="ci", python="3.10.12", address="0x1",
            t="2026-11-20T10:05:00+00:00")  # fmt: skip
    db = tmp_path / "s.duckdb"
    store = Store(db)
    ingest.ingest(store, [tmp_path / "own", tmp_path / "r", tmp_path / "pb.json"], branch="main")
    now = {r["run_id"]: r["env_key"] for r in store.runs(any_branch=True)}
    _downgrade(db)
    import duckdb

    with duckdb.connect(str(db), read_only=True) as con:
        assert (
            len(
                {
                    k
                    for (k,) in con.execute(
                        "SELECT env_key FROM runs WHERE source = 'asv' "
                        "AND fingerprint::VARCHAR = '{}'"
                    ).fetchall()
                }
            )
            == 1
        )
    store = Store(db)  # a writer migrates it
    assert {r["run_id"]: r["env_key"] for r in store.runs(any_branch=True)} == now
    runs = store.runs(any_branch=True)
    assert {r["runner"] for r in runs} == {r["machine"] for r in runs}
    asv_file(tmp_path / "new", sha(9), "conda-py3.13", 1.19, t=T0 + 99_000)
    ingest.ingest(store, [tmp_path / "new"], branch="main")
    policies = load_policies(_policies(tmp_path))
    reports = history.histories(store.series(machine="m"), policies)
    py313 = [r for r in reports if r.environment == "conda-py3.13"]
    assert py313 and all(len(r.points) == 3 for r in py313)


def _downgrade(db: Path) -> None:
    """The store as schema 2 left it: no environment, runner or asv number/repeat, and the
    env_key schema 2 gave every run (the hash of the fingerprint's ENV_FIELDS)."""
    import duckdb

    from ragbench.store import env_key

    with duckdb.connect(str(db)) as con:
        for view in ("series", "speedups", "dispatch_floors", "drift"):
            con.execute(f"DROP VIEW {view}")
        for fp, run_id in con.execute("SELECT fingerprint, run_id FROM runs").fetchall():
            con.execute("UPDATE runs SET env_key = ? WHERE run_id = ?",
                        [env_key(json.loads(fp)), run_id])  # fmt: skip
        for table, column in (("runs", "environment"), ("runs", "runner"),
                              ("measurements", "stats_number"),
                              ("measurements", "stats_repeat")):  # fmt: skip
            con.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
        con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")


def test_a_change_point_names_asv_number_as_its_cause(tmp_path):
    """asv's number went 100 -> 10 where the series moved: the cause says so, not 'code'."""
    for i in range(12):
        slow = i >= 6
        asv_file(tmp_path / "r", sha(i), "conda-py3.12", 1.3 if slow else 1.0,
                 t=T0 + 3600 * i, number=10 if slow else 100)  # fmt: skip
    store = Store(tmp_path / "s.duckdb")
    ingest.ingest(store, [tmp_path / "r"], branch="main")
    rows = store.series(machine="m")
    assert {r["stats_number"] for r in rows} == {100, 10}
    reports = history.histories(rows, load_policies(_policies(tmp_path)))
    assert all(r.change_points == [6] for r in reports)
    assert {r.describe_change(6) for r in reports} == {
        "measurement setting changed: asv number 100 -> 10"
    }
    a = history.Point("a", None, 1.0, "k", {}, {"number": 420, "repeat": 10})
    b = history.Point("b", None, 1.0, "k", {}, {"number": 412, "repeat": 10})
    assert history.change_cause(a, b) == "code"  # asv's own calibration jitter: no cause
    # calibration stops at one call: one call longer than the other side's sample is the code
    # (kedro's asv results: number 39 -> 1, 0.28 -> 98 ms a call); a shorter one is not
    # (django's: number 89287 -> 1 and 130x slower, a sample 1/600 of the one before)
    cases = (((39, 2.76e-4), (1, 9.85e-2), "code"), ((1, 9.85e-2), (39, 2.76e-4), "code"),
             ((89287, 1e-7), (1, 1.3e-5), "asv number 89287 -> 1"))  # fmt: skip
    for before, after, cause in cases:
        a = history.Point("a", None, before[1], "k", {}, {"number": before[0], "repeat": 10})
        b = history.Point("b", None, after[1], "k", {}, {"number": after[0], "repeat": 10})
        assert history.change_cause(a, b).endswith(cause), (before, after)


def test_detect_names_the_machines_that_exist(tmp_path):
    """A machine with no runs: the error lists the machines that have some (before: the
    branches, which said nothing about the machine mistyped)."""
    two_pythons(tmp_path / "r", commits=1)
    db = tmp_path / "s.duckdb"
    ingest.ingest(Store(db), [tmp_path / "r"], branch="main")
    out = ragbench("detect", "--store", db, "--machine", "n")
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert "its machines on that branch: m: pass --machine m" in out.stderr


@pytest.mark.parametrize("bad", ['[machines]\n"x*" = 3\n', 'machines = "x"\n'])
def test_a_bad_machines_table_is_refused(tmp_path, bad):
    path = tmp_path / "p.toml"
    path.write_text(bad)
    with pytest.raises(ValueError, match=r"\[machines\] maps runner-name patterns"):
        load_policies(path)
