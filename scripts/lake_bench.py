"""The lake against the file on this machine: ingest rows/s of the same synthetic result files
into each, what the data takes on disk before and after maintenance, and the dashboard's first
page over each (docs/store.md reports its figures).

    .venv/bin/python -m scripts.lake_bench [--commits 1000] [--machines 3] [--lake STRING]

Without ``--lake`` it starts a PostgreSQL of its own in a temporary directory (scripts/
pgserver.py; ``make postgres`` installs it). The first page is timed as the dashboard's test
times it: a new browser each time, median of ``--pages``.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

from ragbench import synth
from ragbench.history import detection
from ragbench.result_files import ingest
from ragbench.store import Store

# The fleet the synthetic history stands for: machine, device time against the first.
MACHINES = [("synthetic-h100", 1.0), ("synthetic-ada", 2.4), ("synthetic-h200", 0.9)]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def histories(root: Path, commits: int, machines: int) -> list[Path]:
    return [synth.write_history(root / name, commits, machine=name, gpu_scale=scale, seed=k)
            for k, (name, scale) in enumerate(MACHINES[:machines])]  # fmt: skip


def timed_ingest(spec, dirs: list[Path]) -> dict:
    store = Store(spec)
    t0 = time.perf_counter()
    report = ingest(store, dirs, branch="main")
    detection.update(store, report.new_runs)
    seconds = time.perf_counter() - t0
    if report.failed:
        raise RuntimeError(f"refused: {report.failed[:3]}")
    files, size = store.size()
    return {"runs": len(report.stored), "rows": report.rows, "seconds": round(seconds, 1),
            "rows_per_s": round(report.rows / seconds), "files": files, "bytes": size}  # fmt: skip


def first_pages(spec, n: int) -> list[float]:
    """Seconds until the Overview has drawn, each in a new browser on a server started with
    its first page warmed (``python -m dashboard``)."""
    from scripts.screenshots import browser, open_page, serve

    times = []
    with serve(spec) as url:
        for _ in range(n):
            with browser() as page:
                times.append(round(open_page(page, url, "Overview", timeout_ms=180_000), 2))
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--commits", type=int, default=1000)
    ap.add_argument("--machines", type=int, default=3, choices=range(1, len(MACHINES) + 1))
    ap.add_argument("--lake", default=None, help="an empty lake (default: a temporary one)")
    ap.add_argument("--pages", type=int, default=3, help="first-page loads per store")
    ap.add_argument("--out", type=Path, default=None, help="also write the figures (JSON)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="lake-bench-") as tmp:
        tmp = Path(tmp)
        server = None
        lake = args.lake
        if lake is None:
            from scripts.pgserver import Postgres

            server = Postgres(Path(tempfile.mkdtemp(prefix="ragbench-pg-"))).start()
            lake = server.lake(tmp)
        try:
            _log(f"writing {args.commits} synthetic commits x {args.machines} machine(s)")
            dirs = histories(tmp / "history", args.commits, args.machines)
            figures = {"commits": args.commits, "machines": args.machines}
            for name, spec in (("file", tmp / "perf.duckdb"), ("lake", lake)):
                _log(f"ingesting into the {name}")
                figures[name] = timed_ingest(spec, dirs)
                _log(f"  {figures[name]}")
            t0 = time.perf_counter()
            figures["lake_maintained"] = Store(lake).maintain()
            figures["lake_maintained"]["seconds"] = round(time.perf_counter() - t0, 1)
            _log(f"maintained: {figures['lake_maintained']}")
            for name, spec in (("file", tmp / "perf.duckdb"), ("lake", lake)):
                figures[name]["first_page_s"] = first_pages(spec, args.pages)
                _log(f"first page over the {name}: {figures[name]['first_page_s']}")
        finally:
            if server is not None:
                server.stop()
                shutil.rmtree(server.root, ignore_errors=True)  # 245 MB after 10,000 commits
    print(markdown(figures))
    if args.out:
        args.out.write_text(json.dumps(figures, indent=2) + "\n")
    return 0


def markdown(f: dict) -> str:
    mb = 1e6
    rows = [
        "| store | rows | ingest s | rows/s | files | MB | first page s (median) |",
        "|---|---|---|---|---|---|---|",
    ]
    for name in ("file", "lake"):
        x = f[name]
        rows.append(f"| {name} | {x['rows']} | {x['seconds']} | {x['rows_per_s']} | "
                    f"{x['files']} | {x['bytes'] / mb:.1f} | "
                    f"{statistics.median(x['first_page_s'])} ({x['first_page_s']}) |")  # fmt: skip
    m = f["lake_maintained"]
    rows.append(f"| lake, maintained ({m['seconds']} s) | | | | {m['files_after']} | "
                f"{m['bytes_after'] / mb:.1f} | |")  # fmt: skip
    return "\n".join(rows)


if __name__ == "__main__":
    sys.exit(main())
