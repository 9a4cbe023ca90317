"""How long a dashboard page waits while a large ingest writes the store.

    python -m scripts.reader_wait [--commits 1000] [--seconds 3]

A store of ``--commits`` synthetic main commits (ragbench.synth) is ingested by one process
while another loads a dashboard page over and over: a fresh read-only store, then the queries
the Overview and Dispatch-floors pages make (runs, series of one metric, dispatch floors,
drift). The page's time is measured for ``--seconds`` before the ingest (no writer) and for the
whole ingest. Writers hold the file for one transaction, and keep a connection for at most
``ragbench.store.WRITE_SLICE`` seconds, so a page should wait at most about that long.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ragbench import synth
from ragbench.ingest import ingest
from ragbench.store import WRITE_SLICE, Store

PAGE = """
import json, os, sys, time
from ragbench.store import Store
path, go, stop = sys.argv[1], sys.argv[2], sys.argv[3]
times = []
while not os.path.exists(stop):
    t = time.perf_counter()
    s = Store(path, read_only=True)
    s.runs(machine="synthetic")
    s.series(machine="synthetic", benchmark="kernel.KernelLatency", metric="gpu_us",
             params={"backend": "triton"})
    s.dispatch_floors(machine="synthetic")
    s.drift(machine="synthetic")
    times.append((os.path.exists(go), time.perf_counter() - t))
print(json.dumps(times))
"""


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=1000, help="files in the ingest")
    ap.add_argument("--seconds", type=float, default=3.0, help="page loads before it, s")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        seed = synth.write_history(tmp / "seed", 50)
        history = synth.write_history(tmp / "history", args.commits, seed=1)
        for p in (history / synth.MACHINE).glob("*.json"):  # other runs than the seed's
            d = json.loads(p.read_text())
            d["env_name"] = "big"
            p.write_text(json.dumps(d))
        store = tmp / "perf.duckdb"
        ingest(Store(store), [seed], branch="main")
        go, stop = tmp / "go", tmp / "stop"
        reader = subprocess.Popen([sys.executable, "-c", PAGE, str(store), str(go), str(stop)],
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(args.seconds)
        go.touch()
        t0 = time.perf_counter()
        report = ingest(Store(store), [history], branch="main")
        seconds = time.perf_counter() - t0
        stop.touch()
        times = json.loads(reader.communicate(timeout=300)[0])
    alone = [t * 1e3 for during, t in times if not during]
    busy = [t * 1e3 for during, t in times if during]

    def row(name, xs):
        xs = sorted(xs)
        p95 = xs[min(len(xs) - 1, int(0.95 * len(xs)))]
        return (f"| {name} | {len(xs)} | {statistics.median(xs):.0f} | {p95:.0f} | "
                f"{max(xs):.0f} |")  # fmt: skip

    print(
        f"Ingest of {len(report.stored)} files ({report.rows} rows) in {seconds:.1f} s; "
        f"write slice {WRITE_SLICE * 1e3:.0f} ms.\n"
    )
    print("| page loads | n | median ms | p95 ms | max ms |")
    print("|---|---|---|---|---|")
    print(row("no writer", alone))
    print(row("during the ingest", busy))
    return 0


if __name__ == "__main__":
    sys.exit(main())
