"""How long a reader of the store waits while an ingest writes it.

    python -m experiments.reader_wait [--case big|refused|files] ... [--commits 1000] [--load 8]

A store of 50 synthetic main commits (ragbench.synth) is read by another process every
~100 ms (a fresh ``Store(read_only=True)`` and one query, ``counts``), before and during an
ingest by this process of:

- ``big``: one asv result file of 100,000 cells (1.7 MB: a value and its quartiles a cell);
- ``refused``: 12 result files of 5.3 MB (300,000 cells each), each refused at its last cell
  (a negative value) after the whole file was read and checked;
- ``files``: ``--commits`` synthetic result files (59 rows each).

``--load N`` keeps N processes spinning beside it (each ended with the run), so that the
machine's load is known rather than whatever else runs. Each row gives the reads' median and
worst time, the part of it spent waiting for the file's lock, how many waited over 1 s, and how
many failed (StoreLocked: a reader gives up after 60 s). A reader waits for the lock while a
writer holds the file: at most one write slice (``ragbench.store.backends.WRITE_SLICE`` of
transactions once the reader's ``waiting_marker`` is there), the connection's close, and the
writer then stays out until the reader is in (``HAND_OVER``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ragbench import synth
from ragbench.result_files import ingest
from ragbench.store import Store
from ragbench.synth import big_result

# The reader: each read's whole time, and the part of it spent opening the file (waiting for
# the lock while a writer holds it); the rest is the query, slow only on a busy CPU.
READER = """
import json, os, sys, time
from ragbench.store import Store, StoreError
path, go, stop = sys.argv[1], sys.argv[2], sys.argv[3]
opening = []
_open = Store._open
def timed_open(self, write):
    t = time.perf_counter()
    try:
        return _open(self, write)
    finally:
        opening.append(time.perf_counter() - t)
Store._open = timed_open
reads = []
while not os.path.exists(stop):
    during = os.path.exists(go)
    opening.clear()
    t = time.perf_counter()
    try:
        Store(path, read_only=True).counts()
        ok = True
    except StoreError:
        ok = False
    reads.append((during, time.perf_counter() - t, sum(opening), ok))
    time.sleep(0.1)
print(json.dumps(reads))
"""


def _inputs(case: str, tmp: Path, commits: int) -> tuple[list[Path], str]:
    if case == "big":
        path = big_result(tmp / "big", 100_000)
        return [tmp / "big"], f"one file of 100,000 cells ({path.stat().st_size / 1e6:.1f} MB)"
    if case == "refused":
        for i in range(12):
            path = big_result(tmp / "refused", 300_000, index=i, refuse=True)
        return [tmp / "refused"], f"12 refused files of {path.stat().st_size / 1e6:.1f} MB"
    history = synth.write_history(tmp / "history", commits, seed=1)
    for p in (history / synth.MACHINE).glob("*.json"):  # other runs than the seed's
        d = json.loads(p.read_text())
        d["env_name"] = "many"
        p.write_text(json.dumps(d))
    return [history], f"{commits} result files"


SPIN = "import time\nend = time.monotonic() + 900\nwhile time.monotonic() < end: pass"


@contextlib.contextmanager
def load(n: int):
    """``n`` processes spinning on the CPU while the block runs (at most 15 min each)."""
    spinners = [subprocess.Popen([sys.executable, "-c", SPIN]) for _ in range(n)]
    try:
        yield
    finally:
        for p in spinners:
            p.kill()
            p.wait()


def measure(case: str, commits: int = 1000, before: float = 2.0) -> dict:
    """Reads of another process before and during one ingest of ``case``."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        store = tmp / "perf.duckdb"
        ingest(Store(store), [synth.write_history(tmp / "seed", 50)], branch="main")
        paths, what = _inputs(case, tmp, commits)
        go, stop = tmp / "go", tmp / "stop"
        reader = subprocess.Popen([sys.executable, "-c", READER, str(store), str(go), str(stop)],
                                  stdout=subprocess.PIPE, text=True)  # fmt: skip
        time.sleep(before)
        go.touch()
        t0 = time.perf_counter()
        report = ingest(Store(store), paths, branch="main")
        seconds = time.perf_counter() - t0
        time.sleep(0.3)  # a read that began during the ingest ends
        stop.touch()
        reads = json.loads(reader.communicate(timeout=600)[0])
    busy = [r for r in reads if r[0]]
    return {
        "case": case, "what": what, "ingest_s": seconds, "summary": report.summary(),
        "alone_ms": statistics.median(t for during, t, _, _ in reads if not during) * 1e3,
        "reads": len(busy), "failed": sum(not ok for _, _, _, ok in busy),
        "over_1s": sum(lock > 1.0 for _, _, lock, _ in busy),
        **{f"{name}_{stat}_ms": f([r[i] for r in busy]) * 1e3 for i, name in ((1, "read"),
           (2, "lock")) for stat, f in (("median", statistics.median), ("max", max))},
    }  # fmt: skip


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--case",
        action="append",
        choices=["big", "refused", "files"],
        help="what is ingested (repeatable; default: big and refused)",
    )
    ap.add_argument("--commits", type=int, default=1000, help="files of --case files")
    ap.add_argument("--load", type=int, default=0, metavar="N",
                    help="N processes spinning on the CPU beside it (default 0)")  # fmt: skip
    args = ap.parse_args(argv)
    print(
        "| ingest | its time | reads | read median / worst ms | of which waiting for the "
        "lock, median / worst ms | waits over 1 s | failed | a read with no writer, ms |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for case in args.case or ["big", "refused"]:
        with load(args.load):
            r = measure(case, args.commits)
        print(f"| {r['what']} ({r['summary']}) | {r['ingest_s']:.1f} s | {r['reads']} | "
              f"{r['read_median_ms']:.0f} / {r['read_max_ms']:.0f} | {r['lock_median_ms']:.0f} "
              f"/ {r['lock_max_ms']:.0f} | {r['over_1s']} | {r['failed']} | {r['alone_ms']:.0f} |",
              flush=True)  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
