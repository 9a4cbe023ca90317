"""The dashboard's pages across environments: Versions (torch x triton over commits, upgrade
reports) and Machines (one metric across machines)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import draws, svg
from dashboard.draw import (
    Pickers,
    changed_table,
    chart,
    chose,
    download,
    environment_of,
    legend,
    narrow,
    pick_series,
    shown,
    stack_fields,
    stacks,
    static_table,
    version_key,
)
from dashboard.read import comparison, query
from ragbench.verdicts.status import FAILING, Headline, Status, verdict_words


@draws("Versions")
def versions(ctx):
    st.header("Versions")
    runs = ctx["runs"][ctx["runs"]["machine"] == ctx["machine"]]
    measured = measured_stacks(ctx["path"], ctx["mtime"], ctx["branch"], ctx["machine"])
    if measured:
        upgrade_reports(ctx, measured)
    else:
        st.info("No commit on this machine was measured under more than one stack yet"
                + (": `ragbench versions --from SPEC --to SPEC --store S` measures one "
                   "(docs/versions.md)." if "torch" in stack_fields(runs) else "."))  # fmt: skip
    stack_heatmap(ctx)


# kept per version of the store and machine: on django-asv's history (ubuntu-latest: 4,340
# runs, nearly every commit under several Pythons) grouping the runs took 10.6 s of the page's
# script a visit, a mask of every run a group
@st.cache_resource(max_entries=16, show_spinner=False)
def measured_stacks(path: str, mtime: float, branch: str, machine: str) -> dict[str, pd.DataFrame]:
    """The machine's commits of main, and what ``ragbench versions`` kept, measured under two
    stacks or more (``several_stacks``)."""
    runs = query(path, mtime, branch, "runs")
    runs = runs[runs["machine"] == machine]
    measured = several_stacks(runs, runs["commit_hash"])
    kept = query(path, mtime, branch, "runs", machine=machine, label="gate:%")
    # what `ragbench versions --store` kept: a gate of one commit under two stacks, on no branch
    # (a gate's id is gate:HEAD-BASE-TIME; its rechecks are judged by the gate, not here)
    kept = kept[~kept["label"].str.contains(":recheck-")]
    gate = kept["label"].str.extract(r"^(gate:([0-9a-f]+)-([0-9a-f]+)-\d+)")
    kept = kept[(gate[1] == gate[2]).to_numpy()]
    measured.update(several_stacks(kept, gate[0][gate[1] == gate[2]]))
    return measured


KEPT = ", kept by ragbench versions at "  # in the label of what ``ragbench versions`` kept


def several_stacks(runs: pd.DataFrame, by: pd.Series) -> dict[str, pd.DataFrame]:
    """The runs grouped ``by`` (a commit, or a kept gate), each with its ``stack``, of the
    groups measured under two stacks or more: {group's label: its runs}, newest first. Stacks
    that name the same torch and triton but are other environments (a numpy-only change) are
    told apart by asv's environment name."""
    runs = runs.assign(stack=stacks(runs), group=by.to_numpy())
    same = runs.groupby(["group", "stack"])["env_name"].transform("nunique") > 1
    runs.loc[same, "stack"] += " (" + runs.loc[same, "env_name"].fillna("?") + ")"
    n = runs.groupby("group", sort=False)["stack"].transform("nunique")
    out = {}
    # one pass over the groups, in the runs' order (newest first)
    for group, here in runs[n >= 2].groupby("group", sort=False):
        first = here.iloc[0]
        label = f"{first['commit_hash'][:12]} ({first['commit_time']})"
        if group != first["commit_hash"]:  # a kept gate: gate:HEAD-BASE-SECONDS
            when = pd.Timestamp(int(group.rsplit("-", 1)[1]), unit="s")
            label += f"{KEPT}{when:%Y-%m-%d %H:%M}"
        out[label] = here
    return out


# Commits the Versions picker offers, newest first (what ``ragbench versions`` kept, always):
# django-asv's ubuntu-latest ran nearly every commit under several Pythons, 2,000-odd options
# sent a load
VERSION_CHOICES = 500


def offered(labels: list[str], wanted: str = "") -> list[str]:
    """The picker's labels (``several_stacks``'): the newest ``VERSION_CHOICES`` commits, the
    one the URL's ``commit`` names, and every kept gate."""
    commits = [c for c in labels if KEPT not in c]
    shown = commits[:VERSION_CHOICES] + [c for c in commits[VERSION_CHOICES:]
                                         if wanted and c.startswith(wanted)][:1]  # fmt: skip
    return shown + [c for c in labels if KEPT in c]


def upgrade_reports(ctx, measured: dict[str, pd.DataFrame]) -> None:
    """For one commit: every cell under each stack measured on it, and the gate's
    verdict of each stack against a reference stack (what ``ragbench versions`` reports)."""
    wanted = st.query_params.get("commit", "")
    labels = offered(list(measured), wanted)
    index = next((i for i, c in enumerate(labels) if wanted and c.startswith(wanted)), 0)
    with Pickers("Pick the commit"):
        col1, col2 = st.columns(2)
        commit = col1.selectbox("commit (measured under several stacks)", labels, index=index,
                                key="versions-commit")  # fmt: skip
        here = measured[commit]
        names = sorted(here["stack"].unique(), key=version_key)
        ref = col2.selectbox("against", names, index=0, key="versions-ref")
        chose("commit", commit)
        chose("against", ref)
    commits = sum(KEPT not in c for c in measured)
    if commits > sum(KEPT not in c for c in labels):
        st.caption(f"The newest {VERSION_CHOICES} of the {commits} commits measured under "
                   "several stacks are offered (the URL's `?commit=` picks any).")  # fmt: skip
    ids = {n: tuple(here[here["stack"] == n]["run_id"]) for n in names}
    table: dict[tuple, dict] = {}
    verdicts, statuses, moved = [], [], set()
    for name in names:
        if name == ref:
            continue
        c = comparison(ctx["path"], ctx["mtime"], ids[ref], ids[name], False)
        changed = [v for v in c.verdicts if v.status in FAILING]
        verdict = ("safe to upgrade" if c.headline == Headline.PASS else
                   f"not shown safe ({c.headline}): {len(changed)} cell(s) changed")  # fmt: skip
        verdicts.append(f"- **{name}** against {ref}: **{c.headline.upper()}**, {verdict}")
        for v in c.verdicts:
            row = table.setdefault(v.key, {"metric": f"{v.key[0]}.{v.key[1]}", "cell": v.key[2],
                                           ref: shown(v.base, v.unit)})  # fmt: skip
            change = verdict_words(v)
            word = "" if v.status == Status.UNCHANGED else f" · {v.status}" + (
                f" {change}" if v.change is not None else "")  # fmt: skip
            row[name] = (shown(v.head, v.unit) + word).strip()
            statuses.append(v.status)
            if v.status != Status.UNCHANGED:
                moved.add(v.key)
    st.markdown("\n".join(verdicts))
    if table:
        df = pd.DataFrame(list(table.values()))
        st.caption(f"Each stack's value; where it is not unchanged against {ref}, the verdict "
                   "after a dot.")  # fmt: skip
        changed_table(df, [k not in moved for k in table], "cell(s) unchanged under every stack",
                      "versions-unchanged")  # fmt: skip
        legend(statuses)
        download(df, "versions of one commit", "versions-commit")
    st.caption(f"{len(ids[ref])} run(s) of {ref}; "
               + ", ".join(f"{len(ids[n])} of {n}" for n in names if n != ref)
               + ". Host-time cells of separate processes are inconclusive unless they moved "
                 "beyond 100% (two stacks cannot share a process).")  # fmt: skip


def stack_heatmap(ctx) -> None:
    """One metric across torch x triton over every commit of the machine."""
    st.subheader("One metric across all commits")
    picked = pick_series(ctx, Pickers("Pick the series"))
    if picked is None:
        return
    df, bench, metric, cell = picked
    runs = ctx["runs"].set_index("run_id")
    df = df.assign(env_name=df["run_id"].map(runs["env_name"]))
    # torch x triton for this suite; one row of asv's environments for another project's runs
    fields = stack_fields(df) or ["env_key"]
    if fields == ["python"] and (df.groupby("python")["env_name"].nunique() > 1).any():
        fields = ["env_name"]  # one Python's conda and virtualenv runs: two environments
    y, x = (fields * 2)[:2]
    st.caption(f"{' x '.join(fields)} on this machine (median over runs)")
    grid = df.assign(**{f: df[f].fillna("?") for f in fields}).groupby(fields)["median"]
    grid = grid.agg(["median", "count"]).reset_index()
    grid = grid.rename(columns={"median": "value", "count": "runs"})
    spec = heatmap_spec(grid, x, y, tuple(fields), f"{bench}.{metric} {cell}")
    svg.show(spec)
    download(grid, "versions", "versions")


# kept per grid, as the charts' specs (dashboard/draw.py chart_spec): Altair built and
# validated it in 0.07 s of the Versions page's 0.12 s warm script
@st.cache_resource(max_entries=64, show_spinner=False)
def heatmap_spec(grid: pd.DataFrame, x: str, y: str, fields: tuple, title: str) -> dict:
    import altair as alt  # 0.4 s of imports, paid only once a page draws a chart

    data = alt.NamedData(name="grid")
    heat = alt.Chart(data).mark_rect().encode(
        x=f"{x}:N", y=f"{y}:N", color=alt.Color("value:Q", scale=alt.Scale(scheme="viridis")),
        tooltip=[f"{f}:N" for f in fields] + [alt.Tooltip("value:Q", format=".4g"), "runs:Q"],
    )  # fmt: skip
    text = alt.Chart(data).mark_text(color="white").encode(
        x=f"{x}:N", y=f"{y}:N", text=alt.Text("value:Q", format=".4g"))  # fmt: skip
    spec = (heat + text).properties(title=title, height=240).to_dict()
    spec.pop("$schema", None)
    return {**spec, "datasets": {"grid": grid}}


@draws("Machines")
def machines(ctx):
    """The sidebar's machine against another on the commits both measured under the same
    stack: each cell's value on both at the newest such commit, and one cell's ratio over the
    commits."""
    st.header("Machines")
    names = sorted(ctx["runs"]["machine"].unique())
    others = [n for n in names if n != ctx["machine"]]
    if not others:
        st.info("One machine in this store. Runners that write one store (a DuckLake: "
                "docs/store.md) show here side by side.")  # fmt: skip
        return
    # the machine sharing most commits with this one first
    runs = ctx["runs"]
    mine = set(runs[runs["machine"] == ctx["machine"]]["commit_hash"])
    shared = {n: len(mine & set(runs[runs["machine"] == n]["commit_hash"])) for n in others}
    others.sort(key=lambda n: (-shared[n], n))
    pickers = Pickers("Pick the machine and series")
    with pickers:
        wanted = st.query_params.get("other")
        other = st.selectbox("against", others, key="other",
                             index=others.index(wanted) if wanted in others else 0)  # fmt: skip
        chose("against", other)
    pair = (ctx["machine"], other)
    cells = query(ctx["path"], ctx["mtime"], ctx["branch"], "cells", machine=ctx["machine"])
    if cells.empty:
        st.info("No runs on this machine.")
        return
    with pickers:
        cells, bench = narrow(cells, "benchmark", "benchmark", "benchmark")
        cells, metric = narrow(cells, "metric", "metric", "metric")
        _, cell = narrow(cells, "param_key", "cell (the ratio over the commits)", "cell")
    # the newest commit both measured under one stack, from the runs (a query of its rows
    # only: a metric's every cell over years is millions of rows)
    both = runs[runs["machine"].isin(pair)]
    both = both.assign(stack=environment_stacks(both))
    per_stack = both.groupby(["commit_hash", "stack"])["machine"].nunique()
    common = per_stack[per_stack == 2].reset_index()
    if common.empty:
        st.info(f"No commit was measured on {ctx['machine']} and {other} under the same "
                f"{' and '.join(stack_fields(both)) or 'environment'}.")  # fmt: skip
        return
    times = both.groupby("commit_hash")["commit_time"].max()
    newest = times[common["commit_hash"]].idxmax()  # one lookup a commit took 0.19 s of 10,000
    stack = common[common["commit_hash"] == newest]["stack"].iloc[0]
    ids = set(both[(both["commit_hash"] == newest) & (both["stack"] == stack)]["run_id"])
    rows = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", benchmark=bench,
                 metric=metric, since=times[newest])  # fmt: skip
    rows = rows[rows["run_id"].isin(ids)].assign(unit=lambda d: d["unit"].fillna(""))
    table = rows.pivot_table(index=["param_key", "unit"], columns="machine", values="median")
    if table.empty or set(pair) - set(table.columns):
        st.info(f"{bench}.{metric} was not measured on both at {newest[:12]} ({stack}).")
        return
    table = table.reset_index().rename(columns={"param_key": "cell"})
    table["ratio"] = table[other] / table[ctx["machine"]]
    st.caption(
        f"Newest commit measured on both under one stack: {newest[:12]} ({stack}). ratio = "
        f"{other} / {ctx['machine']}: above 1, {other}'s value is larger (slower for a time, "
        "faster for a throughput)."
    )
    table = table[["cell", "unit", ctx["machine"], other, "ratio"]]
    static_table(table)
    download(table, "machines, newest commit", "machines-newest")
    line = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", benchmark=bench,
                 metric=metric, cell=cell)  # fmt: skip
    line = line[line["machine"].isin(pair)].assign(stack=lambda d: environment_stacks(d))
    per = line.groupby(["commit_hash", "stack", "machine"])["median"].median()
    per = per.unstack("machine").dropna()
    if per.empty or set(pair) - set(per.columns):
        return
    times = line.groupby("commit_hash")["commit_time"].max()
    ratio = per.reset_index().assign(commit_time=lambda d: d["commit_hash"].map(times),
                                     ratio=lambda d: d[other] / d[ctx["machine"]])  # fmt: skip
    # a line per environment (asv's conda-py3.12 and conda-py3.13 on both: one line across
    # them zigzagged between Pythons)
    color = "stack" if ratio["stack"].nunique() > 1 else None
    chart(ratio, "ratio", color, f"{bench}.{metric} {cell}: {other} / {ctx['machine']}",
          key="machines", y_title=f"{other} / {ctx['machine']}")  # fmt: skip


def environment_stacks(runs: pd.DataFrame) -> pd.Series:
    """Each run's environment where another harness names one (asv's ``conda-py3.10``: its
    conda and virtualenv runs of one Python apart), else its stack (``stacks``)."""
    env = environment_of(runs)
    return env.where(env != "", stacks(runs))
