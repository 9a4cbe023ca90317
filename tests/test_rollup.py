"""ragbench.store.rollup: the dashboard's read model of a store file answers every query as the
store does (without raw samples), each series' rows together, and follows the store's new runs."""

from __future__ import annotations

import json
import shutil

import duckdb
import pandas as pd
import pytest
from conftest import ingest

from ragbench import synth
from ragbench.store import Store
from ragbench.store.rollup import Rollup, sync
from ragbench.suite_views import SUITE_VIEWS


def same(a: pd.DataFrame, b: pd.DataFrame) -> None:
    a, b = (x.sort_values(list(a.columns)).reset_index(drop=True) for x in (a, b))
    pd.testing.assert_frame_equal(a, b[a.columns], check_dtype=False)


@pytest.fixture
def history(tmp_path):
    return synth.write_history(tmp_path / "h", 8)


def test_the_rollup_answers_as_the_store(history, tmp_path):
    path = tmp_path / "perf.duckdb"
    ingest(Store(path, views=SUITE_VIEWS), [history], branch="main")
    store, rollup = Store(path, read_only=True), Rollup.of(path, tmp_path / "r.duckdb")
    cell = "backend=triton,batch=64,geometry=deit_b,lengths=uniform,prune=0.8"
    for name, kwargs in [("runs", {}), ("series", {}), ("dispatch_floors", {}), ("drift", {}),
                         ("series", {"benchmark": "kernel.KernelLatency", "metric": "gpu_us",
                                     "cell": cell, "machine": synth.MACHINE}),
                         ("speedups", {"benchmark": "kernel.KernelLatency"}),
                         ("cells", {"machine": synth.MACHINE}), ("metrics", {})]:  # fmt: skip
        same(
            getattr(store, name)(frame=True, **kwargs), getattr(rollup, name)(frame=True, **kwargs)
        )
    assert len(rollup.series(frame=True, cell=cell, metric="gpu_us")) == 8
    assert len(rollup.drift()) and len(rollup.dispatch_floors())  # the views compared hold rows
    assert len(rollup.cells(frame=True)) == 59  # every cell once
    assert rollup.branches() == store.branches()


def test_each_series_rows_lie_together(history, tmp_path):
    """Sorted by benchmark, metric, cell, machine and commit: a series' rows are one run of
    rows (what lets DuckDB's zone maps skip the rest)."""
    path = tmp_path / "perf.duckdb"
    ingest(Store(path), [history], branch="main")
    sync(path, tmp_path / "r.duckdb")
    with duckdb.connect(str(tmp_path / "r.duckdb"), read_only=True) as con:
        rows = con.execute("SELECT benchmark, metric, param_key FROM measurements "
                           "ORDER BY rowid").fetchall()  # fmt: skip
    starts = [i for i in range(len(rows)) if i == 0 or rows[i] != rows[i - 1]]
    assert len(starts) == len(set(rows)) == 59 and rows == sorted(rows)


def test_a_sync_appends_only_the_new_runs(history, tmp_path):
    path, rolled = tmp_path / "perf.duckdb", tmp_path / "r.duckdb"
    files = sorted((history / synth.MACHINE).glob("*.json"),
                   key=lambda p: json.loads(p.read_text())["date"])  # fmt: skip
    late = tmp_path / "late" / synth.MACHINE
    late.mkdir(parents=True)
    shutil.copy(history / "benchmarks.json", late.parent)
    for p in files[-3:]:
        shutil.move(p, late / p.name)
        shutil.move(p.with_suffix(".fingerprint"), late / p.with_suffix(".fingerprint").name)
    ingest(Store(path), [history], branch="main")
    assert sync(path, rolled) == {"runs": 5, "rows": 5 * 59, "sorted": True}
    assert sync(path, rolled) == {"runs": 0, "rows": 0, "sorted": False}
    ingest(Store(path), [late.parent], branch="main")
    assert sync(path, rolled) == {"runs": 3, "rows": 3 * 59, "sorted": True}  # 3/8 new: sorted
    with duckdb.connect(str(rolled), read_only=True) as con:
        rows = con.execute("SELECT benchmark, metric, param_key FROM measurements "
                           "ORDER BY rowid").fetchall()  # fmt: skip
    assert rows == sorted(rows)
    same(Store(path, read_only=True).series(frame=True), Rollup(rolled, path).series(frame=True))


def test_a_new_store_at_the_same_path_is_rolled_up_anew(history, tmp_path):
    path, rolled = tmp_path / "perf.duckdb", tmp_path / "r.duckdb"
    ingest(Store(path), [history], branch="main")
    sync(path, rolled)
    path.unlink()
    other = synth.write_history(tmp_path / "o", 3, machine="other")
    ingest(Store(path), [other], branch="main")
    sync(path, rolled)
    assert Rollup(rolled, path).machines() == ["other"]
    assert len(Rollup(rolled, path).series(frame=True)) == 3 * 59


def test_a_rollup_of_another_schema_is_built_anew(history, tmp_path):
    """A ragbench of another schema (a new table or column) rebuilds the rollup, never mixes
    columns."""
    path, rolled = tmp_path / "perf.duckdb", tmp_path / "r.duckdb"
    ingest(Store(path), [history], branch="main")
    sync(path, rolled)
    with duckdb.connect(str(rolled)) as con:
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
        con.execute("DELETE FROM measurements")
    assert sync(path, rolled)["rows"] == 8 * 59


@pytest.mark.parametrize("version", ["4", "5"])
def test_a_rollup_of_schema_4_gains_the_new_tables_without_a_rebuild(history, tmp_path, version):
    """Schemas 5 and 6 added only tables a rollup does not hold (the alerts, the gates' own
    verdicts) and a column of ``gates``: a rollup of 4 or 5 is migrated in place, its rows kept
    (a rebuild of a 10,000-run rollup takes 17 min)."""
    path, rolled = tmp_path / "perf.duckdb", tmp_path / "r.duckdb"
    ingest(Store(path), [history], branch="main")
    sync(path, rolled)
    with duckdb.connect(str(rolled)) as con:
        con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [version])
        if version == "4":
            con.execute("DROP TABLE alerts")
            con.execute("DROP TABLE alert_cells")
        con.execute("DROP TABLE gate_verdicts; DROP TABLE gate_verdict_cells; "
                    "ALTER TABLE gates DROP COLUMN gate_id")  # fmt: skip
    assert sync(path, rolled) == {"runs": 0, "rows": 0, "sorted": False}  # nothing built again
    with duckdb.connect(str(rolled), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM alerts").fetchone() == (0,)
    assert Rollup(rolled, path).series(frame=True).shape[0] == 8 * 59
