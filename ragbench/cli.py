"""``ragbench``: the command line of the benchmark suite (``python -m ragbench --help``)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from . import fingerprint, suite

MODE_HELP = "grid size: quick (pull requests, make demo; ~1 min on an H100 GPU) or full (main)"


def _run(args) -> int:
    t0 = time.perf_counter()
    summaries = suite.run(
        args.commits,
        mode=args.mode,
        results_dir=args.results,
        machine=args.machine,
        bench=args.bench,
        log=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    print(json.dumps(summaries, indent=2))
    print(f"{len(summaries)} commit(s) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0 if all(s["asv_exit"] == 0 for s in summaries) else 1


def _fingerprint(args) -> int:
    fp = fingerprint.collect(
        commit=suite.resolve([args.commit])[0], machine=args.machine, mode=args.mode
    )
    print(json.dumps(fp, indent=2, sort_keys=True))
    return 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragbench",
        description="Benchmark ragged per commit with asv, store the results, gate regressions.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run",
        help="run the asv suite on commits (current Python environment)",
        description=(
            "Run the asv suite (benchmarks/) on each commit, oldest first: the commit's ragged "
            "is checked out into a temporary worktree, the suite is this checkout's. Writes "
            "asv result files with raw samples and an environment fingerprint beside each. "
            "Exit 1 if a benchmark failed (the rest are still recorded), 2 on unusable input."
        ),
    )
    r.add_argument(
        "commits", nargs="*", default=["HEAD"], help="revisions or ranges (A..B), default HEAD"
    )
    r.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    r.add_argument(
        "--results",
        type=Path,
        default=suite.RESULTS,
        help="asv results directory (default .asv/results)",
    )
    r.add_argument(
        "--machine",
        default=None,
        help="asv machine name (default $RAGBENCH_MACHINE, else the host name)",
    )
    r.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="REGEX",
        help="only benchmarks matching REGEX (repeatable), as asv run --bench",
    )
    r.set_defaults(func=_run)

    f = sub.add_parser(
        "fingerprint",
        help="print this environment's fingerprint (JSON)",
        description="GPU, driver, CUDA, torch/triton/timm/Python versions, commit, harness.",
    )
    f.add_argument("--commit", default="HEAD", help="revision to record (default HEAD)")
    f.add_argument("--machine", default=fingerprint.default_machine(), help="machine name")
    f.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    f.set_defaults(func=_fingerprint)
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except suite.SuiteError as exc:
        print(f"ragbench: error: {exc}", file=sys.stderr)
        return 2
