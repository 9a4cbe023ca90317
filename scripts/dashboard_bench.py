"""Each dashboard page's first load and 95th percentile in a real browser, on a store.

    .venv/bin/python -m scripts.dashboard_bench --store STORE [--loads 20] [--firsts 5]
                                                [--machine M] [--out FILE.json]

Starts ``python -m dashboard --store STORE`` as ``make dashboard`` does (its first page computed
before the server answers; a store file's rollup built or brought up to date first, and timed:
``ragbench.store.rollup``), then opens every page the store offers in Debian's chromium through
playwright, on ``--machine`` (default: the machine with the most runs): ``--firsts`` times in a
new browser each (a first visit, its cache empty; the first of them with the page's own
queries not cached yet either), then ``--loads`` times more in one browser, each a new
navigation (a new streamlit session, as a visitor's reload). One first load moves by +-0.4 s
between runs on the 2-core machine: the median of several is the figure.
Then, in one browser, ``--loads`` rounds of clicking through every page in the sidebar (a
visitor moving between pages: the script reruns in the open session, the front end stays).
A load is timed from ``page.goto`` (or the click) until the page has drawn its content (a
chart, the overview's lookback line, the compare table, or the page's message where it has no
data) and every chart on it, and streamlit's script has finished with no stale or loading
element left. Prints a table of each page's first loads (the median and the slowest), the
median, p95 (nearest rank) and slowest of its reloads and of its switches, and the median time
the server spent running the page's script
(``$RAGBENCH_DASHBOARD_TIMING``: the rest of a load is the browser, streamlit's front end and
the network between them). Last, the same first loads of two bare streamlit apps
(``FLOOR_APPS``): streamlit's own floor on this machine, in the same minutes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from scripts.screenshots import CHART, TABLE, browser, serve, streamlit_server
from scripts.screenshots import READY as SHOWN

# what each page shows once it has drawn (a page without data for a machine shows a message):
# an element, and a text in the main block where the element alone says little
READY = {
    "Overview": ("[data-testid='stMarkdown']", "Newest run against its lookback"),
    "Alerts": (TABLE, ""),
    "Compare": (SHOWN["Compare"], ""),
}
OTHER = (f"{CHART}, [data-testid='stAlert']", "")
# the page is drawn: the script has finished (streamlit's own end-to-end tests wait for this
# state), no element of the previous run is left stale or still loading, every Vega chart on
# it is drawn (the floor's; the dashboard's charts come drawn, as SVG), the main heading is the
# page's, and its content is there
DRAWN = """([name, ready, text]) => {
  const app = document.querySelector("[data-testid='stApp']");
  if (!app || app.getAttribute("data-test-script-state") !== "notRunning") return false;
  if (document.querySelector("[data-stale='true'], [data-testid='stSkeleton']")) return false;
  for (const chart of document.querySelectorAll("[data-testid='stVegaLiteChart']"))
    if (!chart.querySelector("canvas, svg")) return false;
  const main = document.querySelector("[data-testid='stMain']");
  const h = main && main.querySelector("h2");
  return !!h && h.textContent.startsWith(name) && !!document.querySelector(ready)
    && main.innerText.includes(text);
}"""


# the pages of every machine (the sidebar offers no machine on them)
EVERY_MACHINE = ("Overview", "Alerts")


def drawn(page, name: str, timeout_ms: int, ready: tuple[str, str] | None = None) -> None:
    """Wait until page ``name`` has drawn (``DRAWN``), its content ``ready`` (default: the
    page's in ``READY``)."""
    ready = ready or READY.get(name, OTHER)
    page.wait_for_function(DRAWN, arg=[name, *ready], timeout=timeout_ms)


def timed(page, url: str, name: str, query: dict, timeout_ms: int) -> float:
    import urllib.parse

    t0 = time.perf_counter()
    page.goto(f"{url}/?{urllib.parse.urlencode({'page': name, **query})}")
    drawn(page, name, timeout_ms)
    return time.perf_counter() - t0


def switched(page, name: str, timeout_ms: int) -> float:
    """Seconds from clicking page ``name`` in the sidebar until it has drawn."""
    t0 = time.perf_counter()
    page.get_by_test_id("stSidebar").get_by_text(name, exact=True).click()
    drawn(page, name, timeout_ms)
    return time.perf_counter() - t0


def p95(times: list[float]) -> float:
    return sorted(times)[math.ceil(0.95 * len(times)) - 1]


def pages_of(store: Path) -> tuple[list[str], str]:
    """The pages the dashboard offers on ``store`` and the machine with the most runs of main
    (the busiest history: a store of several runners' results times its largest)."""
    from dashboard import PAGES
    from dashboard.read import SUITE_PAGES, suite_pages_of
    from ragbench.store.rollup import Rollup

    r = Rollup.of(store)
    hidden = set(SUITE_PAGES) - set(suite_pages_of(r.metrics(frame=True)))
    runs = r.runs(frame=True)
    return [p for p in PAGES if p not in hidden], runs["machine"].value_counts().index[0]


def bench(store: Path, loads: int, timeout_s: float, only: list[str] | None = None,
          machine: str | None = None, firsts_n: int = 5) -> dict:  # fmt: skip
    t0 = time.perf_counter()
    pages, busiest = pages_of(store)  # the rollup, built or brought up to date here
    machine = machine or busiest
    pages = [p for p in pages if not only or p in only]
    figures = {"store": str(store), "rollup_sync_s": round(time.perf_counter() - t0, 2),
               "machine": machine, "loads": loads, "firsts": firsts_n, "pages": {},
               "load_average": " ".join(f"{x:.1f}" for x in os.getloadavg())}  # fmt: skip
    t0 = time.perf_counter()
    # each page run's script time, as the server writes it (dashboard/app.py)
    log = Path(tempfile.mkstemp(prefix="dashboard-timing-")[1])
    os.environ["RAGBENCH_DASHBOARD_TIMING"] = str(log)
    with serve(store, timeout=timeout_s) as url:
        figures["server_start_s"] = round(time.perf_counter() - t0, 2)
        for name in pages:
            query = {} if name in EVERY_MACHINE else {"machine": machine}
            log.write_text("")
            firsts = []
            for _ in range(max(firsts_n, 1)):
                with browser() as page:
                    firsts.append(timed(page, url, name, query, int(timeout_s * 1000)))
            with browser() as page:
                again = [timed(page, url, name, query, int(timeout_s * 1000))
                         for _ in range(loads)]  # fmt: skip
            script = [float(line.split("\t")[1]) for line in log.read_text().splitlines()]
            figures["pages"][name] = {
                "first": round(firsts[0], 2), "first_median": round(statistics.median(firsts), 2),
                "first_max": round(max(firsts), 2), **summary("reload", again),
                "script_median": round(statistics.median(script[firsts_n:] or [math.nan]), 2),
            }  # fmt: skip
            print(f"{name}: {figures['pages'][name]}", file=sys.stderr, flush=True)
        # a visitor moving between pages in one session: each page reached from the one above
        # it in the sidebar (the first from the last), ``loads`` rounds
        switches: dict[str, list[float]] = {name: [] for name in pages}
        with browser() as page:
            timed(page, url, pages[-1], {"machine": machine}, int(timeout_s * 1000))
            for _ in range(loads):
                for name in pages:
                    switches[name].append(switched(page, name, int(timeout_s * 1000)))
        for name, times in switches.items():
            figures["pages"][name].update(summary("switch", times))
            print(f"{name}: switches {figures['pages'][name]}", file=sys.stderr, flush=True)
    log.unlink()
    figures["floor"] = floor(firsts_n, timeout_s)
    figures["load_average_after"] = " ".join(f"{x:.1f}" for x in os.getloadavg())
    return figures


# streamlit's own first load, in the same harness: a bare page, and one with a 200-point Vega
# chart (streamlit's chart element: what a dashboard page's charts cost before dashboard.svg)
VEGA = "[data-testid='stVegaLiteChart'] svg, [data-testid='stVegaLiteChart'] canvas"
FLOOR_APPS = {
    "a heading and a line of text": 'st.header("Floor")\nst.markdown("text")\n',
    "the same and one 200-point Vega chart": (
        'st.header("Floor")\nst.markdown("text")\n'
        'st.vega_lite_chart({"data": {"values": [{"x": i, "y": i * i} for i in range(200)]},'
        ' "mark": "line", "encoding": {"x": {"field": "x", "type": "quantitative"},'
        ' "y": {"field": "y", "type": "quantitative"}}})\n'
    ),
}


def floor(firsts_n: int, timeout_s: float) -> dict[str, dict[str, float]]:
    """The median and slowest of ``firsts_n`` first loads (a new browser each) of each bare
    streamlit app of ``FLOOR_APPS``: what any page of any streamlit app costs here."""
    figures = {}
    with tempfile.TemporaryDirectory() as tmp:
        for what, body in FLOOR_APPS.items():
            app = Path(tmp) / "floor.py"
            app.write_text("import streamlit as st\n" + body)
            ready = (VEGA if "chart" in what else "[data-testid='stMarkdown']", "text")
            with streamlit_server(["streamlit", "run", str(app)], timeout_s) as url:
                times = []
                for _ in range(max(firsts_n, 1)):
                    with browser() as page:
                        t0 = time.perf_counter()
                        page.goto(url)
                        drawn(page, "Floor", int(timeout_s * 1000), ready)
                        times.append(time.perf_counter() - t0)
            figures[what] = {"first_median": round(statistics.median(times), 2),
                             "first_max": round(max(times), 2)}  # fmt: skip
            print(f"floor, {what}: {figures[what]}", file=sys.stderr, flush=True)
    return figures


def summary(kind: str, times: list[float]) -> dict[str, float]:
    return {f"{kind}_median": round(statistics.median(times), 2),
            f"{kind}_p95": round(p95(times), 2), f"{kind}_max": round(max(times), 2)}  # fmt: skip


def markdown(f: dict) -> str:
    rows = [f"store `{f['store']}`, machine `{f['machine']}`; rollup sync {f['rollup_sync_s']} s, "
            f"server start (first page computed) {f['server_start_s']} s; {f['firsts']} first "
            f"loads and {f['loads']} reloads a page; load average (1, 5, 15 min) "
            f"{f['load_average']} before, "
            f"{f.get('load_average_after', '?')} after", "",
            "| page | first load s: median / slowest (the first) "
            "| reload: median / p95 / slowest s "
            "| switch in the sidebar: median / p95 / slowest s | its script, median s |",
            "|---|---|---|---|---|"]  # fmt: skip
    for name, x in f["pages"].items():
        rows.append(f"| {name} | {x['first_median']} / {x['first_max']} ({x['first']}) | "
                    + " | ".join(" / ".join(str(x[f"{k}_{s}"]) for s in ("median", "p95", "max"))
                                 for k in ("reload", "switch"))
                    + f" | {x['script_median']} |")  # fmt: skip
    rows += [f"| streamlit alone: {what} | {x['first_median']} / {x['first_max']} | | | |"
             for what, x in f.get("floor", {}).items()]  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, required=True, help="a store file")
    ap.add_argument("--loads", type=int, default=20,
                    help="reloads of a page after its first; rounds of switches")  # fmt: skip
    ap.add_argument("--firsts", type=int, default=5,
                    help="first loads of a page, each in a new browser (default 5)")  # fmt: skip
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a load may take")
    ap.add_argument("--page", action="append", default=None, help="only this page (repeat)")
    ap.add_argument(
        "--machine",
        default=None,
        help="the machine the pages show (default: the one with most runs)",
    )
    ap.add_argument("--out", type=Path, default=None, help="also write the figures (JSON)")
    args = ap.parse_args(argv)
    figures = bench(args.store, args.loads, args.timeout, args.page, args.machine, args.firsts)
    print(markdown(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
