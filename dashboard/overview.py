"""The dashboard's Overview: each machine's newest run, the gate of its newest commit against
the one before, the cells that failed, and the series its lookback flags, linked and drawn
small."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from dashboard import draws, svg, url_path
from dashboard.draw import environment, environment_of, environments_of, legend, worse_by
from dashboard.read import LOOKBACK_COMMITS, comparison, histories, query
from ragbench.gate.report import sensitivity_line
from ragbench.history import alerting
from ragbench.store import FAILED
from ragbench.verdicts.comparison import Comparison
from ragbench.verdicts.status import Headline, Status


@draws("Overview")
def overview(ctx):
    st.header("Overview")
    runs = ctx["runs"]
    latest = runs.drop_duplicates("machine")  # the machine of the newest run first
    drawn = 0  # sparklines drawn so far: SPARKLINES on the page, the newest machines' first
    newest_time = pd.to_datetime(latest["commit_time"]).max()
    for _, run in latest.iterrows():
        m = run["machine"]
        mine = runs[runs["machine"] == m]
        # this suite's CPU runs name torch and no GPU; another project's runs name neither
        gpu = run["gpu"] if pd.notna(run["gpu"]) else "CPU" if pd.notna(run["torch"]) else None
        st.subheader(f"{m}: {gpu}" if gpu else m)
        if newest_time - pd.Timestamp(run["commit_time"]) > RETIRED:
            st.caption(f"latest commit {run['commit_hash'][:12]} ({run['commit_time']}): no run "
                       f"in the {RETIRED.days} days before the store's newest "
                       f"({newest_time:%Y-%m-%d}), a runner retired or stopped; its gate and "
                       "lookback are not drawn here (its pages are a pick of the sidebar "
                       "away).")  # fmt: skip
            open_alerts(ctx, m)
            continue
        # the gate of each environment the newest commit ran in, against that environment's
        # commit before (two Pythons pooled, or one against the other, read as code)
        envs = environment_of(mine)
        newest = mine[mine["commit_hash"] == run["commit_hash"]]
        named = [e for e in environments_of(newest) if e]
        st.caption(f"latest commit {run['commit_hash'][:12]} ({run['commit_time']}), "
                   + (f"in {len(named)} environments: {', '.join(named)}" if len(named) > 1
                      else environment(run, skip=("gpu",))))  # fmt: skip
        several = envs.nunique() > 1  # an environment column in its tables
        for env in environments_of(newest):
            gate(ctx, m, mine[envs == env], env, several)
        open_alerts(ctx, m)
        failed = query(ctx["path"], ctx["mtime"], ctx["branch"], "series", machine=m,
                       status=FAILED)  # fmt: skip
        failed = failed[failed["commit_hash"] == run["commit_hash"]]
        if not failed.empty:
            st.error(f"{len(failed)} cell(s) failed on the latest commit (the benchmark raised):")
            links(m, [((r.benchmark, r.metric, r.param_key), r.environment or "",
                       Status.FAILED, None) for r in failed.itertuples()], several)  # fmt: skip
        # the lookback only: change points are drawn on each series' own page (0.6 s saved)
        reports = histories(ctx["path"], ctx["mtime"], ctx["branch"], m, LOOKBACK_COMMITS,
                            False)  # fmt: skip
        flagged = [r for r in reports if r.status in FOUND]
        st.markdown(
            f"Newest run against its lookback (median and MAD of the previous runs in the same "
            f"environment): {len(flagged)} flagged series of {len(reports)}."
        )
        links(m, [(r.key, r.environment or "", r.status, r.latest_change) for r in flagged],
              several)  # fmt: skip
        sparklines(flagged[: SPARKLINES - drawn])
        drawn += min(len(flagged), SPARKLINES - drawn)


# A machine whose newest commit is this much older than the store's newest is drawn in one line
# (and its open alerts): django-asv's three runners retired in 2022 drew a gate, two tables and
# sparklines each above nothing anyone waits for
RETIRED = pd.Timedelta(days=90)


def gate(ctx, machine: str, runs: pd.DataFrame, env: str, several: bool) -> None:
    """The gate of the newest commit of ``runs`` (one environment's, newest first) against
    the commit before it in that environment, its headline and the cells it flagged (with an
    environment column where the machine has ``several``)."""
    commits = runs["commit_hash"].unique()
    where = f" in {env}" if env else ""
    if len(commits) < 2:
        if env:
            st.caption(f"Gate{where}: no earlier commit in this environment.")
        return
    head = tuple(runs[runs["commit_hash"] == commits[0]]["run_id"])
    base = tuple(runs[runs["commit_hash"] == commits[1]]["run_id"])
    c = comparison(ctx["path"], ctx["mtime"], base, head, False)
    # host-time cells of separate runs are inconclusive by design (they move 1.6-2.1x
    # between processes): judged only by a pull request's paired gate, not here
    judged = [v for v in c.verdicts if not (v.policy.paired and v.status == Status.INCONCLUSIVE)]
    host = len(c.verdicts) - len(judged)
    c = Comparison(judged, c.alpha)
    # main has no base to excuse a bound: one broken on the commit before too is broken
    before = c.by_status(Status.PRE_EXISTING)
    status = Headline.FAIL.upper() if before else c.headline.upper()
    also = f" ({len(before)} broken on the commit before too)" if before else ""
    st.markdown(
        f"**Gate, latest commit against {commits[1][:12]}{where}: {status}** - "
        f"{len(c.by_status('regression'))} regression(s), "
        f"{len(c.by_status('violation', 'pre-existing'))} bound violation(s){also}, "
        f"{len(c.by_status('failed'))} failed, {len(c.by_status('missing'))} missing, "
        f"{len(c.by_status('improvement'))} improvement(s), "
        f"{len(c.by_status('unchanged'))} unchanged, "
        f"{len(c.by_status('inconclusive'))} inconclusive"
    )
    st.caption(" ".join(sensitivity_line(c)) + " Separate runs from the store: "
               f"{host} host-time cell(s) not judged here (a pull request's gate "
               "times both sides in one process).")  # fmt: skip
    links(machine, [(v.key, env, v.status, v.change) for v in c.verdicts if v.status in FOUND],
          several)  # fmt: skip


def open_alerts(ctx, machine: str) -> None:
    """The machine's open alerts (``ragbench.history.alerting``: steps, broken bounds, failed or
    missing cells of main), as failing: the Alerts page has them."""
    from dashboard.alerts import alert_list
    from ragbench.history.alerting import OPEN

    mine = [a for a in alert_list(ctx["path"], ctx["mtime"], ctx["branch"])
            if a["machine"] == machine and a["state"] in OPEN]  # fmt: skip
    if mine:
        new = sum(a["state"] == "new" for a in mine)
        cells = "; ".join(f"{alerting.cell_name(c)} at {a['commit_hash'][:12]}"
                          for a in mine[:3] for c in a["cells"][:2])  # fmt: skip
        st.error(f"{len(mine)} open alert(s) of main on this machine, {new} new (the Alerts "
                 f"page): {cells}")  # fmt: skip


# small charts of flagged series on the overview, at most, the newest machine's first: each was a
# Vega view for the browser to draw, and django-asv's four machines drew 24 a load
SPARKLINES = 6


def sparklines(reports) -> None:
    """A small chart of each flagged series' recent runs (the newest is the one judged)."""
    if not reports:
        return
    for col, r in zip(st.columns(min(3, len(reports))) * 2, reports, strict=False):
        where = f"{r.environment}: " if r.environment else ""
        spec = sparkline_spec(f"{where}{r.key[1]} {r.key[2]}"[:60], r.unit,
                              tuple(p.value for p in r.points),
                              tuple(p.commit_hash[:12] for p in r.points))  # fmt: skip
        svg.show(spec, col)


# kept per series and points, as the charts' specs (dashboard/draw.py chart_spec): Altair built
# and validated the four sparklines of the 10,000-run store's Overview in 0.08 s a visit
@st.cache_resource(max_entries=256, show_spinner=False)
def sparkline_spec(title: str, unit: str | None, values: tuple, commits: tuple) -> dict:
    import altair as alt  # 0.4 s of imports, paid only once a page draws a chart

    df = pd.DataFrame({"commit #": range(1, len(values) + 1), "value": values,
                       "commit": commits})  # fmt: skip
    spec = alt.Chart(alt.NamedData(name="points")).mark_line(point=True).encode(
        x=alt.X("commit #:Q", title=None, axis=alt.Axis(format="d")),
        y=alt.Y("value:Q", title=unit, scale=alt.Scale(zero=False)),
        tooltip=["commit:N", alt.Tooltip("value:Q", format=".4g")],
    ).properties(title=title, height=120, width=280).to_dict()  # fmt: skip
    spec.pop("$schema", None)
    return {**spec, "datasets": {"points": df}}


FOUND = (
    Status.REGRESSION,
    Status.ACCEPTED,
    Status.IMPROVEMENT,
    Status.VIOLATION,
    Status.PRE_EXISTING,
    Status.FAILED,
    Status.MISSING,
    Status.INCONCLUSIVE,
)


# Rows of a table of flagged cells, at most: on the 10,000-run store one machine's lookback
# flagged 1,084 series of 2,250, whose links alone took 0.46 s of a warm Overview's 1.3 s.
LINKS = 50


def md_cell(text: str) -> str:
    """``text`` as it shows in a markdown table's cell and a link's text: a ``|`` (asv param
    values hold them, e.g. ``'a|b'``) would end the cell, a bracket or backslash the link."""
    return re.sub(r"([\\|\[\]])", r"\\\1", text)


def links(machine: str, found: list[tuple], named: bool) -> None:
    """A table of flagged cells ``(key, environment, status, change)``, each linking to its
    series page (in its environment); an environment column where ``named`` (the machine's
    runs name several: rows of several meet in its tables)."""
    if not found:
        return
    lines = ["| series |" + (" environment |" if named else "") + " status | change (+: worse) |",
             "|---|" + ("---|" if named else "") + "---|---|"]  # fmt: skip
    for (bench, metric, cell), env, status, change in found[:LINKS]:
        query = {"machine": machine, "benchmark": bench, "metric": metric, "cell": cell,
                 **({"environment": env} if env else {})}  # fmt: skip
        text = md_cell(f"{bench}.{metric} {cell}")
        where = f" {md_cell(env)} |" if named else ""
        lines.append(f"| [{text}]({url_path('Series')}?{urlencode(query)}) |{where} {status} | "
                     f"{worse_by(change)} |")  # fmt: skip
    st.markdown("\n".join(lines))
    if len(found) > LINKS:
        st.caption(f"... and {len(found) - LINKS} more (the Compare page lists every cell).")
    legend([status for _, _, status, _ in found])
