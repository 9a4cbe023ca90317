"""Detection at scale, before and after the stored change points: time and peak memory of
``ragbench detect`` and of the dashboard's two history reads, each in a fresh process.

    .venv/bin/python -m scripts.scale_bench --store NEW [--old-store OLD --old-tree DIR]
        --machine M [--last 200 400 2000] [--policies FILE] [--add-run]

``--store``: a store of this ragbench (its change points stored: ``ragbench changepoints``, or
every ingest); ``--old-store`` the same data in a store the old code reads, and ``--old-tree``
a checkout of the old code (``git worktree add --detach DIR <commit>``, with its ``.venv``):
the "before" column runs there, under ``--old-limit-gb`` of address space and ``--timeout``
seconds (beyond them it says so). The dashboard's reads are those of ``dashboard/read.py``
without Streamlit's cache: the Overview's lookback of every series (50 commits, no change
points) and the Series page's one series with its change points (400 commits).
``--add-run``: afterwards, one new run of the machine added to ``--store`` and its change
points updated (what an ingest does): the time, and how many series it touched.

Scale figures come from here, never from a timed test (docs/store.md has them).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# Run in a fresh process in a ragbench tree: prints its seconds as JSON on the last line.
SNIPPET = r"""
import json, sys, time, io, contextlib
from ragbench import cli
from ragbench.store import Store
try:
    from ragbench.history import series as history
    from ragbench.policies import load_policies
except ImportError:  # a tree from before history/ was a package, or before detect.py was split
    try:
        from ragbench import history
        from ragbench.policies import load_policies
    except ImportError:  # into history, compare, policies
        from ragbench import detect as history
        load_policies = history.load_policies
what, store, machine, last, cell, policies = sys.argv[1:7]
last = int(last)
t0 = time.perf_counter()
if what == "detect":
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = cli.main(["detect", "--store", store, "--machine", machine, "--last", str(last),
                         *(["--policies", policies] if policies else [])])
    extra = {"exit": code, "lines": out.getvalue().count("\n")}
else:
    s = Store(store, read_only=True)
    policies = load_policies(policies or None)
    bench, metric, key = json.loads(cell) if what == "series" else (None, None, None)
    filt = {"benchmark": bench, "metric": metric,
            "params": dict(kv.split("=", 1) for kv in key.split(",") if kv)} if bench else {}
    cps = what == "series"
    if hasattr(history, "stored_histories"):
        reports = history.stored_histories(s, machine, policies, last=last, change_points=cps,
                                           **filt)
    else:  # dashboard/read.py's histories before
        runs = s.runs(machine=machine, frame=True)
        times = runs.drop_duplicates("commit_hash")["commit_time"]
        since = times.iloc[min(last, len(times)) - 1].to_pydatetime() if len(times) else None
        rows = s.series(machine=machine, since=since, **filt)
        reports = history.histories(rows, policies, last=last, change_points=cps,
                                    acceptances=s.acceptances())
    extra = {"series": len(reports), "change_points": sum(len(r.change_points) for r in reports)}
print(json.dumps({"seconds": time.perf_counter() - t0, **extra}))
"""

WRAP = (
    "import resource, subprocess, sys\n"
    "limit = int(sys.argv[1])\n"
    "def cap():\n"
    "    if limit: resource.setrlimit(resource.RLIMIT_AS, (limit, limit))\n"
    "r = subprocess.run(sys.argv[3:], cwd=sys.argv[2], capture_output=True, text=True,"
    " preexec_fn=cap)\n"
    "print(r.stdout.strip().splitlines()[-1] if r.stdout.strip() else '{}')\n"
    "u = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(r.returncode, u.ru_maxrss, round(u.ru_utime + u.ru_stime, 2),"
    " (r.stderr.strip().splitlines() or [''])[-1][:200])\n"
)


def measure(tree: Path, what: str, store: str, machine: str, last: int, cell: str,
            policies: str, limit_gb: float, timeout: float) -> dict:  # fmt: skip
    """One measurement in a fresh process (its peak RSS alone), in ``tree``'s ragbench."""
    cmd = [sys.executable, "-c", WRAP, str(int(limit_gb * 2**30)), str(tree),
           str(tree / ".venv/bin/python"), "-c", SNIPPET, what, store, machine, str(last),
           cell, policies]  # fmt: skip
    t0 = time.perf_counter()
    # a session of its own: past the timeout the measured process goes too, not only the wrapper
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    try:
        stdout, stderr = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        return {"wall": time.perf_counter() - t0, "note": f"still running after {timeout:.0f} s"}
    wall = time.perf_counter() - t0
    lines = stdout.strip().splitlines()
    try:
        result = json.loads(lines[-2])
        code, rss_kb, cpu, *err = lines[-1].split(" ", 3)
    except (IndexError, ValueError):
        return {"wall": wall, "note": f"no result: {(stderr or stdout)[-200:]}"}
    note = "" if code == "0" and result else f"exit {code}: {' '.join(err)}"
    return {"wall": wall, "cpu": float(cpu), "rss_mb": int(rss_kb) / 1024, "note": note, **result}


def add_runs(store_path: str, machines: list[str]) -> str:
    """One new run per machine (the next commit, each cell at its newest value), stored as an
    ingest stores it and its series' change points updated: -> a line."""
    from ragbench.history import edivisive as changepoints
    from ragbench.store import Measurement, Run, Store

    store = Store(store_path)
    ids = []
    t0 = time.perf_counter()
    for machine in machines:
        (newest,) = store.runs(machine=machine)[:1]
        rows = store.measurements([newest["run_id"]])
        sha = f"{int(newest['commit_hash'][:12], 16) + 1:040x}"
        run = Run(source="asv", commit_hash=sha, machine=machine,
                  started_at=newest["started_at"].timestamp() + 3600, branch="main",
                  commit_time=newest["commit_time"].timestamp() + 3600,
                  env_name=newest["env_name"],
                  fingerprint={k: newest[k] for k in ("gpu", "driver", "cuda", "torch", "triton",
                                                      "python")})  # fmt: skip
        cells = [Measurement(r["benchmark"], r["metric"], json.loads(r["params"]), r["unit"],
                             r["median"], r["q25"], r["q75"]) for r in rows]  # fmt: skip
        store.add_run(run, cells)
        ids.append(run.run_id)
    stored = time.perf_counter() - t0
    t0 = time.perf_counter()
    n = changepoints.update(store, ids)
    return (
        f"{len(ids)} new run(s) stored in {stored:.1f} s; change points of {n} series "
        f"updated in {time.perf_counter() - t0:.1f} s"
    )


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True)
    ap.add_argument("--old-store", default=None)
    ap.add_argument("--old-tree", type=Path, default=None)
    ap.add_argument("--machine", required=True)
    ap.add_argument("--last", type=int, nargs="+", default=[200])
    ap.add_argument("--cell", default=None,
                    help='the Series page\'s cell as JSON ["benchmark", "metric", "param_key"] '
                    "(default: the store's first series of the machine)")  # fmt: skip
    ap.add_argument("--policies", default="", help="policies file (default ragbench's)")
    ap.add_argument("--old-limit-gb", type=float, default=8.0)
    ap.add_argument("--timeout", type=float, default=900.0)
    ap.add_argument("--add-run", action="store_true")
    ap.add_argument("--only", choices=["before", "after"], default=None)
    args = ap.parse_args(argv)
    cell = args.cell
    if cell is None:
        from ragbench.store import Store

        s = Store(args.store, read_only=True)
        env = s.environments(args.machine)[0]
        cell = json.dumps(list(s.series_keys(args.machine, env)[0]))
    sides = [("after", ROOT, args.store, 0.0)]
    if args.old_tree and args.old_store:
        sides.insert(0, ("before", args.old_tree.resolve(), args.old_store, args.old_limit_gb))
    sides = [s for s in sides if args.only in (None, s[0])]
    print(f"store {args.store}, machine {args.machine}, Series page cell {cell}")
    print("| read | side | wall s (in-process s) | CPU s | peak RSS MB | result |")
    print("|---|---|---|---|---|---|")
    cases = [("detect", last) for last in args.last] + [("overview", 50), ("series", 400)]
    for what, last in cases:
        for side, tree, store, limit in sides:
            r = measure(tree, what, store, args.machine, last, cell, args.policies, limit,
                        args.timeout)  # fmt: skip
            shown = ("wall", "cpu", "rss_mb", "seconds", "note")
            result = r.get("note") or ", ".join(f"{k} {v}" for k, v in r.items() if k not in shown)
            rss = f"{r['rss_mb']:.0f}" if "rss_mb" in r else "-"
            inner = f" ({r['seconds']:.1f})" if "seconds" in r else ""
            cpu = f"{r['cpu']:.1f}" if "cpu" in r else "-"
            label = f"detect --last {last}" if what == "detect" else f"dashboard {what} ({last})"
            print(f"| {label} | {side} | {r['wall']:.1f}{inner} | {cpu} | {rss} | {result} |",
                  flush=True)  # fmt: skip
    if args.add_run:
        print(add_runs(args.store, [args.machine]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
