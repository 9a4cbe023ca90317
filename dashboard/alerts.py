"""The dashboard's Alerts page: main's steps grouped by commit (``ragbench.history.alerting``),
each with its cells, the commits to look at, the commands that reproduce and bisect it, and
buttons that change its state (written to the store: the next run keeps it)."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from dashboard import draws
from dashboard.draw import (
    Pickers,
    chose,
    command,
    download,
    folded,
    markdown_text,
    shown,
    static_table,
)
from dashboard.read import asv_project, policies, store
from ragbench import follow_up
from ragbench.discovery import cell_text
from ragbench.history import alerting as alerts
from ragbench.store import Store

# the buttons: label -> state
ACTIONS = {"Acknowledge": "acknowledged", "Expected": "expected", "Invalid": "invalid",
           "Reopen": "new"}  # fmt: skip


@st.cache_resource(max_entries=8, show_spinner=False)
def alert_list(path: str, mtime: float, branch: str) -> list[dict]:
    """main's alerts of every machine, newest commit first (read from the store itself: the
    rollup holds none)."""
    return store(path, mtime, branch).alerts()


@st.cache_resource(max_entries=8, show_spinner=False)
def settings_list(path: str, mtime: float, branch: str) -> list[dict]:
    """main's steps where a measurement setting changed (``ragbench.store.timing``): listed apart,
    never alerted as the code's."""
    return store(path, mtime, branch).alerts(cells="settings")


def settings_steps(ctx) -> None:
    """The steps where the harness timed the cells otherwise on either side (asv's number or
    repeat, pytest-benchmark's iterations or rounds, asv's benchmark version), in one table,
    as ``ragbench alerts`` lists them apart: a person can still look."""
    found = settings_list(ctx["path"], ctx["mtime"], ctx["branch"])
    rows = [{"machine": a["machine"], "commit": a["commit_hash"][:12],
             "cell": alerts.cell_name(c), "environment": c["environment"] or "-",
             "setting": c["settings_changed"], "before": shown(c["before"], c["unit"]),
             "after": shown(c["after"], c["unit"]), "change": alerts.cell_words(c)[0]}
            for a in found for c in a["cells"]]  # fmt: skip
    if not rows:
        return
    box = folded(f"Measurement setting changed: {len(rows)} step(s) at {len(found)} commit(s), "
                 "not alerted as the code's", "settings-steps")  # fmt: skip
    if box is None:
        return
    with box:
        st.caption("The harness timed these cells otherwise on either side of the step: the "
                   "step is the measurement's until the same settings show it.")  # fmt: skip
        # a static table (an interactive grid is the browser's heaviest element to load), of
        # the newest SETTINGS_ROWS; every one in the download
        table = pd.DataFrame(rows)
        static_table(table.head(SETTINGS_ROWS))
        if len(table) > SETTINGS_ROWS:
            st.caption(f"The newest {SETTINGS_ROWS} of {len(table)}: the download has them all.")
        download(table, "measurement setting changed", "settings-steps")


SETTINGS_ROWS = 50  # rows of the steps where a measurement setting changed, at most


@st.cache_resource(max_entries=64, show_spinner=False)
def moves(path: str, mtime: float, branch: str, machine: str, commits: tuple,
          _found: list[dict]) -> dict:  # fmt: skip
    """The environment's changes of level since each of the machine's alerts ``_found`` (at
    ``commits``: the cache's key) (``ragbench.history.alerting.moves_of``: their series read
    together, where one alert at a time took 6.5 s an alert on django-asv's history): commit
    -> its lines."""
    return alerts.moves_of(store(path, mtime, branch), machine, _found, policies())


def moves_shown(ctx, shown: list[dict]) -> dict[tuple, list[str]]:
    """``moves`` of the open alerts drawn, one batch a machine: (machine, commit) -> lines."""
    out = {}
    for m in dict.fromkeys(a["machine"] for a in shown):
        mine = [a for a in shown if a["machine"] == m and a["state"] in alerts.OPEN]
        if mine:
            commits = tuple(a["commit_hash"] for a in mine)
            found = moves(ctx["path"], ctx["mtime"], ctx["branch"], m, commits, mine)
            out.update({(m, c): lines for c, lines in found.items()})
    return out


def any_new(path: str, mtime: float, branch: str) -> bool:
    """Whether an alert waits for someone: the dashboard then opens on this page."""
    return any(a["state"] == "new" for a in alert_list(path, mtime, branch))


@draws("Alerts")
def alerts_page(ctx):
    st.header("Alerts")
    found = alert_list(ctx["path"], ctx["mtime"], ctx["branch"])
    if not found:
        st.info("No alerts: no step of main's history went the bad way beyond its threshold, "
                "and no newest commit broke a bound or failed or lost a cell (each ingest of "
                "main looks for them; `ragbench alerts` lists them).")  # fmt: skip
        settings_steps(ctx)
        stale_series(ctx)
        return
    counts = pd.Series([a["state"] for a in found]).value_counts()
    pickers = Pickers("Pick the alerts")
    with pickers:
        states = st.multiselect("states", list(alerts.STATES), default=list(alerts.OPEN),
                                key="alert-states")  # fmt: skip
        chose("states", ", ".join(states) or "none")
    st.caption(", ".join(f"{n} {s}" for s, n in counts.items()) + " in all; newest commit first")
    repository = follow_up.repository_url(ctx["policies"])
    chosen = [a for a in found if a["state"] in states]
    shown = shown_alerts(chosen, pickers)
    moved = moves_shown(ctx, shown)
    for a in shown:
        alert_box(ctx, a, repository, moved.get((a["machine"], a["commit_hash"]), []))
    settings_steps(ctx)
    stale_series(ctx)


# Alerts drawn in full a page (a table, the commands, the buttons each): the browser's drawing
# is most of a load, and django-asv's 22 open alerts drawn together took 6.0 s a reload (median,
# its script 0.8 s); the others are a pick away, the newest first.
ALERTS_SHOWN = 4


def shown_alerts(chosen: list[dict], pickers: Pickers) -> list[dict]:
    """The alerts drawn: all where they are few, else one page of ``ALERTS_SHOWN`` (newest
    first), picked in ``pickers``, with every alert listed in one line each."""
    if len(chosen) <= ALERTS_SHOWN:
        return chosen
    pages = [chosen[i : i + ALERTS_SHOWN] for i in range(0, len(chosen), ALERTS_SHOWN)]
    names = [f"{i * ALERTS_SHOWN + 1}-{i * ALERTS_SHOWN + len(p)} of {len(chosen)}"
             for i, p in enumerate(pages)]  # fmt: skip
    box = folded(f"All {len(chosen)} alerts of these states, one line each", "alerts-listed")
    if box is not None:
        box.markdown("\n".join(
            f"{i}. {a['machine']} at `{a['commit_hash'][:12]}`: **{a['state']}**, "
            f"{len(a['cells'])} cell(s)" + (f" in {env}" if (env := environments(a)) else "")
            for i, a in enumerate(chosen, 1)))  # fmt: skip
    with pickers:
        name = st.selectbox("alerts shown", names, index=0, key="alert-page")
        chose("alerts shown", name)
    return pages[names.index(name)]


def environments(alert: dict) -> str:
    """The environments an alert's cells ran in, in words ('' where they name none)."""
    return ", ".join(sorted({c["environment"] for c in alert["cells"] if c["environment"]}))


def stale_series(ctx) -> None:
    """Each machine's stale series (their last point older than its newest run: a dropped
    environment or cell), with that point's date: never judged as a newest run."""
    from dashboard.read import histories

    for m in ctx["runs"]["machine"].drop_duplicates():
        stale = [r for r in histories(ctx["path"], ctx["mtime"], ctx["branch"], m, alerts.LAST,
                                      False) if r.stale]  # fmt: skip
        box = stale and folded(f"{m}: {len(stale)} stale series (not judged)",
                               f"stale-series-{m}")  # fmt: skip
        if box:
            # one row per environment and last point (a dropped environment's series stop
            # together): a row a series drew 300-odd static rows on django-asv's page, 2-3 s
            # of the browser's a load
            rows = pd.DataFrame([{"environment": r.environment or "-",
                                  "last point": r.points[-1].commit_hash[:12],
                                  "of": str(r.stale_since),
                                  "series": f"{r.key[0]}.{r.key[1]} {r.key[2]}".strip()}
                                 for r in stale])  # fmt: skip
            grouped = rows.groupby(["environment", "last point", "of"], sort=False)["series"]
            table = grouped.agg(named_series).reset_index()
            with box:
                static_table(table)
                st.download_button(f"Download the {len(stale)} stale series", rows.to_csv(
                    index=False), file_name=f"stale-{m}.csv", key=f"stale-{m}")  # fmt: skip


STALE_NAMED = 3  # series named a row of stale series (every one in the download)


def named_series(series: pd.Series) -> str:
    """``60: a, b, c, ...``: how many series, and the first ``STALE_NAMED`` of them."""
    more = ", ..." if len(series) > STALE_NAMED else ""
    return f"{len(series)}: " + ", ".join(series.head(STALE_NAMED)) + more


def alert_box(ctx, a: dict, repository: str | None, moved: list[str]) -> None:
    commit = a["commit_hash"][:12]
    with st.container(border=True):
        why = f": {a['reason']}" if a["reason"] else ""
        by = f" (by {a['changed_by']})" if a["changed_by"] else ""
        st.markdown(f"**{a['machine']} at `{commit}`** ({a['commit_time']}): "
                    f"**{a['state']}**{why}{by}, {len(a['cells'])} cell(s)")  # fmt: skip
        of = asv_project(ctx["path"], ctx["mtime"], a["machine"])  # another project's results
        diff = follow_up.diff_url(repository, a, of)
        since = f"`{a['prev_commit_hash'][:12]}`..`{commit}`" if a["prev_commit_hash"] else commit
        st.caption(f"arrived in {since}" + (f": [the diff]({diff})" if diff else "")
                   + (f"; fixed by `{a['fixed_by'][:12]}`" if a["fixed_by"] else ""))  # fmt: skip
        rows = [{"cell": cell_text((c["benchmark"], c["metric"], c["param_key"])),
                 "environment": c["environment"] or "-",
                 "before": shown(c["before"], c["unit"]), "after": shown(c["after"], c["unit"]),
                 **dict(zip(("change", "after/before 95%"), alerts.cell_words(c), strict=True)),
                 "found by": c["found_by"]} for c in a["cells"]]  # fmt: skip
        df = pd.DataFrame(rows)
        if (df["environment"] == "-").all():  # this suite's runs: the stack is in the sidebar
            df = df.drop(columns="environment")
        # a static table: an interactive grid each alert was most of the page's drawing (five on
        # django-asv's Alerts page: 6.1 s a reload, median, its script 0.24 s); a markdown one
        # (static_table says why)
        static_table(df)
        for line in moved:
            st.caption(f"Since then: {line}")
        rejudged = alerts.rejudged_words(a, ctx["policies"])
        if rejudged:  # set its state below once looked at
            st.caption(markdown_text(rejudged))
        repro = follow_up.repro_command(a, of)
        if repro:
            command(repro)
        bisect = follow_up.bisect_command(a, of)
        measured, bisected = follow_up.not_followed(a, of, bisect)
        for line in measured + bisected:  # what no command printed here can follow up
            st.caption(markdown_text(line))
        if bisect:
            st.caption("Several commits between? Find the first that shows it:")
            command(bisect)
        buttons(ctx, a)


def buttons(ctx, a: dict) -> None:
    """The alert's state changes, in a popover: its widgets are drawn only when it is opened
    (django-asv's four alerts' reasons and buttons: 0.08 s of the page's
    1.9 s first load, medians of 10 side by side)."""
    key = f"{a['machine']}-{a['commit_hash']}"
    with st.popover(f"Change the state ({a['state']})"):
        reason = st.text_input("reason (for Expected)", key=f"reason-{key}")
        clicked = [state for label, state in ACTIONS.items()
                   if state != a["state"] and st.button(label, key=f"{state}-{key}")]  # fmt: skip
    for state in clicked:
        try:
            alerts.change_state(Store(ctx["path"]), a["machine"], a["commit_hash"], state,
                                by="dashboard", reason=reason or None)  # fmt: skip
        except alerts.AlertError as exc:
            st.error(str(exc))
            return
        alert_list.clear()
        st.rerun()
