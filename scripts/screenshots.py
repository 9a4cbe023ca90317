"""Screenshots of every dashboard page, and how long the first page takes in a real browser.

    python -m scripts.screenshots [--store STORE] [--out docs/dashboard]

Without ``--store`` it builds a store of 1,000 synthetic commits (``ragbench.synth``, through
the real ingest path) in a temporary directory. Starts ``python -m dashboard``,
drives Debian's chromium through playwright (never ``playwright install``), and prints the
seconds from navigation to the first page's content: the first visit (a new browser, the
server just started) and the next.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

from dashboard.svg import CLASS
from scripts.pgserver import free_port

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
         "--disable-component-update", "--disable-sync"]  # fmt: skip
# a page's tables (markdown: dashboard.draw.static_table), or its message where it has none
TABLE = "[data-testid='stMarkdown'] table, [data-testid='stAlert']"
# what each page shows once it has rendered: a chart, or the overview's gate line
READY = {
    "Overview": "text=Newest run against its lookback",
    "Alerts": TABLE,
    "Compare": f"{TABLE}, [data-testid='stExpander']",  # where every cell is unchanged: folded
}
# what each screenshot shows, where the first cell would say little: a series that moved
SHOW = {
    "Series": {"machine": "synthetic", "benchmark": "kernel.KernelLatency", "metric": "host_us",
               "cell": "backend=triton,batch=64,geometry=deit_b,lengths=uniform,prune=0.8"},
    "Speedups": {"benchmark": "pipeline.Throughput", "cell": "batch=64,model=deit_base_224"},
    "Machines": {"machine": "synthetic", "other": "synthetic-ada",
                 "benchmark": "kernel.KernelLatency", "metric": "gpu_us"},
}  # fmt: skip
CHART = f"div.{CLASS} svg"  # a chart, drawn on the server (dashboard.svg)


@contextlib.contextmanager
def serve(store: Path, timeout: float = 60, warm: bool = True) -> Iterator[str]:
    """The dashboard's server on ``store`` (``python -m dashboard``, as ``make dashboard``
    starts it); -> its base URL once it answers."""
    with streamlit_server(["dashboard", "--store", str(store), *([] if warm else ["--no-warm"])],
                          timeout) as url:  # fmt: skip
        yield url


@contextlib.contextmanager
def streamlit_server(args: list[str], timeout: float = 60) -> Iterator[str]:
    """``python -m ARGS`` (a streamlit server: ``dashboard ...``, ``streamlit run ...``) in the
    repository, headless on a free port; -> its base URL once it answers."""
    port = free_port()
    cmd = [sys.executable, "-m", *args, "--server.headless", "true", "--server.port", str(port)]
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout
        while True:
            try:
                urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    out = proc.stdout.read()[-2000:]
                    raise RuntimeError(f"streamlit did not start: {out}") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@contextlib.contextmanager
def browser() -> Iterator[object]:
    from playwright.sync_api import sync_playwright

    if not os.path.exists(CHROMIUM):
        raise RuntimeError(f"no browser at {CHROMIUM}: apt-get install chromium")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            yield b.new_page(viewport={"width": 1400, "height": 1000})
        finally:
            b.close()


def open_page(page, url: str, name: str, timeout_ms: int = 60_000, **query) -> float:
    """Navigate to dashboard page ``name`` (``query``: more URL parameters, e.g. machine);
    -> seconds until it has rendered."""
    t0 = time.perf_counter()
    page.goto(f"{url}/?{urllib.parse.urlencode({'page': name, **query})}")
    page.wait_for_selector(READY.get(name, CHART), timeout=timeout_ms)
    seconds = time.perf_counter() - t0
    page.wait_for_timeout(500)  # let the charts' transitions settle before a screenshot
    return seconds


def synthetic_store(directory: Path, commits: int = 1000, second: int = 0) -> Path:
    """A store of ``commits`` synthetic commits in ``directory``, through the real ingest path
    (1,000: 59,000 measurements, ~35 s on 2 cores), and the newest ``second`` of them measured
    on a second machine too (``synthetic-ada``, device times 2.4x); -> its path."""
    from ragbench import synth
    from ragbench.history import detection
    from ragbench.result_files import ingest
    from ragbench.store import Store
    from ragbench.suite_views import SUITE_VIEWS

    path = directory / "perf.duckdb"
    histories = [synth.write_history(directory / "history", commits)]
    if second:
        other = synth.write_history(directory / "ada", commits, machine="synthetic-ada",
                                    gpu_scale=2.4)  # fmt: skip
        for old in sorted((other / "synthetic-ada").glob("*.json"),
                          key=lambda p: json.loads(p.read_text())["date"])[:-second]:  # fmt: skip
            old.unlink()
            old.with_suffix(".fingerprint").unlink()
        histories.append(other)
    with Store(path, views=SUITE_VIEWS) as s:
        detection.update(s, ingest(s, histories, branch="main").new_runs)
    return path


def shoot_all(store: Path, out: Path, warm: bool = True) -> dict[str, float]:
    from dashboard import PAGES

    out.mkdir(parents=True, exist_ok=True)
    times = {}
    with serve(store, warm=warm) as url, browser() as page:
        times["first page (server just started, new browser)"] = open_page(page, url, "Overview")
        times["the same page again"] = open_page(page, url, "Overview")
        for name in PAGES:
            open_page(page, url, name, **SHOW.get(name, {}))
            page.screenshot(path=str(out / f"{name.lower().replace(' ', '-')}.png"),
                            full_page=True)  # fmt: skip
    return times


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", type=Path, default=None)
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "dashboard")
    ap.add_argument(
        "--no-warm",
        action="store_true",
        help="start the server without computing the first page first (to compare)",
    )
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        store = args.store or synthetic_store(Path(tmp), second=100)
        for what, seconds in shoot_all(store, args.out, not args.no_warm).items():
            print(f"{what}: {seconds:.2f} s")
