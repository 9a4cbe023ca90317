"""The dashboard's reads of the results store: one read-only connection per query (a writer
holds the file for one transaction at a time, so a page waits at most that long), cached
until the file changes; and what ``ragbench.detect`` makes of them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
import streamlit as st

from ragbench import changepoints, detect
from ragbench.store import Store, default_path, store_spec

POLICIES = detect.load_policies()
# Change points over a series' newest commits: the stored ones (ragbench.changepoints), read
# with the lookback in SQL (``detect.stored_histories``); a chart line that is no stored series
# (a speedup, a derived column) gets E-Divisive over its newest points here.
CHANGE_POINT_COMMITS = 400
LOOKBACK_COMMITS = 50


def store_path() -> str | Path:
    """The store to show: a file's path, or a lake's string."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--store", type=store_spec, default=None)
    args, _ = ap.parse_known_args(sys.argv[1:])
    return args.store or default_path()


@st.cache_resource(max_entries=8)
def reader(path: str, mtime: float, branch: str | None) -> Store:
    """One reader per version of the file and branch: its schema is checked once (a reader a
    query checked it six times, 0.18 s of a cold first page). It holds no connection between
    queries."""
    return Store(path, read_only=True, branch=branch)


@st.cache_data(show_spinner=False, max_entries=256)
def query(path: str, mtime: float, branch: str, name: str, **kwargs):
    s = reader(path, mtime, branch)
    method = getattr(s, name)
    if name in ("machines", "measurements", "branches"):
        return method(**kwargs)
    return method(frame=True, **kwargs)


@st.cache_data(show_spinner=False, max_entries=64)
def histories(path: str, mtime: float, branch: str, machine: str, last: int,
              change_points: bool = True, **series_filter):  # fmt: skip
    """``ragbench.detect`` over the newest ``last`` commits of the machine's series (all, or
    those ``series_filter`` selects: benchmark, metric, params), the acceptances marked: the
    lookback in SQL and the stored change points (``detect.stored_histories``)."""
    s = reader(path, mtime, branch)
    return detect.stored_histories(s, machine, POLICIES, last=last, change_points=change_points,
                                   **series_filter)  # fmt: skip


@st.cache_data(show_spinner=False, max_entries=64)
def comparison(path: str, mtime: float, base_ids: tuple, head_ids: tuple, detail: bool):
    s = reader(path, mtime, None)
    base, head = detect.cells(s, list(base_ids)), detect.cells(s, list(head_ids))
    return detect.compare(base, head, POLICIES, detail=detail)


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
            for i in detect.change_points_of(line[y].to_numpy(), POLICIES):
                here, before = line.iloc[i], line.iloc[i - 1]
                marks.append((here["commit_time"], here["commit_hash"],
                              here.get("env_key") != before.get("env_key")))  # fmt: skip
        for when, commit, env in marks:
            cause = "environment" if env else "code"
            rows.append({"commit_time": when, "commit": commit[:12],
                         "cause": f"{name}: {cause}" if name is not None else cause})  # fmt: skip
    return pd.DataFrame(rows)


SERIES_COLUMNS = ("machine", "env_name", "benchmark", "metric", "param_key", "branch")


def _line_key(line: pd.DataFrame) -> tuple | None:
    """The stored series a chart line is, or None (several series in it, or no series
    columns)."""
    if line.empty or any(c not in line for c in SERIES_COLUMNS):
        return None
    keys = line[list(SERIES_COLUMNS)].fillna("").drop_duplicates()
    return tuple(keys.iloc[0]) if len(keys) == 1 else None


def _stored_lines(df: pd.DataFrame) -> dict[tuple, list[dict]]:
    """The stored change points of the series a chart's frame draws, by (machine, env_name,
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
        found = changepoints.current(s, machine, changepoints.Settings.of(POLICIES), newest)
        for (env_name, *key), cps in found.items():
            if (env_name, *key) in newest:
                out[(machine, env_name, *key, branch)] = cps
    return out
