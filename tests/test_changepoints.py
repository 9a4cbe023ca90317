"""Stored change points (ragbench/history/edivisive.py): E-Divisive over fixed windows, updated
with what is new, equal to computing them all again; detection and the dashboard read them."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from ragbench import cli, stats, synth
from ragbench.history import detection
from ragbench.history import edivisive as changepoints
from ragbench.history import series as history
from ragbench.policies import load_policies
from ragbench.result_files import ingest
from ragbench.store import Store

REPO = Path(__file__).resolve().parent.parent

POLICIES = load_policies()
SETTINGS = changepoints.Settings.of(POLICIES)


def e_divisive_one_by_one(values, *, alpha=0.01, permutations=199, min_size=3, seed=0):
    """E-Divisive as ragbench had it before the shuffles were tested many at once: a 2-D
    prefix sum of the distance matrix, one shuffle at a time."""
    x = np.asarray(values, float)
    if len(x) < 2 * min_size:
        return []

    def split(d):
        n = len(d)
        s = np.zeros((n + 1, n + 1))
        s[1:, 1:] = d.cumsum(0).cumsum(1)
        t = np.arange(min_size, n - min_size + 1)
        m = n - t
        between = s[t, n] - s[0, n] - s[t, t] + s[0, t]
        right = s[n, n] - s[t, n] - s[n, t] + s[t, t]
        q = t * m / n * (2 * between / (t * m) - s[t, t] / t**2 - right / m**2)
        return int(t[np.argmax(q)]), float(q.max())

    rng = np.random.default_rng(seed)
    d_all = np.abs(x[:, None] - x[None, :])
    segments, points = [(0, len(x))], []
    while True:
        best = None
        for lo, hi in segments:
            if hi - lo >= 2 * min_size:
                tau, q = split(d_all[lo:hi, lo:hi])
                if best is None or q > best[0]:
                    best = (q, (lo, hi), tau)
        if best is None:
            return sorted(points)
        q, (lo, hi), tau = best
        d = d_all[lo:hi, lo:hi]
        exceed, allowed = 0, alpha * (permutations + 1) - 1
        for _ in range(permutations):
            p = rng.permutation(hi - lo)
            exceed += split(d[np.ix_(p, p)])[1] >= q
            if exceed > allowed:
                return sorted(points)
        points.append(lo + tau)
        segments.remove((lo, hi))
        segments += [(lo, lo + tau), (lo + tau, hi)]


def test_e_divisive_tests_many_shuffles_at_once_with_the_same_result():
    rng = np.random.default_rng(0)
    for case in range(40):
        n = int(rng.integers(6, 150))
        x = rng.normal(0, 1, n)
        if case % 2:
            x[int(rng.integers(3, n - 2)) :] += rng.uniform(0.5, 3)
        if case % 5 == 0:
            x = np.round(x)  # ties
        perms = int(rng.integers(19, 200))
        assert stats.e_divisive(x, permutations=perms) == e_divisive_one_by_one(
            x, permutations=perms
        )


def steps(n: int, at: list[int], seed: int) -> list[float]:
    rng = np.random.default_rng(seed)
    level = np.ones(n)
    for a in at:
        level[a:] *= 1.08
    return list(level * (1 + 0.01 * rng.standard_normal(n)))


def test_windows_updated_with_what_is_new_equal_all_of_them_again():
    """An update recomputes only the windows from ``first_window(points so far)`` on; the
    result is that of every window computed again, for any way of cutting the additions."""
    for seed, (n, at) in enumerate([(650, [120, 333, 560]), (420, [199, 200 + 3]), (90, [40])]):
        values = steps(n, at, seed)
        full = changepoints.found_in(values, SETTINGS)
        rng = np.random.default_rng(seed)
        found, done = [], 0
        while done < n:
            nxt = min(n, done + int(rng.integers(1, 160)))
            start = changepoints.first_window(done, SETTINGS)
            found = [f for f in found if f.start < start]
            found += changepoints.found_in(values[start:nxt], SETTINGS, start)
            done = nxt
        assert found == full
        cps = [f.position for f in changepoints.merged(full)]
        assert all(any(abs(c - a) <= 2 for c in cps) for a in at), (cps, at)


def test_merged_keeps_one_point_per_change_the_one_nearest_its_windows_middle():
    f = changepoints.Found
    # one change seen by two windows: the window it is central in wins
    assert changepoints.merged([f(0, 200, 180), f(100, 300, 182)]) == [f(100, 300, 182)]
    # two changes of one window stay, however near
    assert len(changepoints.merged([f(0, 200, 100), f(0, 200, 104)])) == 2
    assert changepoints.merged([f(0, 200, 50), f(100, 300, 250)]) == [f(0, 200, 50),
                                                                      f(100, 300, 250)]  # fmt: skip


def history_files(tmp_path: Path, commits: int) -> list[Path]:
    """synth's history as result files, oldest commit first."""
    out = synth.write_history(tmp_path / "history", commits)
    files = sorted((out / synth.MACHINE).glob("*.json"),
                   key=lambda p: json.loads(p.read_text())["date"])  # fmt: skip
    return files


def batch_of(files: list[Path], tmp_path: Path, name: str) -> Path:
    """These result files (with their fingerprints and benchmarks.json) as one asv results
    directory."""
    batch = tmp_path / name / synth.MACHINE
    batch.mkdir(parents=True)
    for f in files:
        shutil.copy(f, batch)
        shutil.copy(f.with_suffix(".fingerprint"), batch)
    shutil.copy(files[0].parent.parent / "benchmarks.json", batch.parent)
    return batch.parent


def ingest_files(store: Store, files: list[Path], tmp_path: Path, name: str):
    """Ingest these result files as one batch, then bring the change points up to date as
    ``ragbench ingest`` does -> (report, detected)."""
    report = ingest(store, [batch_of(files, tmp_path, name)], branch="main")
    return report, detection.update(store, report.new_runs)


def test_ingest_and_changepoints_store_the_settings_of_the_policies_they_were_given(tmp_path):
    """``ragbench ingest --policies`` with another ``changepoint_alpha`` and ``permutations``
    stores those settings for every series it gave a point (not the shipped file's), and the
    next ingest with them keeps what ``ragbench changepoints --policies`` wrote."""
    shipped = (REPO / "ragbench" / "policies.toml").read_text()
    assert "changepoint_alpha = 0.01\n" in shipped and "permutations = 199\n" in shipped
    custom = tmp_path / "custom.toml"
    custom.write_text(shipped.replace("changepoint_alpha = 0.01\n", "changepoint_alpha = 0.05\n")
                      .replace("permutations = 199\n", "permutations = 99\n"))  # fmt: skip
    want = changepoints.Settings(alpha=0.05, permutations=99).text
    assert want != SETTINGS.text
    files = history_files(tmp_path, 30)
    path = tmp_path / "s.duckdb"

    def ragbench(*args):
        out = subprocess.run([sys.executable, "-m", "ragbench", *args, "--store", str(path),
                              "--policies", str(custom)], capture_output=True, text=True,
                             cwd=REPO)  # fmt: skip
        assert out.returncode == 0, out.stderr

    def settings() -> set[str]:
        return {s["settings"] for s in Store(path, read_only=True).change_point_state(
            synth.MACHINE)}  # fmt: skip

    ragbench("ingest", "--branch", "main", str(batch_of(files[:20], tmp_path, "b0")))
    assert settings() == {want}
    ragbench("changepoints")
    assert settings() == {want}
    ragbench("ingest", "--branch", "main", str(batch_of(files[20:], tmp_path, "b1")))
    assert settings() == {want}
    assert len(Store(path, read_only=True).change_point_state(synth.MACHINE)) > 0


def every_series(store: Store, machine: str = synth.MACHINE) -> dict[tuple, list[int]]:
    """Each series' change points computed again from all its points."""
    out = {}
    for env in store.environments(machine):
        rows = store.series_points(machine, env)
        for key in {r[:3] for r in rows}:
            values = [r[7] for r in rows if r[:3] == key]
            out[(env, *key)] = changepoints.change_points(values, SETTINGS)
    return out


def stored_positions(store: Store, machine: str = synth.MACHINE) -> dict[tuple, list[int]]:
    states = store.change_point_state(machine)
    newest = {(s["environment"], s["benchmark"], s["metric"], s["param_key"]):
              (s["last_commit"], s["last_env_key"]) for s in states}  # fmt: skip
    found = changepoints.current(store, machine, SETTINGS, newest)
    return {k: [r["position"] for r in found.get(k, [])] for k in newest}


def test_ingest_stores_change_points_that_equal_all_of_them_computed_again(tmp_path):
    """Ingests of 150, then 60, then 1, then 29 commits: after each, the stored change points
    of every series are those of its whole history computed again; synth's known steps
    (triton's kernel 10% faster at commit 150, torch 2.11 at 180) are among them."""
    files = history_files(tmp_path, 240)
    store = Store(tmp_path / "s.duckdb")
    done = 0
    for i, size in enumerate((150, 60, 1, 29)):
        report, detected = ingest_files(store, files[done : done + size], tmp_path, f"b{i}")
        done += size
        assert len(report.stored) == size and detected.series > 0
        assert stored_positions(store) == every_series(store)
    found = stored_positions(store)
    triton = [k for k in found if k[2] == "gpu_us" and "backend=triton" in k[3]]
    assert triton and all(120 in found[k] for k in triton)
    host = [k for k in found if k[2] == "host_us"]
    assert host and all(180 in found[k] for k in host)


def test_a_new_run_updates_only_its_series_and_reingest_changes_nothing(tmp_path):
    files = history_files(tmp_path, 130)
    store = Store(tmp_path / "s.duckdb")
    ingest_files(store, files[:-1], tmp_path, "old")
    other = synth.write_history(tmp_path / "other", 40, machine="synthetic-ada", seed=3)
    detection.update(store, ingest(store, [other], branch="main").new_runs)

    def tables():
        with store._connect() as con:
            return {t: sorted(con.execute(f"SELECT * FROM {t}").fetchall(), key=str)
                    for t in ("change_point_series", "change_points")}  # fmt: skip

    before = tables()
    report, detected = ingest_files(store, files[:-1], tmp_path, "again")  # nothing moves
    assert len(report.duplicate) == len(files) - 1 and detected.series == 0
    assert tables() == before
    _, detected = ingest_files(store, files[-1:], tmp_path, "new")
    after = tables()
    changed = [s for s in after["change_point_series"] if s not in before["change_point_series"]]
    # every series of the new run's machine moved on by one point; the other machine's none
    assert len(changed) == detected.series > 0
    assert {s[1] for s in changed} == {synth.MACHINE}
    assert all(s[6] == 130 for s in changed)  # points: all 130 commits
    ada = [s for s in after["change_point_series"] if s[1] == "synthetic-ada"]
    assert ada and all(s in before["change_point_series"] for s in ada)
    assert stored_positions(store) == every_series(store)


def test_detect_reads_the_stored_points_and_judges_as_the_rows_do(tmp_path, capsys):
    """``stored_histories`` (SQL lookback, stored change points) against ``histories`` over
    every row: the same series, statuses, lookback figures and change points; ``detect`` on
    a store whose change points were never stored computes them (and says the same)."""
    files = history_files(tmp_path, 160)
    store = Store(tmp_path / "s.duckdb")
    ingest_files(store, files, tmp_path, "all")
    rows = [r for r in store.series(machine=synth.MACHINE)]
    commits = sorted({(r["commit_time"], r["commit_hash"]) for r in rows})
    cells = sorted(r.key for r in history.histories(rows, POLICIES, change_points=False)
                   if r.latest_z is not None)  # fmt: skip
    # acceptances move the lookback's start (mid-history) and the newest point's status
    for at in (100, -5):  # the newest of them starts the lookback: 4 points, not 10
        store.accept(commits[at][1], *cells[0], "expected", "maintainer")
    store.accept(commits[-1][1], *cells[1], "expected", "maintainer")
    acceptances = store.acceptances()

    def judged(reports):
        return {(r.key, r.status, r.latest_change, r.latest_z,
                 tuple(r.points[i].commit_hash for i in r.change_points),
                 tuple(r.points[i].commit_hash for i in r.accepted)) for r in reports}  # fmt: skip

    old = judged(history.histories(rows, POLICIES, last=200, acceptances=acceptances))
    reports = history.stored_histories(store, synth.MACHINE, POLICIES, last=200)
    assert judged(reports) == old and any(r.change_points for r in reports)
    assert sum(bool(r.accepted) for r in reports) == 2
    assert cli.main(["detect", "--store", str(tmp_path / "s.duckdb"), "--machine",
                     synth.MACHINE]) == 0  # fmt: skip
    stored_out = capsys.readouterr().out
    with store._connect(write=True) as con:  # as a store made before change points were kept
        con.execute("DELETE FROM change_points; DELETE FROM change_point_series")
    assert cli.main(["detect", "--store", str(tmp_path / "s.duckdb"), "--machine",
                     synth.MACHINE]) == 0  # fmt: skip
    assert capsys.readouterr().out == stored_out
    assert "### Change points" in stored_out


def test_the_scale_store_has_its_known_events(tmp_path):
    """``synth.write_store`` (small): the runs and cells asked for, and
    the known steps found where ``scale_events`` says."""
    path = tmp_path / "scale.duckdb"
    counts = synth.write_store(path, runs=300, cells=30, machines=2)
    assert counts == {"runs": 600, "measurements": 600 * 30}
    store = Store(path)
    assert changepoints.rebuild(store, policies=POLICIES) == 2 * 30
    events = synth.scale_events(300, 2)
    found = stored_positions(store, "synthetic-h100")
    for (_, bench, metric, key), cps in found.items():  # an outlier beside a step: two
        known = events[("synthetic-h100", bench, metric, key)]
        assert all(any(abs(c - e) <= 3 for c in cps) for e in known), (key, cps)
        assert all(any(abs(c - e) <= 3 for e in known) for c in cps), (key, cps)
    with pytest.raises(ValueError, match="exists"):
        synth.write_store(path, runs=1, cells=1, machines=1)


def test_detect_never_reads_every_row_into_python(tmp_path, monkeypatch, capsys):
    """``detect`` reads the lookback in SQL and the stored change points: it never asks the
    store for the series' rows (before, it read every row of the machine: 1.06 GB for 240k
    rows, issue 35), and it flags the scale store's planted regression of the newest run."""
    path = tmp_path / "scale.duckdb"
    synth.write_store(path, runs=60, cells=750, machines=1)
    changepoints.rebuild(Store(path), policies=POLICIES)

    def every_row(*a, **k):
        raise AssertionError("detect read every row of the series")

    monkeypatch.setattr(Store, "series", every_row)
    monkeypatch.setattr(Store, "measurements", every_row)
    code = cli.main(["detect", "--store", str(path), "--machine", "synthetic-h100"])
    out = capsys.readouterr().out
    flagged = [line for line in out.splitlines() if line.endswith("| regression |")]
    assert code == 1
    for lengths in ("mixed", "uniform"):  # the planted ones (an outlier run may add one)
        cell = f"backend=triton,batch=64,geometry=deit_b,lengths={lengths},prune=0.8"
        assert any(cell in line for line in flagged), out


@pytest.mark.parametrize("tables", ["none", "other layout"])
def test_a_schema_3_store_gets_its_change_point_tables_anew(tmp_path, tables):
    """Main's history holds commits whose schema 3 had no change-point tables, and commits whose
    tables were keyed by ``env_name``: a store either left is brought to schema 4 by the next
    writer (its tables made anew, then filled by that ingest), never "table does not exist"."""
    import duckdb

    files = history_files(tmp_path, 12)
    path = tmp_path / "s.duckdb"
    ingest_files(Store(path), files[:10], tmp_path, "b0")
    con = duckdb.connect(str(path))
    con.execute("DROP TABLE change_points; DROP TABLE change_point_series")
    if tables == "other layout":
        con.execute("CREATE TABLE change_point_series (branch VARCHAR, machine VARCHAR, "
                    "env_name VARCHAR, benchmark VARCHAR)")  # fmt: skip
    con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    con.close()
    report, detected = ingest_files(Store(path), files[10:], tmp_path, "b1")
    assert len(report.stored) == 2 and detected.series > 0
    store = Store(path, read_only=True)
    assert stored_positions(store) == every_series(store)


def test_a_copy_brings_the_change_points_with_the_runs(tmp_path):
    """``ragbench store copy``: into a store without the machine, the stored change points come
    with the runs (none computed again); into one with it, the copied runs' series are brought
    up to date. Either way, what is stored equals every series computed again."""
    files = history_files(tmp_path, 130)
    source = Store(tmp_path / "source.duckdb")
    ingest_files(source, files[:100], tmp_path, "first")
    target = tmp_path / "target.duckdb"

    def copy():
        out = subprocess.run([sys.executable, "-m", "ragbench", "store", "copy",
                              str(source.path), str(target)], capture_output=True, text=True,
                             cwd=REPO)  # fmt: skip
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout), out.stderr

    added, log = copy()
    assert added["change_point_series"] > 0 and added["change_points"] > 0
    assert "brought up to date" not in log
    copied = Store(target, read_only=True)
    assert stored_positions(copied) == stored_positions(source) == every_series(copied)
    ingest_files(source, files[100:], tmp_path, "later")
    added, log = copy()
    assert added["runs"] == 30 and added["change_point_series"] == 0
    assert "the change points of" in log and "series brought up to date" in log
    assert stored_positions(copied) == every_series(copied) == stored_positions(source)
