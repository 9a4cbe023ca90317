"""Each dashboard page's first load and 95th percentile in a real browser, on a store.

    .venv/bin/python -m scripts.dashboard_bench --store STORE [--loads 20] [--out FILE.json]

Starts ``python -m dashboard --store STORE`` as ``make dashboard`` does (its first page computed
before the server answers; a store file's rollup built or brought up to date first, and timed:
``ragbench.rollup``), then opens every page the store offers in Debian's chromium through
playwright: once in a new browser (the page's own queries not cached yet: its first load), then
``--loads`` times more, each a new navigation (a new streamlit session, as a visitor's reload).
A load is timed from ``page.goto`` until the page has drawn its content (a chart, the
overview's lookback line, the compare table, or the page's message where it has no data).
Prints a table of each page's first load, median, p95 (nearest rank) and slowest load, and the
median time the server spent running the page's script (``$RAGBENCH_DASHBOARD_TIMING``: the
rest of a load is the browser, streamlit's front end and the network between them).
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

from scripts.screenshots import CHART, browser, serve

# what each page shows once it has drawn (a page without data for a machine shows a message)
READY = {
    "Overview": "text=Newest run against its lookback",
    "Compare": "[data-testid='stDataFrame'], [data-testid='stAlert']",
}
OTHER = f"{CHART}, [data-testid='stAlert']"


def timed(page, url: str, name: str, query: dict, timeout_ms: int) -> float:
    import urllib.parse

    t0 = time.perf_counter()
    page.goto(f"{url}/?{urllib.parse.urlencode({'page': name, **query})}")
    page.wait_for_selector(READY.get(name, OTHER), timeout=timeout_ms)
    return time.perf_counter() - t0


def p95(times: list[float]) -> float:
    return sorted(times)[math.ceil(0.95 * len(times)) - 1]


def pages_of(store: Path) -> tuple[list[str], str]:
    """The pages the dashboard offers on ``store`` and the machine they open on (its first)."""
    from dashboard import PAGES
    from dashboard.read import SUITE_PAGES, suite_pages_of
    from ragbench.rollup import Rollup

    r = Rollup.of(store)
    hidden = set(SUITE_PAGES) - set(suite_pages_of(r.metrics(frame=True)))
    return [p for p in PAGES if p not in hidden], sorted(r.machines())[0]


def bench(store: Path, loads: int, timeout_s: float, only: list[str] | None = None) -> dict:
    t0 = time.perf_counter()
    pages, machine = pages_of(store)  # the rollup, built or brought up to date here
    pages = [p for p in pages if not only or p in only]
    figures = {"store": str(store), "rollup_sync_s": round(time.perf_counter() - t0, 2),
               "machine": machine, "loads": loads, "pages": {}}  # fmt: skip
    t0 = time.perf_counter()
    # each page run's script time, as the server writes it (dashboard/app.py)
    log = Path(tempfile.mkstemp(prefix="dashboard-timing-")[1])
    os.environ["RAGBENCH_DASHBOARD_TIMING"] = str(log)
    with serve(store, timeout=timeout_s) as url:
        figures["server_start_s"] = round(time.perf_counter() - t0, 2)
        for name in pages:
            query = {} if name == "Overview" else {"machine": machine}
            log.write_text("")
            with browser() as page:
                first = timed(page, url, name, query, int(timeout_s * 1000))
            with browser() as page:
                again = [timed(page, url, name, query, int(timeout_s * 1000))
                         for _ in range(loads)]  # fmt: skip
            script = [float(line.split("\t")[1]) for line in log.read_text().splitlines()]
            figures["pages"][name] = {
                "first": round(first, 2), "median": round(statistics.median(again), 2),
                "p95": round(p95(again), 2), "max": round(max(again), 2),
                "script_median": round(statistics.median(script[1:] or [math.nan]), 2),
            }  # fmt: skip
            print(f"{name}: {figures['pages'][name]}", file=sys.stderr, flush=True)
    log.unlink()
    return figures


def markdown(f: dict) -> str:
    rows = [f"store `{f['store']}`, machine `{f['machine']}`; rollup sync {f['rollup_sync_s']} s, "
            f"server start (first page computed) {f['server_start_s']} s; {f['loads']} loads "
            "a page after its first", "",
            "| page | first load s | median s | p95 s | slowest s | its script, median s |",
            "|---|---|---|---|---|---|"]  # fmt: skip
    for name, x in f["pages"].items():
        rows.append(f"| {name} | {x['first']} | {x['median']} | {x['p95']} | {x['max']} "
                    f"| {x['script_median']} |")  # fmt: skip
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", type=Path, required=True, help="a store file")
    ap.add_argument("--loads", type=int, default=20, help="loads a page after its first")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds a load may take")
    ap.add_argument("--page", action="append", default=None, help="only this page (repeat)")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures (JSON)")
    args = ap.parse_args(argv)
    figures = bench(args.store, args.loads, args.timeout, args.page)
    print(markdown(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
