"""The dashboard's Overview: each machine's newest run, the gate of its newest commit against
the one before, the cells that failed, and the series its lookback flags, linked and drawn
small."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pandas as pd
import streamlit as st

from dashboard import draws
from dashboard.draw import environment, legend, worse_by
from dashboard.read import LOOKBACK_COMMITS, comparison, histories, query
from ragbench.report import sensitivity_line
from ragbench.store import FAILED
from ragbench.verdicts.comparison import Comparison
from ragbench.verdicts.status import Headline, Status


@draws("Overview")
def overview(ctx):
    st.header("Overview")
    runs = ctx["runs"]
    latest = runs.drop_duplicates("machine")
    for _, run in latest.iterrows():
        m = run["machine"]
        mine = runs[runs["machine"] == m]
        # this suite's CPU runs name torch and no GPU; another project's runs name neither
        gpu = run["gpu"] if pd.notna(run["gpu"]) else "CPU" if pd.notna(run["torch"]) else None
        st.subheader(f"{m}: {gpu}" if gpu else m)
        st.caption(f"latest commit {run['commit_hash'][:12]} ({run['commit_time']}), "
                   + environment(run, skip=("gpu",)))  # fmt: skip
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
            c = Comparison(judged, c.alpha)
            # main has no base to excuse a bound: one broken on the commit before too is broken
            before = c.by_status(Status.PRE_EXISTING)
            status = Headline.FAIL.upper() if before else c.headline.upper()
            also = f" ({len(before)} broken on the commit before too)" if before else ""
            st.markdown(
                f"**Gate, latest commit against {commits[1][:12]}: {status}** - "
                f"{len(c.by_status('regression'))} regression(s), "
                f"{len(c.by_status('violation', 'pre-existing'))} bound violation(s){also}, "
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
        open_alerts(ctx, m)
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


def open_alerts(ctx, machine: str) -> None:
    """The machine's open alerts (``ragbench.history.alerting``: steps, broken bounds, failed or
    missing cells of main), as failing: the Alerts page has them."""
    from dashboard.alerts import alert_list
    from ragbench.history.alerting import OPEN

    mine = [a for a in alert_list(ctx["path"], ctx["mtime"], ctx["branch"])
            if a["machine"] == machine and a["state"] in OPEN]  # fmt: skip
    if mine:
        new = sum(a["state"] == "new" for a in mine)
        cells = "; ".join(f"`{c['benchmark']}.{c['metric']} {c['param_key']}` at "
                          f"{a['commit_hash'][:12]}"
                          for a in mine[:3] for c in a["cells"][:2])  # fmt: skip
        st.error(f"{len(mine)} open alert(s) of main on this machine, {new} new (the Alerts "
                 f"page): {cells}")  # fmt: skip


SPARKLINES = 6  # small charts of flagged series on the overview, at most


def sparklines(reports) -> None:
    """A small chart of each flagged series' recent runs (the newest is the one judged)."""
    if not reports:
        return
    for col, r in zip(st.columns(min(3, len(reports))) * 2, reports, strict=False):
        spec = sparkline_spec(f"{r.key[1]} {r.key[2]}"[:60], r.unit,
                              tuple(p.value for p in r.points),
                              tuple(p.commit_hash[:12] for p in r.points))  # fmt: skip
        col.vega_lite_chart(spec={**spec, "datasets": dict(spec["datasets"])}, width="stretch")


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
    ).properties(title=title, height=120).to_dict()  # fmt: skip
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


def links(machine: str, found: list[tuple]) -> None:
    """A table of flagged cells, each linking to its series page."""
    if not found:
        return
    lines = ["| series | status | change (+: worse) |", "|---|---|---|"]
    for (bench, metric, cell), status, change in found[:LINKS]:
        query = {"page": "Series", "machine": machine, "benchmark": bench, "metric": metric,
                 "cell": cell}  # fmt: skip
        text = md_cell(f"{bench}.{metric} {cell}")
        lines.append(f"| [{text}](?{urlencode(query)}) | {status} | {worse_by(change)} |")
    st.markdown("\n".join(lines))
    if len(found) > LINKS:
        st.caption(f"... and {len(found) - LINKS} more (the Compare page lists every cell).")
    legend([status for _, status, _ in found])
