"""The dashboard's reads of the results store: one read-only connection per query (a writer
holds the file for one transaction at a time, so a page waits at most that long), cached
until the file changes; and what ``ragbench.history.series`` and
``ragbench.verdicts.comparison`` make of them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from benchmarks.support.catalogue import DISPATCH_FLOOR, DRIFT_SUFFIX
from ragbench.history import edivisive as changepoints
from ragbench.history import series as history
from ragbench.policies import POLICIES, Policies, load_policies
from ragbench.store import Store, default_path, store_spec
from ragbench.store.lake import is_lake
from ragbench.store.rollup import Rollup
from ragbench.store.schema import SPEED_UNITS
from ragbench.verdicts import comparison as compare

# The pages that show this suite's own metrics: drawn only where the store holds them (another
# project's asv results have none).
SUITE_PAGES = ("Dispatch floors", "Speedups", "Numeric drift")

# Change points over a series' newest commits: the stored ones (ragbench.history.edivisive), read
# with the lookback in SQL (``history.stored_histories``); a chart line that is no stored series
# (a speedup, a derived column) gets E-Divisive over its newest points here.
CHANGE_POINT_COMMITS = 400
LOOKBACK_COMMITS = 50


def _args() -> argparse.Namespace:
    """The app's own arguments (``streamlit run dashboard/app.py -- --store S --policies P``)."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--store", type=store_spec, default=None)
    ap.add_argument("--policies", type=Path, default=None)
    ap.add_argument("--warm-page", default=None)  # dashboard/__main__.py's warm-up only
    args, _ = ap.parse_known_args(sys.argv[1:])
    return args


def store_path() -> str | Path:
    """The store to show: a file's path, or a lake's string."""
    return _args().store or default_path()


def warm_page() -> str | None:
    """The page ``python -m dashboard`` computes before its server starts (its warm-up runs
    the app once a page, bare, with no URL to read it from), else None."""
    return _args().warm_page


def policies() -> Policies:
    """The policies the pages judge by: ``--policies FILE`` (as every ragbench command takes
    it), else the shipped ones; ValueError when the file is malformed."""
    path = _args().policies or POLICIES
    return _policies(str(path), path.stat().st_mtime if path.exists() else 0.0)


@st.cache_resource(max_entries=4)
def _policies(path: str, mtime: float) -> Policies:
    return load_policies(Path(path))


@st.cache_resource(max_entries=8)
def store(path: str, mtime: float, branch: str | None) -> Store:
    """One reader of the store per version of the file and branch: its schema is checked once
    (a reader a query checked it six times, 0.18 s of a cold first page). It holds no
    connection between queries. The comparisons read raw samples through it."""
    return Store(path, read_only=True, branch=branch)


@st.cache_resource(max_entries=8)
def reader(path: str, mtime: float, branch: str | None) -> Store:
    """What the pages query: a store file's rollup (``ragbench.store.rollup``: each series' rows
    together, no samples), brought up to date once per version of the file; a lake itself."""
    if is_lake(path):
        return store(path, mtime, branch)
    return Rollup.of(Path(path), branch=branch)


# Results are kept as objects (cache_resource), not pickled copies (cache_data): on the 10,000-run
# store a warm Overview spent 11.4 s of 13.4 s unpickling its cached lookback and comparisons
# (2-core machine, load ~25). The pages never change a result in place (they filter, assign and
# copy).
CACHED = {"show_spinner": False}


@st.cache_resource(max_entries=256, **CACHED)
def query(path: str, mtime: float, branch: str, name: str, **kwargs):
    s = (store if name == "measurements" else reader)(path, mtime, branch)  # samples: the store's
    method = getattr(s, name)
    if name in ("machines", "measurements", "branches", "meta"):
        return method(**kwargs)
    return method(frame=True, **kwargs)


@st.cache_data(show_spinner=False, max_entries=16)
def suite_pages(path: str, mtime: float) -> list[str]:
    """Which of ``SUITE_PAGES`` the store has data for."""
    return suite_pages_of(reader(path, mtime, None).metrics(frame=True))


def suite_pages_of(m: pd.DataFrame) -> list[str]:
    """Which of ``SUITE_PAGES`` a store's ``Store.metrics`` has data for."""
    has = {
        "Dispatch floors": (m["benchmark"] == DISPATCH_FLOOR).any(),
        "Speedups": (m["variants"] & m["unit"].isin(SPEED_UNITS)).any(),
        "Numeric drift": m["benchmark"].str.endswith(DRIFT_SUFFIX).any(),
    }
    return [p for p in SUITE_PAGES if has[p]]


def project(path: str, mtime: float) -> str | None:
    """The project's name as its asv config gives it (ingest keeps it in ``meta``), or None."""
    return query(path, mtime, "", "meta", key="project")


@st.cache_resource(max_entries=64, **CACHED)
def asv_project(path: str, mtime: float, machine: str):
    """The other asv project whose results ``machine``'s are (``ragbench.project``: its repo,
    config and commit URL, what an alert's follow-ups point at), or None for this suite's."""
    from ragbench import project

    return project.load(store(path, mtime, None), machine)


@st.cache_resource(max_entries=64, **CACHED)
def histories(path: str, mtime: float, branch: str, machine: str, last: int,
              change_points: bool = True, **series_filter):  # fmt: skip
    """``ragbench.history.series`` over the newest ``last`` commits of the machine's series (all, or
    those ``series_filter`` selects: benchmark, metric, params), the acceptances marked: the
    lookback in SQL and the stored change points (``history.stored_histories``), from the store
    itself (the rollup holds neither)."""
    s = store(path, mtime, branch)
    return history.stored_histories(s, machine, policies(), last=last,
                                    change_points=change_points, **series_filter)  # fmt: skip


@st.cache_resource(max_entries=64, **CACHED)
def comparison(path: str, mtime: float, base_ids: tuple, head_ids: tuple, detail: bool):
    s = store(path, mtime, None)
    base, head = compare.cells(s, list(base_ids)), compare.cells(s, list(head_ids))
    return compare.compare(base, head, policies(), detail=detail)


@st.cache_data(show_spinner="finding change points ...", max_entries=64)
def line_change_points(df: pd.DataFrame, y: str, color: str | None) -> pd.DataFrame:
    """Change points of each line of a chart (over its newest CHANGE_POINT_COMMITS points),
    labelled environment where the environment key changes there, else code: a line that is
    one stored series (a ``Store.series`` frame's medians) gets its stored ones, any other line
    E-Divisive over those points here."""
    rows = []
    stored = _stored_lines(df) if y == "median" else {}
    for name, line in df.groupby(color) if color else [(None, df)]:
        line = line.dropna(subset=[y]).sort_values("commit_time").tail(CHANGE_POINT_COMMITS)
        key = _line_key(line)
        if key in stored:
            commits = set(line["commit_hash"])
            marks = [(c["commit_time"], c["commit_hash"], c["env_key"] != c["prev_env_key"])
                     for c in stored[key] if c["commit_hash"] in commits
                     and c["prev_commit_hash"] in commits]  # fmt: skip
        else:
            marks = []
            for i in history.change_points_of(line[y].to_numpy(), policies()):
                here, before = line.iloc[i], line.iloc[i - 1]
                marks.append((here["commit_time"], here["commit_hash"],
                              here.get("env_key") != before.get("env_key")))  # fmt: skip
        for when, commit, env in marks:
            cause = "environment" if env else "code"
            rows.append({"commit_time": when, "commit": commit[:12],
                         "cause": f"{name}: {cause}" if name is not None else cause})  # fmt: skip
    return pd.DataFrame(rows)


SERIES_COLUMNS = ("machine", "environment", "benchmark", "metric", "param_key", "branch")


def _line_key(line: pd.DataFrame) -> tuple | None:
    """The stored series a chart line is, or None (several series in it, or no series
    columns)."""
    if line.empty or any(c not in line for c in SERIES_COLUMNS):
        return None
    keys = line[list(SERIES_COLUMNS)].fillna("").drop_duplicates()
    return tuple(keys.iloc[0]) if len(keys) == 1 else None


def _stored_lines(df: pd.DataFrame) -> dict[tuple, list[dict]]:
    """The stored change points of the series a chart's frame draws, by (machine, environment,
    benchmark, metric, param_key, branch)."""
    if df.empty or any(c not in df for c in SERIES_COLUMNS):
        return {}
    out = {}
    path = store_path()
    for (machine, branch), part in df.groupby(["machine", "branch"]):
        s = Store(path, read_only=True, branch=branch)
        newest = {}
        for key, line in part.groupby(list(SERIES_COLUMNS[1:5]), dropna=False):
            last = line.sort_values(["commit_time", "started_at"]).iloc[-1]
            newest[tuple("" if pd.isna(k) else k for k in key)] = (last["commit_hash"],
                                                                   last["env_key"])  # fmt: skip
        found = changepoints.current(s, machine, changepoints.Settings.of(policies()), newest)
        for (environment, *key), cps in found.items():
            if (environment, *key) in newest:
                out[(machine, environment, *key, branch)] = cps
    return out
