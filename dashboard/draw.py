"""The dashboard's drawing: Altair line charts over commits (change points, the paper's
figures, stack changes marked), the sidebar's filters and pickers, legends and downloads."""

from __future__ import annotations

import os
import re

import pandas as pd
import streamlit as st

from dashboard.read import line_change_points, query
from ragbench.verdicts import MEANING


def commit_link(df: pd.DataFrame) -> pd.DataFrame:
    df = df.copy()
    df["commit"] = df["commit_hash"].str[:12]
    template = os.environ.get("RAGBENCH_COMMIT_URL")
    if template:
        df["url"] = [template.format(c) for c in df["commit_hash"]]
    return df


def chart(
    df: pd.DataFrame,
    y: str,
    color: str | None,
    title: str,
    *,
    rules=None,
    change_points=None,
    key: str,
    y_title: str | None = None,
    log: bool = False,
):
    """A line over the commits in their order (the hover has the commit and its time, the
    value and its spread) and a CSV download. ``log``: a log axis (values <= 0 left out)."""
    import altair as alt  # 0.4 s of imports, paid only once a page draws a chart

    if log:
        df = df[df[y] > 0]
    if df.empty:
        st.info(f"{title}: no data for these filters.")
        return
    df = commit_link(df)
    order = {t: i for i, t in enumerate(sorted(df["commit_time"].unique()), 1)}
    df["commit #"] = df["commit_time"].map(order)
    full = df
    df = binned(df, y, color)
    tooltip = [
        "commit",
        alt.Tooltip("commit_time:T", title="commit time", format="%Y-%m-%d %H:%M"),
        alt.Tooltip(f"{y}:Q", format=".4g"),
    ]
    tooltip += [c for c in ("commits", "q25", "q75", *stack_fields(df)) if c in df]
    if color:
        tooltip.append(color)
    scale = alt.Scale(type="log") if log else alt.Scale(zero=False)
    enc = {
        "x": alt.X(
            "commit #:Q", title="commit (oldest first)", axis=alt.Axis(format="d", tickMinStep=1)
        ),
        "y": alt.Y(f"{y}:Q", title=y_title or y, scale=scale, axis=alt.Axis(format=".3g")),
        "tooltip": tooltip,
    }
    if color:
        enc["color"] = alt.Color(f"{color}:N")
    if "url" in df:
        enc["href"] = "url:N"
    layers = [alt.Chart(df).mark_line(point=True).encode(**enc)]
    if {"q25", "q75"} <= set(df) and df["q25"].notna().any() and not log:
        band = {k: v for k, v in enc.items() if k in ("x", "color")}
        layers.insert(0, alt.Chart(df).mark_area(opacity=0.2).encode(y="q25:Q", y2="q75:Q", **band))
    for label, value, colour in rules or []:
        rule = pd.DataFrame({"value": [value], "label": [label]})
        layers.append(
            alt.Chart(rule)
            .mark_rule(strokeDash=[6, 3], color=colour)
            .encode(y="value:Q", tooltip=["label", "value"])
        )
    moves = stack_changes(full)
    if not moves.empty:
        layers.append(
            alt.Chart(moves)
            .mark_rule(color="gray", strokeDash=[2, 2])
            .encode(x="commit #:Q", tooltip=["stack change"])
        )
    if change_points is None and st.session_state.get("mark_change_points"):
        change_points = line_change_points(full, y, color)
    if change_points is not None and not change_points.empty:
        change_points = change_points.assign(
            **{"commit #": change_points["commit_time"].map(order)})  # fmt: skip
        layers.append(
            alt.Chart(change_points)
            .mark_rule(color="red")
            .encode(x="commit #:Q", tooltip=["commit", "cause"])
        )
    if "commits" in df:
        title += f" (medians of {int(df['commits'].max())} commits a point)"
    st.altair_chart(alt.layer(*layers).properties(title=title, height=280), width="stretch")
    download(full, title, key)


# Charts over years: at most this many points a line. Beyond it, consecutive commits are binned
# and each bin drawn at the median of its commits' values, its band their quartiles (the
# download keeps every commit). 500: not tuned by a measurement yet (docs/dashboard.md).
MAX_POINTS = 500


def binned(df: pd.DataFrame, y: str, color: str | None) -> pd.DataFrame:
    """``df`` (one row per commit and line, ``commit #`` numbered) with at most
    ``MAX_POINTS`` points a line: bins of consecutive commits, each at its first commit's
    place, with ``commits`` (how many it holds)."""
    last = int(df["commit #"].max())
    if last <= MAX_POINTS:
        return df
    size = -(-last // MAX_POINTS)
    keys = ["bin", *([color] if color else [])]
    firsts = {c: (c, "first") for c in ("commit", "commit_time", "url", *stack_fields(df))
              if c in df}  # fmt: skip
    groups = df.assign(bin=(df["commit #"] - 1) // size).groupby(keys, dropna=False)
    out = groups.agg(**{y: (y, "median"), "commit #": ("commit #", "min"),
                        "commits": ("commit #", "nunique"), **firsts})  # fmt: skip
    out["q25"], out["q75"] = groups[y].quantile(0.25), groups[y].quantile(0.75)
    return out.reset_index().drop(columns="bin")


def stack_changes(df: pd.DataFrame) -> pd.DataFrame:
    """The commits (``commit #``) whose runs' stacks differ from the previous commit's, and
    what changed; drawn on every chart over commits as grey dotted lines."""
    if not stack_fields(df) or df.empty:
        return pd.DataFrame(columns=["commit #", "stack change"])
    rows = df.assign(stack=stacks(df)).drop_duplicates(["commit #", "stack"])
    rows = rows.sort_values(["commit #", "stack"])
    per = rows.groupby("commit #")["stack"].first()  # one stack a commit, nearly always
    several = rows["commit #"].duplicated(keep=False)
    if several.any():  # a join a commit took 0.5 s over 10,000 commits: only where needed
        per.update(rows[several].groupby("commit #")["stack"].agg(" + ".join))
    before = per.shift()
    moved = per[(per != before) & before.notna()]
    changes = [f"{before[i]} -> {moved[i]}" for i in moved.index]
    return pd.DataFrame({"commit #": moved.index, "stack change": changes})


def download(df: pd.DataFrame, title: str, key: str) -> None:
    """The data behind a chart or table, as CSV, written when the button is clicked (each page
    run wrote every chart's CSV: 30,000 rows a chart over 10,000 commits)."""
    st.download_button(f"Download the data ({title})", lambda: df.to_csv(index=False),
                       file_name=f"{key}.csv", mime="text/csv", key=f"dl-{key}")  # fmt: skip


def filtered(df: pd.DataFrame, f: dict) -> pd.DataFrame:
    """Rows within the sidebar's date range and environments."""
    if df.empty:
        return df
    t = pd.to_datetime(df["commit_time"])  # compared as times (.dt.date made an object a row)
    keep = (t >= pd.Timestamp(f["since"])) & (t < pd.Timestamp(f["until"]) + pd.Timedelta(days=1))
    for field, values in f["env"].items():
        if field in df:
            keep &= df[field].isin(values)
    return df[keep]


# What a page opens on, most telling first: the timed and throughput metrics (a GPU machine's,
# then the CPU subset's), never a hash or a drift series.
PREFERRED = {
    "benchmark": (
        "pipeline.Throughput",
        "kernel.DispatchFloor",
        "kernel.KernelLatency",
        "cpu.Pipeline",
    ),
    "metric": ("img_per_s", "floor_us", "call_us", "gpu_us"),
}


def pick(label: str, options: list, key: str):
    """A select box over ``options``, preselected from the URL parameter ``key``, else on the
    first of ``PREFERRED[key]`` there is."""
    options = sorted({o for o in options if o is not None}, key=str)
    if not options:
        return None
    wanted = st.query_params.get(key)
    if wanted not in options:
        wanted = next((o for o in PREFERRED.get(key, ()) if o in options), options[0])
    return st.selectbox(label, options, index=options.index(wanted), key=key)


def narrow(df: pd.DataFrame, column: str, label: str, key: str) -> tuple[pd.DataFrame, object]:
    """Pick one value of ``column`` (``pick``); -> the rows that have it, and the value."""
    value = pick(label, list(df[column]), key)
    return df[df[column] == value], value


def legend(statuses) -> None:
    """A caption explaining each status word in ``statuses``."""
    words = [s for s in MEANING if s in set(statuses)]
    if words:
        st.caption("; ".join(f"**{s}**: {MEANING[s]}" for s in words))


def worse_by(change: float | None) -> str:
    """A verdict's change in the bad direction, saying which way is worse."""
    if change is None:
        return ""
    return f"{change * 100:+.1f}% ({'worse' if change > 0 else 'better'})"


def cell_params(cell: str) -> dict[str, str]:
    """``batch=64,model=deit_base_224`` -> {"batch": "64", "model": "deit_base_224"}."""
    return dict(kv.split("=", 1) for kv in cell.split(",") if "=" in kv)


def shown(value, unit: str | None) -> str:
    """A table value: hashes in hex, numbers to 4 significant digits."""
    if value is None:
        return ""
    if unit == "hash":
        return f"{int(value):012x}"
    return f"{value:.4g}"


def pick_series(ctx):
    """One series of the machine, chosen on the page from its catalogue of cells: -> (its
    rows, benchmark, metric, cell), or None (with a message) when the machine has no runs."""
    cells = query(ctx["path"], ctx["mtime"], ctx["branch"], "cells", machine=ctx["machine"])
    if cells.empty:
        st.info("No runs on this machine.")
        return None
    cells, bench = narrow(cells, "benchmark", "benchmark", "benchmark")
    cells, metric = narrow(cells, "metric", "metric", "metric")
    _, cell = narrow(cells, "param_key", "cell", "cell")
    df = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", machine=ctx["machine"],
               benchmark=bench, metric=metric, cell=cell)  # fmt: skip
    return df, bench, metric, cell


# The environment fields a run's stack is named by: this suite's torch and triton, or, where
# the runs name neither (another project's asv results), the python of asv's environment, else
# its name.
STACK_FIELDS = ("torch", "triton", "python", "env_name")


def stack_fields(df: pd.DataFrame) -> list[str]:
    """``["torch", "triton"]`` where the rows name either, else the first of python and
    env_name that they name, else none."""
    named = [f for f in STACK_FIELDS if f in df and df[f].notna().any()]
    return ["torch", "triton"] if {"torch", "triton"} & set(named) else named[:1]


def stacks(runs: pd.DataFrame) -> pd.Series:
    """Each run's stack, as the Versions page names it: ``torch 2.15.0, triton 3.9.0`` (or
    ``python 3.12``, ``env_name py2.7-numpy1.8``)."""
    fields = stack_fields(runs)
    if not fields:
        return pd.Series("environment not recorded", index=runs.index)
    named = [f + " " + runs[f].fillna("?").astype(str) for f in fields]
    return named[0].str.cat(named[1:], sep=", ") if len(named) > 1 else named[0]


# A run's environment in words: (field, label), where the run names it.
ENVIRONMENT = (("gpu", "GPU"), ("driver", "driver"), ("cuda", "CUDA"), ("torch", "torch"),
               ("triton", "triton"), ("python", "python"),
               ("env_name", "asv environment"))  # fmt: skip


def environment(run, skip: tuple[str, ...] = ()) -> str:
    """``GPU H100, driver 580.00, torch 2.11.0, ...``: the fields ``run`` names (a row of
    ``runs``), none made up."""
    parts = [f"{label} {run[f]}" for f, label in ENVIRONMENT
             if f not in skip and f in run and pd.notna(run[f])]  # fmt: skip
    return ", ".join(parts) or "environment not recorded"


def version_key(stack: str) -> tuple:
    """Order stacks by their torch, then triton version (2.9 before 2.10)."""
    return tuple(int(n) if n.isdigit() else 0 for n in re.findall(r"\d+|\?", stack))
