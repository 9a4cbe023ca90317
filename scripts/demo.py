"""`make demo`, the main job: benchmark the last commits here, store them, gate HEAD.

    python -m scripts.demo [--commits 3] [--store results/perf.duckdb]

1. the quick asv suite on each of the last ``--commits`` commits, oldest first (on a GPU the
   GPU suite, else the labelled CPU subset), into results/asv;
2. the result files ingested into the DuckDB store;
3. the gate report of HEAD against its parent from the stored runs (``ragbench gate --stored``:
   in CI the gate measures base and head alternating in one job instead);
4. where the results are and how to look at them: commands that work as printed.
asv's own output goes to results/asv.log; the terminal gets a line per step and per quarter of
each commit's suite.
A regression in the report does not fail the demo; unusable input does (exit 2).
"""

from __future__ import annotations

import argparse
import shlex
import sys
import time
from pathlib import Path

from ragbench import asv_run, git
from ragbench import provenance as fingerprint
from ragbench.commands.common import machine_arg
from ragbench.gate.errors import GateError
from ragbench.gate.gating import run_gate
from ragbench.gate.report import gate_markdown
from ragbench.history import detection
from ragbench.policies import load_policies
from ragbench.result_files import ingest
from ragbench.store import Store, StoreError, history_branch
from ragbench.suite_views import SUITE_VIEWS

RESULTS = asv_run.RESULTS  # asv.conf.json's: asv compare / publish / show read it
ASV_LOG = RESULTS.parent / "asv.log"  # asv's own output (the terminal gets one line a quarter)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--commits", type=int, default=3, help="how many of the last commits")
    ap.add_argument("--store", type=Path, default=Path("results/perf.duckdb"))
    machine_arg(ap)
    args = ap.parse_args(argv)
    try:
        return demo(args)
    except (asv_run.SuiteError, git.GitError, GateError, StoreError, ValueError, OSError) as exc:
        _log(f"demo: error: {exc}")
        return 2


def demo(args) -> int:
    t0 = time.perf_counter()
    machine = fingerprint.machine(args.machine)
    count = int(git.run("rev-list", "--count", "HEAD"))
    commits = [f"HEAD~{i}" for i in reversed(range(min(args.commits, count)))]
    RESULTS.mkdir(parents=True, exist_ok=True)
    ASV_LOG.write_text("")
    _log(f"== 1/3 the quick suite on {len(commits)} commit(s), machine {machine!r} (asv's log: "
         f"{ASV_LOG})")  # fmt: skip
    summaries = asv_run.run(commits, mode="quick", results_dir=RESULTS, machine=machine, log=_log,
                            asv_log=ASV_LOG)  # fmt: skip
    branch = git.run("rev-parse", "--abbrev-ref", "HEAD")
    branch = history_branch() if branch == "HEAD" else branch  # detached: call it main's
    _log(f"== 2/3 ingest into {args.store} (branch {branch})")
    store = Store(args.store, on_wait=_log, branch=branch, views=SUITE_VIEWS)
    report = ingest(store, [Path(s["result"]) for s in summaries], branch=branch, log=_log)
    _log(report.summary() + detection.update(store, report.new_runs).summary())
    _log("== 3/3 the gate: HEAD against its parent, from the stored runs")
    if count < 2:
        _log("demo: HEAD has no parent: nothing to gate")
        return 0
    res = run_gate(store, "HEAD~1", "HEAD", policies=load_policies(), machine=machine,
                   measure=False, log=_log)  # fmt: skip
    print(gate_markdown(res))
    print(f"Done in {time.perf_counter() - t0:.0f} s. The store {args.store} holds "
          f"{store.counts()['runs']} run(s).")  # fmt: skip
    print("Next (as printed, from this directory; `source .venv/bin/activate` drops .venv/bin/):")
    for what, command in next_steps(args.store, branch, machine):
        print(f"  {what + ':':<34} {command}")
    return 0


def next_steps(store: Path, branch: str, machine: str) -> list[tuple[str, str]]:
    """(what, command) for the demo's last lines, each a command that works as printed (every
    value quoted for the shell: a store path with a space, a branch git allows with a ``;``)."""
    store, m = shlex.quote(str(store)), shlex.quote(f"--machine={machine}")
    on = "" if branch == history_branch() else f" {shlex.quote(f'--branch={branch}')}"
    return [
        ("the dashboard (localhost:8501)", f"make dashboard STORE={store}"),
        ("main's history: change points", f".venv/bin/ragbench detect --store {store} {m}{on}"),
        (
            "every table as Parquet",
            f".venv/bin/ragbench export --store {store} --out results/parquet",
        ),
        ("asv's own view of the results", f".venv/bin/asv compare {m} HEAD~1 HEAD"),
    ]


if __name__ == "__main__":
    sys.exit(main())
