"""The dashboard's drawing: Altair line charts over commits (change points, the paper's
figures, stack changes marked), the sidebar's filters and pickers, legends and downloads."""

from __future__ import annotations

import os
import re
from contextvars import ContextVar

import pandas as pd
import streamlit as st

from dashboard import svg
from dashboard.read import line_change_points, query
from ragbench.markdown import number
from ragbench.verdicts.status import MEANING


def commit_link(df: pd.DataFrame, project=None) -> pd.DataFrame:
    """``df`` with ``commit`` (a hash's 12 digits) and ``url``, a point's link (vega refuses
    any scheme but a web page's): of ``project``, the other asv project whose results the
    machine's are (``ragbench.project``), where one is known; else of ``$RAGBENCH_COMMIT_URL``
    (this repository's commit page) where every point is this suite's: a point of another
    harness's environment is another project's commit, which this repository does not have.
    Every point gets one or none."""
    df = df.copy()
    df["commit"] = df["commit_hash"].str[:12]
    if project is not None:
        urls = [project.commit_url(c) for c in df["commit_hash"]]
        if all(u and re.match(r"https?://", u, re.IGNORECASE) for u in urls):
            df["url"] = urls
        return df
    template = os.environ.get("RAGBENCH_COMMIT_URL", "")
    # every point or none: vega reads a missing link as a page relative to its own site
    if re.match(r"https?://", template, re.IGNORECASE) and (environment_of(df) == "").all():
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
    project=None,
):
    """A line over the commits in their order (the hover has the commit and its time, the
    value and its spread) and a CSV download. ``log``: a log axis (values <= 0 left out);
    ``project``: the other asv project the points are of (``commit_link``)."""
    if log:
        df = df[df[y] > 0]
    if df.empty:
        st.info(f"{title}: no data for these filters.")
        return
    if change_points is None and st.session_state.get("mark_change_points"):
        change_points = line_change_points(df, y, color)
    # only the columns drawn go into the spec (and into its cache key's hash): the query's
    # frames carry 15-35 columns, and each chart sent them all (160 kB a Dispatch-floors chart)
    drawn = list(dict.fromkeys(["commit_hash", "commit_time", y, *([color] if color else []),
                                *(c for c in ("q25", "q75", "environment", *stack_fields(df))
                                  if c in df)]))  # fmt: skip
    spec = chart_spec(df[drawn], y, color, title, tuple(rules or ()), change_points, y_title,
                      log, project)  # fmt: skip
    svg.show(spec)
    download(lambda: numbered(commit_link(df, project)), title, key)


# The spec of each chart, computed once per frame and settings and kept (cache_resource: by
# the frame's content): on the 10,000-run store Altair's building and validating of a page's
# three charts, their binning and stack changes took 0.55 s of Dispatch floors' 0.69 s warm
# script, every visit.
@st.cache_resource(max_entries=256, show_spinner=False)
def chart_spec(df, y, color, title, rules, change_points, y_title, log, project=None) -> dict:
    """The Vega-Lite spec of ``chart``: its data as named frames under ``datasets`` (drawn by
    ``dashboard.svg``), the lines thinned (``thinned``)."""
    import altair as alt  # 0.4 s of imports, paid only once a page draws a chart

    full = numbered(commit_link(df, project))
    breaks = ()
    if change_points is not None and not change_points.empty:
        order = dict(zip(full["commit"], full["commit #"], strict=False))
        change_points = change_points.assign(
            **{"commit #": change_points["commit"].map(order)})  # fmt: skip
        breaks = tuple(change_points["commit #"].dropna())
    data = thinned(full, y, color, breaks).drop(columns="commit_hash", errors="ignore")
    datasets = {"points": data}
    tooltip = [
        alt.Tooltip("commit:N"),
        alt.Tooltip("commit_time:T", title="commit time", format="%Y-%m-%d %H:%M"),
        alt.Tooltip(f"{y}:Q", format=".4g"),
    ]
    tooltip += [f"{c}:{'N' if c in STACK_FIELDS else 'Q'}"
                for c in ("commits", "q25", "q75", *stack_fields(data)) if c in data]  # fmt: skip
    if color:
        tooltip.append(f"{color}:N")
    scale = alt.Scale(type="log") if log else alt.Scale(zero=False)
    # a log axis spans decades: every tick in one notation ("3e-5", "1e-7"), where ".3g"
    # mixed "0.0000300" and "3.00e-7" on one axis; the ticks' format only (an axis format would
    # also be the hover's: 3 digits, "5.12e+3" for 5,123 img/s)
    ticks = f"format(datum.value, '{'.0e' if log else '.3g'}')"
    enc = {
        "x": alt.X(
            "commit #:Q", title="commit (oldest first)", axis=alt.Axis(format="d", tickMinStep=1)
        ),
        "y": alt.Y(f"{y}:Q", title=y_title or y, scale=scale, axis=alt.Axis(labelExpr=ticks)),
        "tooltip": tooltip,
    }
    if color:
        enc["color"] = alt.Color(f"{color}:N")
    if "url" in data:
        enc["href"] = "url:N"
    points = alt.NamedData(name="points")
    layers = [alt.Chart(points).mark_line(point=True).encode(**enc)]
    if {"q25", "q75"} <= set(data) and data["q25"].notna().any() and not log:
        band = {k: v for k, v in enc.items() if k in ("x", "color")}
        layers.insert(0, alt.Chart(points).mark_area(opacity=0.2).encode(
            y="q25:Q", y2="q75:Q", **band))  # fmt: skip
    for i, (label, value, colour) in enumerate(rules):
        datasets[f"rule{i}"] = pd.DataFrame({"value": [value], "label": [label]})
        layers.append(
            alt.Chart(alt.NamedData(name=f"rule{i}"))
            .mark_rule(strokeDash=[6, 3], color=colour)
            .encode(y="value:Q", tooltip=["label:N", "value:Q"])
        )
    moves = stack_changes(full)
    if not moves.empty:
        datasets["moves"] = moves
        layers.append(
            alt.Chart(alt.NamedData(name="moves"))
            .mark_rule(color="gray", strokeDash=[2, 2])
            .encode(x="commit #:Q", tooltip=["stack change:N"])
        )
    if change_points is not None and not change_points.empty:
        datasets["changes"] = change_points[["commit #", "commit", "cause"]]
        layers.append(
            alt.Chart(alt.NamedData(name="changes"))
            .mark_rule(color="red")
            .encode(x="commit #:Q", tooltip=["commit:N", "cause:N"])
        )
    if "commits" in data:
        title += f" (older commits: medians of up to {int(data['commits'].max())} a point)"
    spec = alt.layer(*layers).properties(title=title, height=280).to_dict()
    spec.pop("$schema", None)
    return {**spec, "datasets": datasets}


def numbered(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with ``commit #``: its commits numbered in their order, oldest 1 (by commit
    time; commits of the same second each their own number, in hash order)."""
    commits = df[["commit_time", "commit_hash"]].drop_duplicates("commit_hash")
    commits = commits.sort_values(["commit_time", "commit_hash"], na_position="first")
    order = dict(zip(commits["commit_hash"], range(1, len(commits) + 1), strict=True))
    return df.assign(**{"commit #": df["commit_hash"].map(order)})


# Charts over years: at most about this many points a line, the newest NEWEST commits each its
# own point (a new regression is never averaged into a bin). Measured on Dispatch floors (three
# charts of three lines over 10,000 commits, 2-core machine, load 4-10): 500 points a line
# drew in 1.5-2.0 s a load, 100 in 1.15-1.55 s, no chart at all 0.6-1.0 s; 100 points are
# 10 px apart on a 1,000 px chart.
MAX_POINTS = 100
NEWEST = 25


def thinned(df: pd.DataFrame, y: str, color: str | None, breaks=()) -> pd.DataFrame:
    """``df`` (rows of commits, ``commit #`` numbered) with at most about ``MAX_POINTS``
    points a line: the newest ``NEWEST`` commits as they are, older ones in bins of consecutive
    commits, a bin also starting at each commit of ``breaks`` (change points: a step stays at
    its commit); each bin drawn at its first commit, at the median of its values, its band
    their quartiles, with ``commits`` (how many it holds)."""
    last = int(df["commit #"].max())
    if last <= MAX_POINTS:
        return df
    older = last - NEWEST
    starts = {1 + (i * older) // (MAX_POINTS - NEWEST) for i in range(MAX_POINTS - NEWEST)}
    starts |= set(range(older + 1, last + 1)) | {int(b) for b in breaks}
    starts = pd.Index(sorted(starts))
    keys = ["bin", *([color] if color else [])]
    firsts = {c: (c, "first") for c in ("commit", "commit_time", "url", *stack_fields(df))
              if c in df}  # fmt: skip
    groups = df.assign(bin=starts.searchsorted(df["commit #"], side="right")).groupby(
        keys, dropna=False)  # fmt: skip
    out = groups.agg(**{y: (y, "median"), "commit #": ("commit #", "min"),
                        "commits": ("commit #", "nunique"), **firsts})  # fmt: skip
    quartiles = groups[y].quantile([0.25, 0.75]).unstack()
    out["q25"], out["q75"] = quartiles[0.25], quartiles[0.75]
    if {"q25", "q75"} <= set(df):  # a commit alone keeps its own quartiles
        alone = out["commits"] == 1
        own = groups[["q25", "q75"]].median()
        out.loc[alone, ["q25", "q75"]] = own.loc[alone].to_numpy()
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


def folded(label: str, key: str):
    """An expander ``label`` whose content is computed and drawn only once it is opened
    (opening it reruns the page): -> its container where it is open, else None. A closed
    expander's content is otherwise sent and drawn, hidden: on django-asv's Alerts page the
    line of every alert, the steps where a measurement setting changed and the stale series
    took 0.24 s of a first load (2.17 -> 1.93 s, medians of 10 side by side under load)."""
    box = st.expander(label, key=key, on_change="rerun")
    return box if box.open else None


def download(df, title: str, key: str) -> None:
    """The data behind a chart or table (a frame, or a function that makes it), as CSV,
    written when the button is clicked (each page run wrote every chart's CSV: 30,000 rows a
    chart over 10,000 commits)."""
    frame = df if callable(df) else lambda: df
    st.download_button(f"Download the data ({title})", lambda: frame().to_csv(index=False),
                       file_name=f"{key}.csv", mime="text/csv", key=f"dl-{key}")  # fmt: skip


# Failed commits a Series page names, newest first (every one in its download): django-asv's
# default series on ubuntu-latest raised on 1,400-odd commits, all named in one error box
FAILED_NAMED = 10


def failed_commits(failed: pd.DataFrame, several: bool) -> None:
    """The commits where the series' benchmark raised (rows of ``series`` with status failed):
    how many, the newest ``FAILED_NAMED`` by name (with their environment where there are
    ``several``), and every one in a CSV."""
    newest = failed.sort_values("commit_time", ascending=False, kind="stable")
    named = list(dict.fromkeys(c[:12] + (f" ({e})" if several else "")
                               for c, e in zip(newest["commit_hash"], newest["environment"],
                                               strict=True)))  # fmt: skip
    more = len(named) - FAILED_NAMED
    also = f" and {more} more (the download below lists them)" if more > 0 else ""
    st.error(f"Failed (the benchmark raised) on {failed['commit_hash'].nunique()} commit(s), "
             f"newest first: {', '.join(named[:FAILED_NAMED])}{also}")  # fmt: skip
    if more > 0:
        columns = ["commit_hash", "commit_time", "environment", "run_id"]
        download(newest[[c for c in columns if c in newest]], "failed commits", "series-failed")


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


# The "label: value" of each select box made inside the ``Pickers`` being drawn (a context
# variable: every session's script runs in a thread of its own)
PICKED: ContextVar[list[str] | None] = ContextVar("picked", default=None)


class Pickers:
    """A popover ``label`` (in ``where``, default the page; ``width``: its button's) holding
    the select boxes made inside ``with pickers:`` (entered again further down a page where
    its choices depend on what the page drew), and under it a line of what each chose
    (``benchmark: ... · metric: ...``). A popover's widgets are drawn only when it is opened,
    so a page's first load fetches and runs no select box script: a select box took 0.17-0.2 s
    of a bare app's first load, a multiselect 0.27 s (medians of 9, the 2-core machine). Draw
    only pickers inside: a message there would be hidden in the popover.
    """

    def __init__(self, label: str, where=None, width: str = "content"):
        where = where or st
        self.popover = where.popover(label, width=width)
        self.line = where.empty()
        self.picked: list[str] = []
        self.token = None

    def __enter__(self) -> Pickers:
        self.token = PICKED.set(self.picked)
        self.popover.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.popover.__exit__(*exc)
        PICKED.reset(self.token)
        if self.picked:
            self.line.caption(" · ".join(self.picked))


def chose(label: str, value) -> None:
    """Name ``value`` in the line of the ``Pickers`` it was picked in (where it was)."""
    picked = PICKED.get()
    if picked is not None:
        picked.append(f"{label}: {escaped(value)}")


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


def pick(label: str, options: list, key: str, default=None):
    """A select box over ``options``, preselected from the URL parameter ``key``, else on
    ``default``, else on the first of ``PREFERRED[key]`` there is."""
    options = sorted({o for o in options if o is not None}, key=str)
    if not options:
        return None
    wanted = st.query_params.get(key)
    if wanted not in options:
        wanted = default if default in options else next(
            (o for o in PREFERRED.get(key, ()) if o in options), options[0])  # fmt: skip
    value = st.selectbox(label, options, index=options.index(wanted), key=key)
    chose(label, value)
    return value


def narrow(df: pd.DataFrame, column: str, label: str, key: str) -> tuple[pd.DataFrame, object]:
    """Pick one value of ``column`` (``pick``); -> the rows that have it, and the value. A
    benchmark without parameters has one cell, ``''``: no picker for it (an empty choice read
    "Choose an option")."""
    # its distinct values only (a list of every row's took 0.11 s over 120,000 rows)
    values = df[column].dropna().unique().tolist()
    value = "" if values == [""] else pick(label, values, key)
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


def pick_series(ctx, pickers: Pickers):
    """One series of the machine, chosen in ``pickers`` from its catalogue of cells: -> (its
    rows, benchmark, metric, cell), or None (with a message) when the machine has no runs."""
    cells = query(ctx["path"], ctx["mtime"], ctx["branch"], "cells", machine=ctx["machine"])
    if cells.empty:
        st.info("No runs on this machine.")
        return None
    with pickers:
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
    """Order stacks by their torch, then triton version, or versions alone (2.9 before 2.10,
    Python 3.9 before 3.10)."""
    return tuple(int(n) if n.isdigit() else 0 for n in re.findall(r"\d+|\?", str(stack)))


# The environments a page keeps apart, as ragbench's history and gate do: another harness's
# (asv's environment name ``conda-py3.12``, pytest-benchmark's Python and CPU), one series
# each; this suite's runs have none (''): their stack changes along one series, drawn as the
# grey stack changes.
EVERY = "every environment, a line each"


def environment_of(df: pd.DataFrame) -> pd.Series:
    """Each row's environment (``''`` where the runs name none)."""
    if "environment" not in df:
        return pd.Series("", index=df.index, dtype=object)
    return df["environment"].fillna("").astype(str)


def environments_of(runs: pd.DataFrame) -> list[str]:
    """The environments of ``runs`` (newest first: runs come newest commit first)."""
    return list(dict.fromkeys(environment_of(runs)))


def pick_environment(envs: list[str], key: str, every: bool = False) -> str | None:
    """One of ``envs`` (a select box ``key``, where there are several): the URL parameter
    ``environment``, else the first (the newest run's). ``every``: ``EVERY`` is offered too,
    first, and is the default (-> None: all of them)."""
    if len(envs) <= 1:
        return envs[0] if envs and not every else None
    options = [EVERY, *envs] if every else list(envs)
    wanted = st.query_params.get("environment")
    index = options.index(wanted) if wanted in options else 0
    chosen = st.selectbox("environment", options, index=index, key=key)
    chose("environment", chosen)
    return None if chosen == EVERY else chosen


# every ASCII punctuation mark, escaped: a cell's text is shown as written, never as emphasis,
# a link, a colour directive, LaTeX or HTML (no tag can open: each "<" is escaped)
MARKDOWN_MARKS = frozenset("!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~")
# where a cell's text may wrap without a space (a <wbr>, not copied with it): after a comma, and
# after a dot before a letter (a metric's name, never a number's decimals); cells of 70
# characters without a space ("backend=padded_sdpa,batch=64,...") pushed the Compare table past
# a 1400 px window
BREAK = re.compile(r"(?<=,)|(?<=\.)(?=[A-Za-z])")


def markdown_text(value) -> str:
    """``value`` as markdown that shows it as written, on one line (a float to 4 digits), and
    may wrap at the ``BREAK`` points."""
    text = number(value) if isinstance(value, float) else " ".join(str(value).split())
    return "<wbr>".join(escaped(part) for part in BREAK.split(text))


def escaped(text) -> str:
    """``text`` with every ``MARKDOWN_MARKS`` escaped: markdown shows it as written."""
    return "".join("\\" + c if c in MARKDOWN_MARKS else c for c in str(text))


def static_table(df: pd.DataFrame) -> None:
    """``df`` as one markdown table, its index left out. A markdown element is what every page
    loads anyway; ``st.table`` makes the browser load and run Arrow's formatting (0.74 MB of
    script) on a page's first load, ``st.dataframe`` the grid too (0.49 MB more). Without them
    (and ``command``) on django-asv's history, first loads (median of 5 alternated with the
    old pages', load average 10): Alerts 5.94 -> 3.01 s, Compare 3.35 -> 2.26 s."""
    lines = ["| " + " | ".join(markdown_text(c) for c in df.columns) + " |",
             "|" + "---|" * len(df.columns)]  # fmt: skip
    lines += ["| " + " | ".join(markdown_text(v) or " " for v in row) + " |"
              for row in df.itertuples(index=False)]  # fmt: skip
    st.markdown("\n".join(lines), unsafe_allow_html=True)  # the <wbr> of markdown_text


def changed_table(df: pd.DataFrame, unchanged, what: str, key: str) -> None:
    """``df`` as ``static_table``: its changed rows drawn, the ``unchanged`` ones (a boolean
    per row) in a table of their own that ``folded`` draws once opened, labelled "N ``what``"
    (a table's rows are most of what a first load draws: a bare app's 400-row table, 0.7 s)."""
    unchanged = pd.Series(list(unchanged), index=df.index, dtype=bool)
    if not unchanged.all():
        static_table(df[~unchanged])
    box = folded(f"{unchanged.sum()} {what}", key) if unchanged.any() else None
    if box is not None:
        with box:
            static_table(df[unchanged])


def command(text: str) -> None:
    """A shell command to copy, as code on a line of its own (select it with a triple click).
    ``st.code`` gave it a copy button, and the browser 1.56 MB of syntax highlighting to load
    on the page's first load: the Alerts page's went from 5.86 to 4.03 s without it (median of
    6 alternated loads, django-asv's history, load average 6)."""
    fence = "`" * (max((len(r) for r in re.findall("`+", text)), default=0) + 1)
    st.markdown(f"{fence} {text} {fence}")
