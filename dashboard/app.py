"""The performance dashboard over the results store.

    python -m dashboard [--store results/perf.duckdb]     (or: make dashboard)
    streamlit run dashboard/app.py [-- --store ...]       (the same, its first page not warmed)

Pages: Overview, Dispatch floors, Speedups, Numeric drift, Compare, Versions, and Series (where
the overview's links lead). Everything is read through ``ragbench``'s store API and judged by
``ragbench.detect``; this file lays out and draws. ``$RAGBENCH_COMMIT_URL`` (e.g.
``https://github.com/org/ragged/commit/{}``) makes points link to their commit.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

# `streamlit run dashboard/app.py` puts dashboard/ on the path, not the repository
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import _catalogue as catalogue
from dashboard import PAGES, SEVERITY, paper
from ragbench import detect, stats
from ragbench.report import sensitivity_line
from ragbench.store import FAILED, Store, StoreError, default_path, history_branch, store_spec
from ragbench.verdicts import FAILING, MEANING, Headline, Status

POLICIES = detect.load_policies()
# Change points over a series' newest commits only: E-Divisive's permutation test costs
# O(n^2) a shuffle (one series of 400 commits: ~1 s; all 59 series of a quick grid at 200:
# 0.6 s, hence none on the overview, whose lookback needs only the last few runs).
CHANGE_POINT_COMMITS = 400
LOOKBACK_COMMITS = 50


# page name (dashboard.PAGES, the sidebar's order) -> the function that draws it
RENDER: dict[str, object] = {}


def draws(name: str):
    """Register the decorated function as the one that draws page ``name``."""

    def register(fn):
        RENDER[name] = fn
        return fn

    return register


def store_path() -> str | Path:
    """The store to show: a file's path, or a lake's string."""
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--store", type=store_spec, default=None)
    args, _ = ap.parse_known_args(sys.argv[1:])
    return args.store or default_path()


# --- reading the store: one read-only connection per query (a writer holds the file for one
# transaction at a time, so a page waits at most that long), cached until the file changes ---


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
    those ``series_filter`` selects: benchmark, metric), the acceptances marked."""
    runs = query(path, mtime, branch, "runs", machine=machine)
    times = runs.drop_duplicates("commit_hash")["commit_time"]
    since = times.iloc[min(last, len(times)) - 1].to_pydatetime() if len(times) else None
    s = reader(path, mtime, branch)
    rows = s.series(machine=machine, since=since, **series_filter)
    return detect.histories(rows, POLICIES, last=last, change_points=change_points,
                            acceptances=s.acceptances())  # fmt: skip


@st.cache_data(show_spinner=False, max_entries=64)
def comparison(path: str, mtime: float, base_ids: tuple, head_ids: tuple, detail: bool):
    s = reader(path, mtime, None)
    base, head = detect.cells(s, list(base_ids)), detect.cells(s, list(head_ids))
    return detect.compare(base, head, POLICIES, detail=detail)


@st.cache_data(show_spinner="finding change points ...", max_entries=64)
def line_change_points(df: pd.DataFrame, y: str, color: str | None) -> pd.DataFrame:
    """E-Divisive change points of each line of a chart (its newest CHANGE_POINT_COMMITS
    points), labelled environment where the environment key changes there, else code."""
    conf = POLICIES.main
    rows = []
    for name, line in df.groupby(color) if color else [(None, df)]:
        line = line.dropna(subset=[y]).sort_values("commit_time").tail(CHANGE_POINT_COMMITS)
        cps = stats.e_divisive(
            line[y].to_numpy(), alpha=float(conf.get("changepoint_alpha", 0.01)),
            permutations=int(conf.get("permutations", 199)), min_size=int(conf.get("min_size", 3)),
        )  # fmt: skip
        for i in cps:
            here, before = line.iloc[i], line.iloc[i - 1]
            cause = "environment" if here.get("env_key") != before.get("env_key") else "code"
            rows.append({"commit_time": here["commit_time"], "commit": here["commit_hash"][:12],
                         "cause": f"{name}: {cause}" if name is not None else cause})  # fmt: skip
    return pd.DataFrame(rows)


# --- drawing ---------------------------------------------------------------------------------


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
    tooltip = [
        "commit",
        alt.Tooltip("commit_time:T", title="commit time", format="%Y-%m-%d %H:%M"),
        alt.Tooltip(f"{y}:Q", format=".4g"),
    ]
    tooltip += [c for c in ("q25", "q75", "torch", "triton") if c in df]
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
    moves = stack_changes(df)
    if not moves.empty:
        layers.append(
            alt.Chart(moves)
            .mark_rule(color="gray", strokeDash=[2, 2])
            .encode(x="commit #:Q", tooltip=["stack change"])
        )
    if change_points is None and st.session_state.get("mark_change_points"):
        change_points = line_change_points(df, y, color)
    if change_points is not None and not change_points.empty:
        change_points = change_points.assign(
            **{"commit #": change_points["commit_time"].map(order)})  # fmt: skip
        layers.append(
            alt.Chart(change_points)
            .mark_rule(color="red")
            .encode(x="commit #:Q", tooltip=["commit", "cause"])
        )
    st.altair_chart(alt.layer(*layers).properties(title=title, height=280), width="stretch")
    download(df, title, key)


def stack_changes(df: pd.DataFrame) -> pd.DataFrame:
    """The commits (``commit #``) whose runs' stacks differ from the previous commit's, and
    what changed; drawn on every chart over commits as grey dotted lines."""
    if not {"torch", "triton"} <= set(df) or df.empty:
        return pd.DataFrame(columns=["commit #", "stack change"])
    per = df.assign(stack=stacks(df)).groupby("commit #")["stack"].agg(
        lambda x: " + ".join(sorted(set(x))))  # fmt: skip
    before = per.shift()
    moved = per[(per != before) & before.notna()]
    changes = [f"{before[i]} -> {moved[i]}" for i in moved.index]
    return pd.DataFrame({"commit #": moved.index, "stack change": changes})


def download(df: pd.DataFrame, title: str, key: str) -> None:
    """The data behind a chart or table, as CSV."""
    st.download_button(f"Download the data ({title})", df.to_csv(index=False),
                       file_name=f"{key}.csv", mime="text/csv", key=f"dl-{key}")  # fmt: skip


def filtered(df: pd.DataFrame, f: dict) -> pd.DataFrame:
    """Rows within the sidebar's date range and environments."""
    if df.empty:
        return df
    t = pd.to_datetime(df["commit_time"])
    keep = (t.dt.date >= f["since"]) & (t.dt.date <= f["until"])
    if f["torch"]:
        keep &= df["torch"].isin(f["torch"])
    if f["triton"]:
        keep &= df["triton"].isin(f["triton"])
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


# --- pages -----------------------------------------------------------------------------------


@draws("Overview")
def overview(ctx):
    st.header("Overview")
    runs = ctx["runs"]
    latest = runs.drop_duplicates("machine")
    for _, run in latest.iterrows():
        m = run["machine"]
        mine = runs[runs["machine"] == m]
        gpu = run["gpu"] if pd.notna(run["gpu"]) else "CPU"
        driver = run["driver"] if pd.notna(run["driver"]) else "none"
        st.subheader(f"{m}: {gpu}")
        st.caption(
            f"latest commit {run['commit_hash'][:12]} ({run['commit_time']}), torch "
            f"{run['torch']}, triton {run['triton']}, driver {driver}"
        )
        commits = mine["commit_hash"].unique()
        if len(commits) >= 2:
            head = tuple(mine[mine["commit_hash"] == commits[0]]["run_id"])
            base = tuple(mine[mine["commit_hash"] == commits[1]]["run_id"])
            c = comparison(ctx["path"], ctx["mtime"], base, head, False)
            # host-time cells of separate runs are inconclusive by design (they move 1.6-2.1x
            # between processes): judged only by a pull request's paired gate, not here
            judged = [
                v for v in c.verdicts if not (v.policy.paired and v.status == Status.INCONCLUSIVE)
            ]
            host = len(c.verdicts) - len(judged)
            c = detect.Comparison(judged, c.alpha)
            status = c.headline.upper()
            st.markdown(
                f"**Gate, latest commit against {commits[1][:12]}: {status}** - "
                f"{len(c.by_status('regression'))} regression(s), "
                f"{len(c.by_status('violation'))} bound violation(s), "
                f"{len(c.by_status('failed'))} failed, {len(c.by_status('missing'))} missing, "
                f"{len(c.by_status('improvement'))} improvement(s), "
                f"{len(c.by_status('unchanged'))} unchanged, "
                f"{len(c.by_status('inconclusive'))} inconclusive"
            )
            st.caption(" ".join(sensitivity_line(c)) + f" Separate runs from the store: "
                       f"{host} host-time cell(s) not judged here (a pull request's gate "
                       "times both sides in one process).")  # fmt: skip
            found = [(v.key, v.status, v.change) for v in c.verdicts if v.status in FOUND]
            links(m, found)
        failed = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", machine=m,
                       status=FAILED)  # fmt: skip
        failed = failed[failed["commit_hash"] == run["commit_hash"]]
        if not failed.empty:
            st.error(f"{len(failed)} cell(s) failed on the latest commit (the benchmark raised):")
            links(m, [((r.benchmark, r.metric, r.param_key), Status.FAILED, None)
                      for r in failed.itertuples()])  # fmt: skip
        # the lookback only: change points are drawn on each series' own page (0.6 s saved)
        reports = histories(ctx["path"], ctx["mtime"], ctx["branch"], m, LOOKBACK_COMMITS,
                            False)  # fmt: skip
        flagged = [r for r in reports if r.status in FOUND]
        st.markdown(
            f"Newest run against its lookback (median and MAD of the previous runs in the same "
            f"environment): {len(flagged)} flagged series of {len(reports)}."
        )
        links(m, [(r.key, r.status, r.latest_change) for r in flagged])
        sparklines(flagged[:SPARKLINES])


SPARKLINES = 6  # small charts of flagged series on the overview, at most


def sparklines(reports) -> None:
    """A small chart of each flagged series' recent runs (the newest is the one judged)."""
    if not reports:
        return
    import altair as alt  # 0.4 s of imports, paid only once a page draws a chart

    for col, r in zip(st.columns(min(3, len(reports))) * 2, reports, strict=False):
        df = pd.DataFrame({"commit #": range(1, len(r.points) + 1),
                           "value": [p.value for p in r.points],
                           "commit": [p.commit_hash[:12] for p in r.points]})  # fmt: skip
        col.altair_chart(
            alt.Chart(df).mark_line(point=True).encode(
                x=alt.X("commit #:Q", title=None, axis=alt.Axis(format="d")),
                y=alt.Y("value:Q", title=r.unit, scale=alt.Scale(zero=False)),
                tooltip=["commit", alt.Tooltip("value:Q", format=".4g")],
            ).properties(title=f"{r.key[1]} {r.key[2]}"[:60], height=120),
            width="stretch",
        )  # fmt: skip


FOUND = (
    Status.REGRESSION,
    Status.ACCEPTED,
    Status.IMPROVEMENT,
    Status.VIOLATION,
    Status.FAILED,
    Status.MISSING,
    Status.INCONCLUSIVE,
)


def links(machine: str, found: list[tuple]) -> None:
    """A table of flagged cells, each linking to its series page."""
    if not found:
        return
    lines = ["| series | status | change (+: worse) |", "|---|---|---|"]
    for (bench, metric, cell), status, change in found:
        query = {"page": "Series", "machine": machine, "benchmark": bench, "metric": metric,
                 "cell": cell}  # fmt: skip
        lines.append(f"| [{bench}.{metric} {cell}](?{urlencode(query)}) | {status} | "
                     f"{worse_by(change)} |")  # fmt: skip
    st.markdown("\n".join(lines))
    legend([status for _, status, _ in found])


@draws("Dispatch floors")
def dispatch_floors(ctx):
    st.header("Dispatch floors")
    st.caption(
        "call_us, gpu_us and dispatch_us at the smallest workload (BS 1, 80% pruned), "
        "per backend, over commits"
    )
    df = filtered(
        query(ctx["path"], ctx["mtime"], ctx["branch"], "dispatch_floors", machine=ctx["machine"]),
        ctx,
    )
    if df.empty:
        st.info("No dispatch-floor runs on this machine (a GPU suite measures them).")
        return
    df, _ = narrow(df, "geometry", "geometry", "geometry")
    for metric in ("call_us", "gpu_us", "dispatch_us"):
        rules = (
            [
                (f"paper, {b}, BS 32/80% call", paper.KERNEL_CALL_US[(32, 0.8)][b], "grey")
                for b in ("triton", "fa2")
            ]
            if ctx["paper"] and metric == "call_us"
            else None
        )
        chart(df, metric, "backend", metric, rules=rules, key=f"floor-{metric}", y_title="us")


@draws("Speedups")
def speedups(ctx):
    st.header("Speedups")
    st.caption(
        "triton (or another candidate) against each other backend or pipeline in the "
        "same run and cell: >1 means the candidate is faster"
    )
    candidate = st.selectbox("candidate", catalogue.candidates(), key="candidate")
    df = filtered(
        query(
            ctx["path"],
            ctx["mtime"],
            ctx["branch"],
            "speedups",
            candidate=candidate,
            machine=ctx["machine"],
        ),
        ctx,
    )
    if df.empty:
        st.info("No speedups for this candidate on this machine.")
        return
    df, bench = narrow(df, "benchmark", "benchmark", "benchmark")
    df, metric = narrow(df, "metric", "metric", "metric")
    df, cell = narrow(df, "group_key", "cell (model, batch size, pruning method ...)", "cell")
    baselines = sorted(df["baseline"].unique())
    chosen = [b for b in catalogue.DEFAULT_BASELINES if b in baselines] or baselines
    chosen = st.multiselect("against", baselines, default=chosen, key="baselines")
    df = df[df["baseline"].isin(chosen)]
    rules = []
    if ctx["paper"]:
        params = cell_params(cell)
        for b in chosen:
            if bench.startswith("pipeline.") and "batch" in params:
                ref = paper.e2e_speedup(int(params["batch"]), b)
            elif bench.startswith("kernel.") and "batch" in params and metric == "call_us":
                ref = paper.kernel_speedup(int(params["batch"]), float(params["prune"]), b)
            else:
                ref = None
            if ref:
                rules.append((f"paper vs {b}", ref, "grey"))
    chart(
        df,
        "speedup",
        "baseline",
        f"{candidate} speedup, {bench}.{metric}",
        rules=rules,
        key="speedups",
        y_title="x",
    )


@draws("Numeric drift")
def numeric_drift(ctx):
    st.header("Numeric drift")
    st.caption("logits against padded_max over the same keep masks; dashed: the gate's bounds")
    df = filtered(
        query(ctx["path"], ctx["mtime"], ctx["branch"], "drift", machine=ctx["machine"]), ctx
    )
    if df.empty:
        st.info("No drift runs on this machine.")
        return
    df, bench = narrow(df, "benchmark", "benchmark", "benchmark")
    df, _ = narrow(df, "group_key", "model and method", "cell")
    bound = POLICIES.for_metric(bench, "max_abs_diff")
    rules = [(f"bound {bound.max}", bound.max, "red")] if bound.max is not None else []
    if ctx["paper"]:
        rules.append(("paper's largest (BS 4)", paper.MAX_ABS_LOGIT_DIFF, "grey"))
    st.caption(
        "log axes: drift of 1e-7 and a bound of 1e-4 on one chart; the reference "
        "itself (0) is not drawn"
    )
    chart(df, "max_abs_diff", "backend", "max |logit difference|", rules=rules, key="drift-max",
          log=True)  # fmt: skip
    chart(df, "mean_abs_diff", "backend", "mean |logit difference|", key="drift-mean", log=True)
    chart(
        df,
        "top1_agreement",
        "backend",
        "top-1 agreement",
        rules=[("required", 1.0, "red")],
        key="drift-top1",
    )


@draws("Compare")
def compare(ctx):
    st.header("Compare two commits")
    runs = ctx["runs"][ctx["runs"]["machine"] == ctx["machine"]]
    commits = list(dict.fromkeys(runs["commit_hash"]))
    if len(commits) < 2:
        st.info("This machine has fewer than two commits in the store.")
        return
    label = {
        c: f"{c[:12]} ({runs[runs['commit_hash'] == c]['commit_time'].iloc[0]})" for c in commits
    }
    col1, col2 = st.columns(2)
    base = col1.selectbox("base", commits, index=1, format_func=label.get, key="base")
    head = col2.selectbox("head", commits, index=0, format_func=label.get, key="head")
    ids = {c: tuple(runs[runs["commit_hash"] == c]["run_id"]) for c in (base, head)}
    c = comparison(ctx["path"], ctx["mtime"], ids[base], ids[head], True)
    rows = [
        {
            "status": v.status,
            "change (+: worse)": worse_by(v.change),
            "metric": f"{v.key[0]}.{v.key[1]}",
            "cell": v.key[2],
            "head/base 95%": f"{v.interval[0]:.3f}-{v.interval[1]:.3f}" if v.interval else "",
            "p (Holm)": v.p_adj,
            "base": _shown(v.base, v.unit),
            "head": _shown(v.head, v.unit),
            "note": v.note,
            "_rank": (
                SEVERITY.index(v.status) if v.status in SEVERITY else len(SEVERITY),
                -abs(v.change or 0.0),
            ),
        }
        for v in c.verdicts
        if v.status != Status.INFO
    ]
    df = pd.DataFrame(rows).sort_values("_rank", kind="stable").drop(columns="_rank")
    # the notes are sentences, the same for many rows: numbered in the table, written below it
    # (a note column cut the table's right edge at a 1400 px window)
    notes = list(dict.fromkeys(n for n in df["note"] if n))
    headline = c.headline.upper()
    st.markdown(
        f"**{headline}**: " + ", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items())
    )
    widths = {"status": 95, "change (+: worse)": 115, "metric": 205, "cell": 185,
              "head/base 95%": 105, "p (Holm)": 65, "base": 60, "head": 60, "note": 45}  # fmt: skip
    columns = {k: st.column_config.Column(width=w) for k, w in widths.items()}
    numbered = df.assign(note=[f"[{notes.index(n) + 1}]" if n else "" for n in df["note"]])
    st.dataframe(numbered, width="stretch", hide_index=True, column_config=columns)
    if notes:
        st.caption("  \n".join(f"[{i}] {n}" for i, n in enumerate(notes, 1)))
    legend(df["status"])
    download(df, "compare", "compare")


def _shown(value, unit: str | None) -> str:
    """A table value: hashes in hex, numbers to 4 significant digits."""
    if value is None:
        return ""
    if unit == "hash":
        return f"{int(value):012x}"
    return f"{value:.4g}"


def pick_series(ctx):
    """One series of the machine, chosen on the page: -> (its rows, benchmark, metric, cell),
    or None (with a message) when the machine has no runs."""
    df = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", machine=ctx["machine"])
    if df.empty:
        st.info("No runs on this machine.")
        return None
    df, bench = narrow(df, "benchmark", "benchmark", "benchmark")
    df, metric = narrow(df, "metric", "metric", "metric")
    df, cell = narrow(df, "param_key", "cell", "cell")
    return df, bench, metric, cell


def stacks(runs: pd.DataFrame) -> pd.Series:
    """Each run's stack, as the Versions page names it: ``torch 2.15.0, triton 3.9.0``."""
    return "torch " + runs["torch"].fillna("?") + ", triton " + runs["triton"].fillna("?")


def _version_key(stack: str) -> tuple:
    """Order stacks by their torch, then triton version (2.9 before 2.10)."""
    return tuple(int(n) if n.isdigit() else 0 for n in re.findall(r"\d+|\?", stack))


@draws("Versions")
def versions(ctx):
    st.header("Versions")
    runs = ctx["runs"][ctx["runs"]["machine"] == ctx["machine"]]
    runs = runs.assign(stack=stacks(runs))
    per_commit = runs.groupby("commit_hash", sort=False)["stack"].nunique()
    commits = [c for c in dict.fromkeys(runs["commit_hash"]) if per_commit[c] >= 2]
    if commits:
        upgrade_reports(ctx, runs, commits)
    else:
        st.info("No commit on this machine was measured under more than one stack yet: "
                "`ragbench run --env SPEC` runs the suite under another torch/triton "
                "(docs/versions.md).")  # fmt: skip
    stack_heatmap(ctx)


def upgrade_reports(ctx, runs: pd.DataFrame, commits: list[str]) -> None:
    """For one commit: every cell under each stack measured on it, and the gate's
    verdict of each stack against a reference stack (what ``ragbench versions`` reports)."""
    label = {c: f"{c[:12]} ({runs[runs['commit_hash'] == c]['commit_time'].iloc[0]})"
             for c in commits}  # fmt: skip
    wanted = st.query_params.get("commit", "")
    index = next((i for i, c in enumerate(commits) if wanted and c.startswith(wanted)), 0)
    col1, col2 = st.columns(2)
    commit = col1.selectbox("commit (measured under several stacks)", commits, index=index,
                            format_func=label.get, key="versions-commit")  # fmt: skip
    here = runs[runs["commit_hash"] == commit]
    names = sorted(here["stack"].unique(), key=_version_key)
    ref = col2.selectbox("against", names, index=0, key="versions-ref")
    ids = {n: tuple(here[here["stack"] == n]["run_id"]) for n in names}
    table: dict[tuple, dict] = {}
    verdicts, statuses = [], []
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
                                           ref: _shown(v.base, v.unit)})  # fmt: skip
            word = "" if v.status == Status.UNCHANGED else f" · {v.status} {worse_by(v.change)}"
            row[name] = (_shown(v.head, v.unit) + word).strip()
            statuses.append(v.status)
    st.markdown("\n".join(verdicts))
    if table:
        df = pd.DataFrame(list(table.values()))
        st.caption(f"Each stack's value; where it is not unchanged against {ref}, the verdict "
                   "after a dot.")  # fmt: skip
        widths = {"metric": 170, "cell": 220}
        columns = {k: st.column_config.Column(width=w) for k, w in widths.items()}
        st.dataframe(df, width="stretch", hide_index=True, column_config=columns)
        legend(statuses)
        download(df, "versions of one commit", "versions-commit")
    st.caption(f"{len(ids[ref])} run(s) of {ref}; "
               + ", ".join(f"{len(ids[n])} of {n}" for n in names if n != ref)
               + ". Host-time cells of separate processes are inconclusive unless they moved "
                 "beyond 100% (two stacks cannot share a process).")  # fmt: skip


def stack_heatmap(ctx) -> None:
    """One metric across torch x triton over every commit of the machine."""
    import altair as alt  # 0.4 s of imports, paid only once a page draws a chart

    st.subheader("One metric across all commits")
    st.caption("torch x triton on this machine (median over runs)")
    picked = pick_series(ctx)
    if picked is None:
        return
    df, bench, metric, cell = picked
    grid = df.groupby(["torch", "triton"], dropna=False)["median"].agg(["median", "count"])
    grid = grid.reset_index().rename(columns={"median": "value", "count": "runs"})
    heat = (
        alt.Chart(grid)
        .mark_rect()
        .encode(
            x="triton:N",
            y="torch:N",
            color=alt.Color("value:Q", scale=alt.Scale(scheme="viridis")),
            tooltip=["torch", "triton", alt.Tooltip("value:Q", format=".4g"), "runs"],
        )
    )
    text = (
        alt.Chart(grid)
        .mark_text(color="white")
        .encode(x="triton:N", y="torch:N", text=alt.Text("value:Q", format=".4g"))
    )
    st.altair_chart(
        (heat + text).properties(title=f"{bench}.{metric} {cell}", height=240),
        width="stretch",
    )
    download(grid, "versions", "versions")


@draws("Machines")
def machines(ctx):
    """The sidebar's machine against another on the commits both measured under the same
    stack: each cell's value on both, and their ratio over the commits."""
    import altair as alt

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
    wanted = st.query_params.get("other")
    other = st.selectbox("against", others, key="other",
                         index=others.index(wanted) if wanted in others else 0)  # fmt: skip
    df = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", machine=ctx["machine"])
    if df.empty:
        st.info("No runs on this machine.")
        return
    df, bench = narrow(df, "benchmark", "benchmark", "benchmark")
    _, metric = narrow(df, "metric", "metric", "metric")
    both = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", benchmark=bench,
                 metric=metric)  # fmt: skip
    both = both[both["machine"].isin([ctx["machine"], other])]
    same = ["commit_hash", "torch", "triton", "param_key"]
    per = (
        both.groupby([*same, "machine"], dropna=False)
        .agg(value=("median", "median"), commit_time=("commit_time", "max"), unit=("unit", "first"))
        .reset_index()
    )
    wide = per.pivot_table(index=[*same, "unit"], columns="machine", values="value",
                           dropna=True).dropna()  # fmt: skip
    if wide.empty or {ctx["machine"], other} - set(wide.columns):
        st.info(f"No commit of {bench}.{metric} was measured on {ctx['machine']} and {other} "
                "under the same torch and triton.")  # fmt: skip
        return
    wide = wide.reset_index()
    wide["commit_time"] = wide["commit_hash"].map(per.groupby("commit_hash")["commit_time"].max())
    wide["ratio"] = wide[other] / wide[ctx["machine"]]
    newest = wide[wide["commit_time"] == wide["commit_time"].max()]
    st.caption(
        f"Newest commit measured on both under one stack: "
        f"{newest['commit_hash'].iloc[0][:12]} (torch {newest['torch'].iloc[0]}, triton "
        f"{newest['triton'].iloc[0]}). ratio = {other} / {ctx['machine']}: above 1, "
        f"{other}'s value is larger (slower for a time, faster for a throughput)."
    )
    table = newest[["param_key", "unit", ctx["machine"], other, "ratio"]].rename(
        columns={"param_key": "cell"}
    )
    st.dataframe(table, width="stretch", hide_index=True)
    download(table, "machines, newest commit", "machines-newest")
    line = (
        alt.Chart(wide)
        .mark_line(point=True)
        .encode(
            x=alt.X("commit_time:T", title="commit time"),
            y=alt.Y("ratio:Q", title=f"{other} / {ctx['machine']}", scale=alt.Scale(zero=False)),
            color=alt.Color("param_key:N", title="cell"),
            tooltip=["commit_hash", "torch", "triton", "param_key",
                     alt.Tooltip("ratio:Q", format=".3f")],
        )
    )  # fmt: skip
    st.altair_chart(line.properties(title=f"{bench}.{metric}: {other} / {ctx['machine']}",
                                    height=320), width="stretch")  # fmt: skip
    download(wide, "machines over the commits", "machines")


@draws("Series")
def series(ctx):
    st.header("Series")
    picked = pick_series(ctx)
    if picked is None:
        return
    df, bench, metric, cell = picked
    df = filtered(df, ctx)
    params = cell_params(cell)
    reports = histories(ctx["path"], ctx["mtime"], ctx["branch"], ctx["machine"],
                        CHANGE_POINT_COMMITS, benchmark=bench, metric=metric,
                        params=params)  # fmt: skip
    report = next((r for r in reports if r.key == (bench, metric, cell)), None)
    cps = None
    if report and (report.change_points or report.accepted):

        def cause(i):
            if i in report.accepted:
                return "accepted (the new baseline)"
            return (
                ("environment: " + report.describe_change(i)) if i in report.env_changes else "code"
            )

        cps = pd.DataFrame(
            [
                {"commit_time": report.points[i].commit_time,
                 "commit": report.points[i].commit_hash[:12], "cause": cause(i)}
                for i in sorted({*report.change_points, *report.accepted})
            ]
        )  # fmt: skip
    failed = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", machine=ctx["machine"],
                   benchmark=bench, metric=metric, params=params, status=FAILED)  # fmt: skip
    if not failed.empty:
        st.error("Failed (the benchmark raised) on " + ", ".join(
            sorted({c[:12] for c in failed["commit_hash"]})))  # fmt: skip
    chart(
        df,
        "median",
        None,
        f"{bench}.{metric} {cell}",
        change_points=cps,
        key="series",
        y_title=str(df["unit"].iloc[0]) if not df.empty else None,
    )
    st.caption("Grey dotted lines: the stack (torch, triton) changed at that commit; the "
               "hover says from what to what.")  # fmt: skip
    if report:
        st.caption(
            f"status of the newest run: {report.status}; change points (red, over the newest "
            f"{CHANGE_POINT_COMMITS} commits): {len(report.change_points)}; accepted changes: "
            f"{len(report.accepted)}"
        )


if set(RENDER) != set(PAGES):  # a page in the sidebar that nothing draws, or the reverse
    raise RuntimeError(f"pages without a function: {set(PAGES) ^ set(RENDER)}")


def main() -> None:
    st.set_page_config(page_title="ragged performance", layout="wide")
    path = store_path()
    st.sidebar.title("ragged performance")
    if isinstance(path, Path) and not path.exists():
        st.title("ragged performance")
        st.info(
            f"No results store at `{path}`. Fill it: `make demo` (benchmarks the last "
            "commits here), or `.venv/bin/ragbench ingest <asv results dir>`; point the "
            "dashboard at another file with `-- --store PATH` or `$RAGBENCH_STORE`."
        )
        return
    try:
        show(path)
    except (StoreError, ValueError) as exc:  # not a ragbench store, another schema, locked for
        # a minute, a lake string that names no catalog
        st.error(f"The results store cannot be read: {exc}")


def show(path: str | Path) -> None:
    """The sidebar and the chosen page over the store at ``path`` (a file or a lake)."""
    store = Store(path, read_only=True)
    mtime = store.mtime  # the file's time, or the lake's snapshot
    branches = query(str(path), mtime, "", "branches")
    named = [b for b in branches if b is not None]
    default = history_branch() if history_branch() in named else (named or [history_branch()])[0]
    branch = st.sidebar.selectbox(
        "branch (the history)", named or [default], index=(named or [default]).index(default),
        key="branch",
    )  # fmt: skip
    runs = query(str(path), mtime, branch, "runs")
    if runs.empty:
        st.title("ragged performance")
        unnamed = branches.get(None, 0)
        st.info(
            f"The store `{path}` holds no runs of branch `{branch}` yet. Fill it: `make demo`, "
            "or `.venv/bin/ragbench ingest --branch main <asv results dir>`."
            + (f" ({unnamed} run(s) were ingested without a branch.)" if unnamed else "")
        )
        return
    wanted = st.query_params.get("page", "Overview")
    page = st.sidebar.radio("page", PAGES, index=PAGES.index(wanted) if wanted in PAGES else 0)
    gpus = runs.drop_duplicates("machine").set_index("machine")["gpu"].fillna("CPU").to_dict()
    machine = pick("machine", list(gpus), "machine") if page != "Overview" else None
    if machine:
        st.sidebar.caption(f"GPU: {gpus[machine]}")
    mine = runs if machine is None else runs[runs["machine"] == machine]
    times = pd.to_datetime(mine["commit_time"]).dt.date
    with st.sidebar:
        since, until = times.min(), times.max()
        picked = st.date_input("commit dates", (since, until), min_value=since, max_value=until)
        if isinstance(picked, tuple) and len(picked) == 2:
            since, until = picked
        torch_v = st.multiselect("torch", sorted(mine["torch"].dropna().unique()))
        triton_v = st.multiselect("triton", sorted(mine["triton"].dropna().unique()))
        overlay = st.checkbox("the paper's figures (RTX 4000 Ada)", value=False)
        st.checkbox(
            f"mark change points on every chart (E-Divisive, newest {CHANGE_POINT_COMMITS} "
            "commits; seconds on first use)", value=False, key="mark_change_points",
        )  # fmt: skip
        st.caption(f"store: {store.name}")
    ctx = {
        "path": str(path),
        "mtime": mtime,
        "branch": branch,
        "runs": runs,
        "machine": machine,
        "since": since,
        "until": until,
        "torch": torch_v,
        "triton": triton_v,
        "paper": overlay,
    }
    RENDER[page](ctx)


main()
