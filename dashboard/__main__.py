"""Serve the dashboard, its first page computed before the first visitor arrives.

    python -m dashboard [--store PATH] [--policies FILE] [--no-warm] [streamlit options, e.g.
                        --server.port 8502]

The same as ``streamlit run dashboard/app.py [options] -- --store PATH --policies FILE``, except
that the app is first run in this process, bare (no browser), once a page as a visitor first
sees it (the Overview first): that fills its caches (streamlit keeps one cache per function for
the whole process) and imports what the pages need. Warming every page, not only the Overview,
took a page's first load on the 10,000-run store from 4.2-4.5 s to 2.9 s (load 4-8), and the
server's start from 10 s to 18 s. Measured on a 1,000-commit store on the 2-core machine: a
cold first page took 2.4-3.7 s, of which 1.6 s was the app's first run (imports 0.6 s, the store's
queries and the gate's comparison 1.0 s); warmed and without streamlit's file watcher (on for
editing the app: --server.fileWatcherType auto), 1.4-2.1 s, median 1.65 s, the rest being
streamlit's front end loading in the browser. A warm-up that fails is reported and the server
starts anyway: the app then shows the error to the visitor, as it would have.
"""

from __future__ import annotations

import argparse
import logging
import runpy
import sys
import time
from pathlib import Path

from ragbench.policies import load_policies
from ragbench.store import store_spec

APP = Path(__file__).resolve().parent / "app.py"


def app_args(store: str | Path | None, policies: Path | None) -> list[str]:
    """The app's own arguments (dashboard/read.py reads them)."""
    return [*(["--store", str(store)] if store else []),
            *(["--policies", str(policies)] if policies else [])]  # fmt: skip


def warm(store: str | Path | None, policies: Path | None = None) -> None:
    """Run the app, bare, on ``store`` (its default where None): the Overview, then each other
    page as a visitor first opens it (the machine of the newest run, every commit)."""
    from dashboard import PAGES

    argv = sys.argv
    logging.disable(logging.WARNING)  # bare mode warns on every element: no browser session
    try:
        for page in PAGES:
            sys.argv = [str(APP), *app_args(store, policies), "--warm-page", page]
            t0 = time.perf_counter()
            try:
                runpy.run_path(str(APP), run_name="__main__")
            except Exception as exc:  # the server still starts; the page shows the error
                print(f"dashboard: warm-up of {page} failed ({type(exc).__name__}: {exc})",
                      file=sys.stderr)  # fmt: skip
            else:
                print(f"dashboard: {page} computed in {time.perf_counter() - t0:.1f} s",
                      file=sys.stderr)  # fmt: skip
    finally:
        logging.disable(logging.NOTSET)
        sys.argv = argv


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m dashboard", description=__doc__.split("\n\n")[0],
        epilog="Other options go to `streamlit run` (see `streamlit run --help`).",
    )  # fmt: skip
    ap.add_argument("--store", type=store_spec, default=None,
                    help="the results store, a file or a DuckLake string (default: "
                         "$RAGBENCH_STORE, else results/perf.duckdb)")  # fmt: skip
    ap.add_argument("--policies", type=Path, default=None,
                    help="policies file (TOML) the pages judge by, as every ragbench command "
                         "takes it (default: ragbench/policies.toml)")  # fmt: skip
    ap.add_argument("--no-warm", action="store_true",
                    help="start the server without computing the first page first")  # fmt: skip
    args, streamlit_args = ap.parse_known_args(argv)
    if args.policies:  # a bad file stops here, before a server says nothing but the error
        try:
            load_policies(args.policies)
        except (OSError, ValueError) as exc:
            print(f"python -m dashboard: error: {exc}", file=sys.stderr)
            return 2
    if not args.no_warm:
        warm(args.store, args.policies)
        # the warm-up read streamlit's config before the flags below: streamlit then warns
        # that a [server] option changed and wants a restart, but no server has started yet
        # and the flags do apply (the port, say)
        logging.getLogger("streamlit.config").addFilter(
            lambda record: "config option section was detected" not in record.getMessage()
        )
    from streamlit.web import cli

    own = app_args(args.store, args.policies)
    store = ["--", *own] if own else []
    # no file watcher: it is for editing the app (pass --server.fileWatcherType auto for
    # that); watching every module the app loaded cost the first visitor 0.3 s (median of 6
    # interleaved runs 1.92 -> 1.65 s, 1,000-commit store, 2-core machine)
    sys.argv = ["streamlit", "run", str(APP), "--browser.gatherUsageStats", "false",
                "--server.fileWatcherType", "none", *streamlit_args, *store]  # fmt: skip
    return cli.main()


if __name__ == "__main__":
    sys.exit(main())
