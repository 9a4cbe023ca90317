"""The performance dashboard over the results store.

    python -m dashboard [--store results/perf.duckdb]     (or: make dashboard)
    streamlit run dashboard/app.py [-- --store ...]       (the same, its first page not warmed)

Pages: Overview (overview.py), Alerts (alerts.py), Dispatch floors, Speedups, Numeric drift,
Compare, Versions and Machines (environments.py), and Series (where
the overview's links lead). Everything is read through ``ragbench``'s store API and judged by
``ragbench.history.series`` and ``ragbench.verdicts.comparison``; this file lays out and draws.
``$RAGBENCH_COMMIT_URL`` (e.g. ``https://github.com/org/ragged/commit/{}``) makes points link
to their commit.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pandas as pd
import streamlit as st

# `streamlit run dashboard/app.py` puts dashboard/ on the path, not the repository
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.support import catalogue
from dashboard import (
    PAGES,
    RENDER,
    SEVERITY,
    alerts,  # its page registers itself on import; any_new picks the landing page
    draws,
    environments,  # noqa: F401  (its pages register themselves on import)
    overview,  # noqa: F401  (its page registers itself on import)
    paper,
    url_path,
)
from dashboard.draw import (
    Pickers,
    cell_params,
    changed_table,
    chart,
    chose,
    download,
    environment,
    environment_of,
    environments_of,
    failed_commits,
    filtered,
    legend,
    narrow,
    pick,
    pick_environment,
    pick_series,
    shown,
    stack_fields,
    stacks,
    version_key,
)
from dashboard.read import (
    CHANGE_POINT_COMMITS,
    SUITE_PAGES,
    asv_project,
    comparison,
    histories,
    policies,
    project,
    query,
    store_path,
    suite_pages,
    warm_page,
)
from ragbench.store import FAILED, Store, StoreError, history_branch
from ragbench.store.schema import SPEED_UNITS
from ragbench.verdicts.status import FAILING, Status, verdict_words

# --- pages -----------------------------------------------------------------------------------


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
    with Pickers("Pick the geometry"):
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
    pickers = Pickers("Pick the speedups")
    with pickers:
        candidate = pick("candidate", catalogue.candidates(), "candidate",
                         default=catalogue.candidates()[0])  # fmt: skip
    # the pickers from the machine's catalogue of cells, then one cell's speedups (every
    # speedup of a machine over years: millions of rows)
    cells = query(ctx["path"], ctx["mtime"], ctx["branch"], "cells", machine=ctx["machine"])
    cells = cells[(cells["variant"] == candidate) & cells["unit"].isin(SPEED_UNITS)]
    if cells.empty:
        st.info("No speedups for this candidate on this machine.")
        return
    with pickers:
        cells, bench = narrow(cells, "benchmark", "benchmark", "benchmark")
        cells, metric = narrow(cells, "metric", "metric", "metric")
        _, cell = narrow(cells, "group_key", "cell (model, batch size, pruning method ...)",
                         "cell")  # fmt: skip
    df = filtered(
        query(ctx["path"], ctx["mtime"], ctx["branch"], "speedups", candidate=candidate,
              machine=ctx["machine"], benchmark=bench, metric=metric, group_key=cell),
        ctx,
    )  # fmt: skip
    if df.empty:
        st.info(f"No speedups of {candidate} in {bench}.{metric} {cell} for these filters.")
        return
    baselines = sorted(df["baseline"].unique())
    chosen = [b for b in catalogue.DEFAULT_BASELINES if b in baselines] or baselines
    with pickers:
        chosen = st.multiselect("against", baselines, default=chosen, key="baselines")
        chose("against", ", ".join(chosen))
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
    with Pickers("Pick the series"):
        df, bench = narrow(df, "benchmark", "benchmark", "benchmark")
        df, _ = narrow(df, "group_key", "model and method", "cell")
    bound = ctx["policies"].for_metric(bench, "max_abs_diff")
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
    top1 = ctx["policies"].for_metric(bench, "top1_agreement")
    rules = [(f"bound {top1.min}", top1.min, "red")] if top1.min is not None else []
    chart(df, "top1_agreement", "backend", "top-1 agreement", rules=rules, key="drift-top1")


# The commits each Compare picker offers, newest first, of those in the sidebar's dates: two
# pickers of all 10,000 commits sent 720 kB of options a load on the 10,000-run store.
COMMIT_CHOICES = 500


@draws("Compare")
def compare(ctx):
    st.header("Compare two commits")
    runs = ctx["runs"][ctx["runs"]["machine"] == ctx["machine"]]
    # one environment at a time, as `ragbench gate --stored --environment` (two Pythons'
    # samples pooled, or one against the other, read as a change of the code)
    pickers = Pickers("Pick the commits")
    with pickers:
        env = pick_environment(environments_of(runs), "compare-environment")
    if env:
        runs = runs[environment_of(runs) == env]
        st.caption(f"Runs of the environment `{env}` only; another environment is another "
                   "comparison.")  # fmt: skip
    # one row a commit, newest first (a mask a commit took 40 s over 10,000 commits)
    commits = runs.drop_duplicates("commit_hash")[["commit_hash", "commit_time"]]
    if len(commits) < 2:
        st.info("This machine has fewer than two commits in the store"
                + (f" in the environment `{env}`." if env else "."))  # fmt: skip
        return
    dated = filtered(commits, ctx)
    if len(dated) < 2:
        st.info("Fewer than two commits of this machine in the sidebar's commit dates.")
        return
    offered = dated.head(COMMIT_CHOICES)
    label = dict(zip(offered["commit_hash"],
                     offered["commit_hash"].str[:12] + " (" + offered["commit_time"].astype(str)
                     + ")", strict=True))  # fmt: skip
    with pickers:
        col1, col2 = st.columns(2)
        base = col1.selectbox("base", list(label), index=1, format_func=label.get, key="base")
        head = col2.selectbox("head", list(label), index=0, format_func=label.get, key="head")
        chose("base", label[base])
        chose("head", label[head])
    if len(dated) > COMMIT_CHOICES:
        st.caption(f"The newest {COMMIT_CHOICES} of the {len(dated)} commits in the sidebar's "
                   "commit dates: narrow the dates to pick an older one.")  # fmt: skip
    ids = {c: tuple(runs[runs["commit_hash"] == c]["run_id"]) for c in (base, head)}
    moved = stack_moved(runs, base, head)
    if moved:  # this suite's runs: one series across stacks, but a pair the gate refuses
        st.warning(f"Base and head ran under different stacks ({moved}): a change of the "
                   "stack as well as the code (`ragbench gate --stored` compares them only "
                   "with --across-environments).")  # fmt: skip
    c = comparison(ctx["path"], ctx["mtime"], ids[base], ids[head], True)
    rows = [
        {
            "status": v.status,
            "change": verdict_words(v),
            "metric": f"{v.key[0]}.{v.key[1]}",
            "cell": v.key[2],
            "head/base 95%": f"{v.interval[0]:.3f}-{v.interval[1]:.3f}" if v.interval else "",
            "p (Holm)": f"{v.p_adj:.2g}" if v.p_adj is not None else "",
            "base": shown(v.base, v.unit),
            "head": shown(v.head, v.unit),
            "note": v.note,
            "_rank": (
                SEVERITY.index(v.status) if v.status in SEVERITY else len(SEVERITY),
                -abs(v.change or 0.0),
            ),
        }
        for v in c.verdicts
        if v.status != Status.INFO
    ]
    if not rows:  # every cell's policy is info: nothing was judged, and nothing passed
        st.markdown(f"**{c.headline.upper()}**: no cell of these commits is judged")
        st.info(
            f"All {len(c.verdicts)} cell(s) are info under the policies: shown on the "
            "Series page, never judged. Give the dashboard a policies file that judges "
            "them: `python -m dashboard --policies FILE` (`make dashboard POLICIES=FILE`)."
        )
        return
    df = pd.DataFrame(rows).sort_values("_rank", kind="stable").drop(columns="_rank")
    # the notes are sentences, the same for many rows: numbered in the table, written below it
    # (a note column cut the table's right edge at a 1400 px window)
    notes = list(dict.fromkeys(n for n in df["note"] if n))
    headline = c.headline.upper()
    st.markdown(
        f"**{headline}**: " + ", ".join(f"{n} {s}" for s, n in df["status"].value_counts().items())
    )
    numbered = df.assign(note=[f"[{notes.index(n) + 1}]" if n else "" for n in df["note"]])
    # the unchanged cells, most of a comparison (62 of django-asv's 66), drawn once opened
    changed_table(numbered, numbered["status"] == Status.UNCHANGED, "unchanged cell(s)",
                  "compare-unchanged")  # fmt: skip
    if notes:
        st.caption("  \n".join(f"[{i}] {n}" for i, n in enumerate(notes, 1)))
    legend(df["status"])
    download(df, "compare", "compare")


def stack_moved(runs: pd.DataFrame, base: str, head: str) -> str | None:
    """Where base's and head's runs name other stacks (torch, triton ...): ``X -> Y``."""
    if not stack_fields(runs):
        return None
    named = runs.assign(stack=stacks(runs))
    b, h = (" + ".join(sorted(set(named[named["commit_hash"] == c]["stack"])))
            for c in (base, head))  # fmt: skip
    return f"{b} -> {h}" if b != h else None


@draws("Series")
def series(ctx):
    st.header("Series")
    pickers = Pickers("Pick the series")
    picked = pick_series(ctx, pickers)
    if picked is None:
        return
    df, bench, metric, cell = picked
    df = filtered(df, ctx)
    df = df.assign(environment=environment_of(df))
    # one line per environment, as ragbench's history keeps them apart (asv's Pythons: one
    # line across them zigzagged between environments)
    envs = environments_of(df.iloc[::-1])  # the newest run's first
    with pickers:
        env = pick_environment(envs, "series-environment", every=True)
    if env is not None:
        df = df[df["environment"] == env]
    several = env is None and len(envs) > 1
    params = cell_params(cell)
    reports = [r for r in histories(ctx["path"], ctx["mtime"], ctx["branch"], ctx["machine"],
                                    CHANGE_POINT_COMMITS, benchmark=bench, metric=metric,
                                    params=params)
               if r.key == (bench, metric, cell)
               and (env is None or (r.environment or "") == env)]  # fmt: skip
    cps = [
        {"commit_time": r.points[i].commit_time, "commit": r.points[i].commit_hash[:12],
         "cause": (f"{r.environment}: " if several else "") + change_cause(r, i)}
        for r in reports for i in sorted({*r.change_points, *r.accepted})
    ]  # fmt: skip
    failed = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", machine=ctx["machine"],
                   benchmark=bench, metric=metric, cell=cell, status=FAILED)  # fmt: skip
    failed = failed.assign(environment=environment_of(failed))
    if env is not None:
        failed = failed[failed["environment"] == env]
    if not failed.empty:
        failed_commits(failed, several)
    chart(
        df,
        "median",
        "environment" if several else None,
        f"{bench}.{metric} {cell}" + (f" ({env})" if env else ""),
        change_points=pd.DataFrame(cps) if cps else None,
        key="series",
        y_title=unit_of(df, metric),
        project=asv_project(ctx["path"], ctx["mtime"], ctx["machine"]),
    )
    st.caption("Grey dotted lines: the stack (torch, triton) changed at that commit; the "
               "hover says from what to what.")  # fmt: skip
    for report in reports:
        status = f"{report.status}" + (f" ({report.note})" if report.note else "")
        if report.stale:
            status = (f"stale: the last point ({report.points[-1].commit_hash[:12]}, "
                      f"{report.stale_since}) is older than the machine's newest run, so no "
                      "newest run is judged")  # fmt: skip
        shown = st.error if report.status in FAILING else st.caption
        where = f" in {report.environment}" if several else ""
        shown(
            f"status of the newest run{where}: {status}; change points (red, over the newest "
            f"{CHANGE_POINT_COMMITS} commits): {len(report.change_points)}; accepted changes: "
            f"{len(report.accepted)}"
        )
    series_alerts(ctx, (bench, metric, cell), env)


def change_cause(report, i: int) -> str:
    """Why the series moved at its point ``i``: accepted, or the environment, asv's number,
    or the code."""
    if i in report.accepted:
        return "accepted (the new baseline)"
    return report.describe_change(i)


def series_alerts(ctx, key: tuple, env: str | None) -> None:
    """The open alerts of main that hold this series' cell (in ``env``, or any), as failing."""
    from dashboard.alerts import alert_list
    from ragbench.history.alerting import OPEN, cell_words

    for a in alert_list(ctx["path"], ctx["mtime"], ctx["branch"]):
        if a["machine"] != ctx["machine"] or a["state"] not in OPEN:
            continue
        for c in a["cells"]:
            if (c["benchmark"], c["metric"], c["param_key"]) != key:
                continue
            if env is not None and (c["environment"] or "") != env:
                continue
            change, interval = cell_words(c)
            where = f" in {c['environment']}" if c["environment"] else ""
            st.error(f"{a['state']} alert at {a['commit_hash'][:12]}{where}: {change}"
                     + (f", after/before {interval}" if interval else "")
                     + " (the Alerts page)")  # fmt: skip


def unit_of(df: pd.DataFrame, metric: str) -> str:
    """A series' axis title: its unit, or where the results record none, the metric's name
    and that it has no unit."""
    units = df["unit"].dropna() if "unit" in df else pd.Series(dtype=object)
    return str(units.iloc[0]) if len(units) else f"{metric} (no unit recorded)"


if set(RENDER) != set(PAGES):  # a page in the sidebar that nothing draws, or the reverse
    raise RuntimeError(f"pages without a function: {set(PAGES) ^ set(RENDER)}")


NEUTRAL = "Performance"  # the title where the store names no project


def main() -> None:
    path = store_path()
    if isinstance(path, Path) and not path.exists():
        st.set_page_config(page_title=NEUTRAL, layout="wide")
        st.title(NEUTRAL)
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


def navigate(pages: list[str], wanted: str) -> str:
    """The page to draw: streamlit's navigation over ``pages``, in the sidebar, each page at
    its own path (``url_path``: ``/series``); the app's root opens ``wanted`` (``?page=Series``,
    the landing page), or the first page where it is none of them. The menu is part of
    streamlit's own script, where a radio of the pages fetched and ran its own on every first
    load (django-asv's pages side by side under load: Compare 2.32 -> 1.97 s, Series 2.07 ->
    1.94, Overview 2.08 -> 1.94). The warm-up runs without a browser, where no page is chosen:
    it draws ``wanted``."""
    current = wanted if wanted in pages else pages[0]
    chosen = st.navigation([st.Page(lambda: None, title=p, url_path=url_path(p),
                                    default=p == current) for p in pages])  # fmt: skip
    return current if warm_page() else chosen.title


def show(path: str | Path) -> None:
    """The sidebar and the chosen page over the store at ``path`` (a file or a lake)."""
    t0 = time.perf_counter()
    store = Store(path, read_only=True)
    mtime = store.mtime  # the file's time, or the lake's snapshot
    name = project(str(path), mtime)
    heading = f"{name} performance" if name else NEUTRAL
    st.set_page_config(page_title=heading, layout="wide")
    st.sidebar.title(heading)
    try:
        judge = policies()
    except ValueError as exc:  # a malformed --policies file: said before any page is drawn
        st.error(f"The policies cannot be read: {exc}")
        return
    branches = query(str(path), mtime, "", "branches")
    named = [b for b in branches if b is not None]
    default = history_branch() if history_branch() in named else (named or [history_branch()])[0]
    if len(named) > 1:
        branch = st.sidebar.selectbox("branch (the history)", named, index=named.index(default),
                                      key="branch")  # fmt: skip
    else:  # nothing to choose: a line, not a select box (0.05 s of a bare app's first load)
        branch = default
        st.sidebar.caption(f"branch (the history): {branch}")
    runs = query(str(path), mtime, branch, "runs")
    if runs.empty:
        st.title(heading)
        unnamed = branches.get(None, 0)
        st.info(
            f"The store `{path}` holds no runs of branch `{branch}` yet. Fill it: `make demo`, "
            "or `.venv/bin/ragbench ingest --branch main <asv results dir>`."
            + (f" ({unnamed} run(s) were ingested without a branch.)" if unnamed else "")
        )
        return
    ours = suite_pages(str(path), mtime)
    pages = [p for p in PAGES if p not in SUITE_PAGES or p in ours]
    landing = "Alerts" if alerts.any_new(str(path), mtime, branch) else "Overview"
    page = navigate(pages, warm_page() or st.query_params.get("page", landing))
    latest = runs.drop_duplicates("machine").set_index("machine")
    every = page in ("Overview", "Alerts")  # pages of every machine
    # the machine of the newest run first (the runs are newest first): a runner retired years
    # ago is no page's default
    machine = None
    if not every:  # the machine under the pages, its GPU and stack below it
        with Pickers("Machine", st.sidebar, width="stretch"):
            machine = pick("machine", list(latest.index), "machine", default=latest.index[0])
        st.sidebar.caption(environment(latest.loc[machine]))
    mine = runs if machine is None else runs[runs["machine"] == machine]
    times = pd.to_datetime(mine["commit_time"]).dt.date
    since, until = times.min(), times.max()
    fields = stack_fields(mine)
    # the filters a visit rarely changes, in a popover: its widgets are drawn only when it is
    # opened, so a first load fetches and runs none of their scripts (a date range, a
    # multiselect and a checkbox took 0.12 s of a bare app's first load)
    with st.sidebar.popover("Filters", width="stretch"):
        picked = st.date_input("commit dates", (since, until), min_value=since, max_value=until)
        if isinstance(picked, tuple) and len(picked) == 2:
            since, until = picked
        # a filter per environment field the runs name (torch and triton for this suite,
        # python for an asv project's environments)
        envs = {f: st.multiselect(f, sorted(mine[f].dropna().unique(), key=version_key))
                for f in fields}  # fmt: skip
        overlay = ours and st.checkbox("the paper's figures (RTX 4000 Ada)", value=False)
        st.checkbox(
            f"mark change points on every chart (E-Divisive, newest {CHANGE_POINT_COMMITS} "
            "commits; seconds on first use)", value=False, key="mark_change_points",
        )  # fmt: skip
    # what the closed popover applies, in a line
    applied = [f"{f} {', '.join(map(str, v))}" for f, v in envs.items() if v]
    if (since, until) != (times.min(), times.max()):
        applied.insert(0, f"commits {since} to {until}")
    applied += ["the paper's figures"] if overlay else []
    applied += ["change points marked"] if st.session_state.get("mark_change_points") else []
    if applied:
        st.sidebar.caption("filtered: " + "; ".join(applied))
    st.sidebar.caption(f"store: {store.name}")
    ctx = {
        "path": str(path),
        "mtime": mtime,
        "branch": branch,
        "runs": runs,
        "machine": machine,
        "since": since,
        "until": until,
        "env": {f: v for f, v in envs.items() if v},
        "paper": overlay,
        "policies": judge,
    }
    RENDER[page](ctx)
    timing = os.environ.get("RAGBENCH_DASHBOARD_TIMING")
    if timing:  # the page's script time, for scripts/dashboard_bench.py (server vs. browser)
        with open(timing, "a") as out:
            out.write(f"{page}\t{time.perf_counter() - t0:.4f}\n")


main()
