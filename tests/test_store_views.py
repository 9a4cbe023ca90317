"""The store's views take a suite's benchmark names as data (``ViewNames``, given to ``Store``):
on both backends, kept in ``meta`` for a writer that gives none, made again by one that gives
others, and followed by the dashboard's rollup."""

from __future__ import annotations

import duckdb

from ragbench.store import Measurement, Run, Store, ViewNames
from ragbench.store.rollup import Rollup

OURS = ViewNames(dispatch_floor="x.Floor", drift_suffix=".Wobble")
OTHERS = ViewNames(dispatch_floor="y.Floor", drift_suffix=".Sway")


FLOOR_US = {"x.Floor": 9.0, "y.Floor": 19.0, "kernel.DispatchFloor": 29.0}  # a floor's benchmark


def add(store: Store, commit: str) -> None:
    """A run with a floor and a drift cell under each of the two names (and the suite's)."""
    cells = [
        Measurement(bench, metric, {"backend": "triton"}, "us", value)
        for bench, floor in FLOOR_US.items()
        for metric, value in (("floor_us", floor), ("dispatch_us", 4.0))
    ] + [
        Measurement(bench, "max_abs_diff", {"backend": "triton", "model": "m", "method": "k"},
                    "logit", 0.5)
        for bench in ("a.Wobble", "b.Sway", "numerics.Drift")
    ]  # fmt: skip
    run = Run("asv", commit, "m1", 1.0e9, commit_time=1.0e9, branch="main")
    assert store.add_run(run, cells) == len(cells)


def shown(store: Store) -> tuple[list[str], list[str]]:
    """The benchmarks that the dispatch floors' view and the drift view show."""
    floors = [b for r in store.dispatch_floors() for b, v in FLOOR_US.items() if v == r["call_us"]]
    return floors, [r["benchmark"] for r in store.drift()]


def test_the_views_are_of_the_benchmarks_given(store_spec):
    """Each backend: the views hold the benchmarks named, and no other (the suite's own
    ``kernel.DispatchFloor`` and ``numerics.Drift`` rows neither), and ``meta`` keeps the
    names."""
    with Store(store_spec, views=OURS) as store:
        add(store, "a" * 40)
        assert shown(store) == (["x.Floor"], ["a.Wobble"])
        assert store.meta("views") == OURS.to_json()


def test_a_store_made_without_names_has_both_views_empty(tmp_path):
    with Store(tmp_path / "perf.duckdb") as store:
        add(store, "a" * 40)
        assert shown(store) == ([], []) and store.series()


def test_a_writer_without_names_keeps_them_and_one_with_others_makes_the_views_again(tmp_path):
    """The names stay with the store: a writer that gives none leaves the views as they are,
    also when it migrates the store (its schema made older here); one that gives others makes
    the views again, of its names."""
    path = tmp_path / "perf.duckdb"
    add(Store(path, views=OURS), "a" * 40)
    with duckdb.connect(str(path)) as con:
        con.execute("UPDATE meta SET value = '7' WHERE key = 'schema_version'")
        con.execute("DROP VIEW drift")
    store = Store(path)  # migrates: the views made again, of the names the store kept
    assert shown(store) == (["x.Floor"], ["a.Wobble"])
    assert shown(Store(path, views=OTHERS)) == (["y.Floor"], ["b.Sway"])
    assert Store(path, read_only=True).meta("views") == OTHERS.to_json()


def test_the_rollup_follows_the_views_of_its_store(tmp_path):
    """The dashboard's rollup makes the store's views as the store made them, and again once a
    writer made the store's again of other names."""
    path, cache = tmp_path / "perf.duckdb", tmp_path / "rollup.duckdb"
    add(Store(path, views=OURS), "a" * 40)
    assert shown(Rollup.of(path, cache)) == (["x.Floor"], ["a.Wobble"])
    Store(path, views=OTHERS)
    rollup = Rollup.of(path, cache)
    assert shown(rollup) == (["y.Floor"], ["b.Sway"])
    assert rollup.dispatch_floors(frame=True).equals(
        Store(path, read_only=True).dispatch_floors(frame=True)
    )
