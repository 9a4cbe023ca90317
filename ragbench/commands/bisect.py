"""``ragbench bisect``: the first commit of a range that shows a cell's step."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from ..paired import PROCESSES as PAIRED_PROCESSES
from ..policies import load_policies
from .common import MODE_HELP, log, machine_arg, machine_of, open_store, policies_arg


def add_parser(sub) -> None:
    b = sub.add_parser(
        "bisect",
        help="find the first commit between --good and --bad that shows a cell's step",
        description=(
            "The commits --bad has and --good has not (a merge's branch, a batch of pushes "
            "measured once), oldest first: --bad is gated against --good on the cell's "
            "benchmark by the gate's rules (paired where its metric is), then a binary search "
            "gates the commits between, each against --good, and names the first whose verdict "
            "of the cell fails (as asv find, by the gate's rules). A commit that cannot be "
            "built or run is skipped, as git bisect skip. Exit 0 found, 1 --bad does not show "
            "a change of the cell, 2 unusable input."
        ),
    )
    b.add_argument("--cell", required=True,
                   help="'benchmark.metric params', as the gate's report and ragbench alerts "
                   "name it")  # fmt: skip
    b.add_argument("--good", required=True, help="a commit without the step (an ancestor)")
    b.add_argument("--bad", required=True, help="a commit with it")
    b.add_argument("--store", type=Path, default=None,
                   help="keep the measured runs here (default: a temporary store)")  # fmt: skip
    machine_arg(b)
    b.add_argument("--rounds", type=int, default=None, help="alternating rounds a step")
    b.add_argument("--paired-processes", type=int, default=PAIRED_PROCESSES, metavar="N",
                   help="paired processes a step, where the metric is paired")  # fmt: skip
    b.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    b.add_argument("--report", type=Path, default=None, help="also write the report here")
    policies_arg(b)
    b.set_defaults(func=run)


def run(args) -> int:
    from .. import bisect, suite

    policies = load_policies(args.policies)
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="ragbench-bisect-") as tmp:
        args.store = args.store or Path(tmp) / "bisect.duckdb"
        store = open_store(args)
        candidates, steps, first = bisect.commit_bisect(
            store, args.cell, args.good, args.bad, policies=policies, machine=machine_of(args),
            mode=args.mode, rounds=args.rounds, paired_processes=args.paired_processes, log=log,
        )  # fmt: skip
    good = suite.resolve([args.good])[0]
    text = bisect.commit_markdown(args.cell, good, candidates, steps, first,
                                  time.perf_counter() - t0)  # fmt: skip
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0 if first else 1
