"""``ragbench bisect``: the first commit of a range that shows a cell's step."""

from __future__ import annotations

import tempfile
from pathlib import Path

from ..gate.paired import PROCESSES as PAIRED_PROCESSES
from ..policies import load_policies
from .common import MODE_HELP, log, machine_arg, machine_of, open_store, policies_arg


def add_parser(sub) -> None:
    b = sub.add_parser(
        "bisect",
        help="find the first commit between --good and --bad that shows a cell's step",
        description=(
            "As git bisect does across a merge: the first-parent commits after --good up to "
            "--bad, --bad gated against --good first, then a binary search gating each "
            "against --good; where the first bad one is a merge, its branch is searched, each "
            "commit gated against the merge-base. A step measures the cell alone (asv --bench "
            "of its benchmark and params, or the paired runner where its metric is paired) by "
            "the gate's rules; a base's asv samples are measured once. A commit that cannot be "
            "measured (it does not build, the benchmark raised, no value, inconclusive twice) "
            "is skipped, as git bisect skip; where skips leave the answer open, the commits "
            "that may be it are named. A cell the suite does not have, --good equal to --bad "
            "or not its ancestor, or nothing between them: one line, exit 2, before anything "
            "is measured. Exit 0 one commit named, 1 none (--bad does not show the step, or "
            "skips leave several possible), 2 unusable input."
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
    b.add_argument("--rounds", type=int, default=1,
                   help="asv runs of each commit (a base's once for the whole search)")  # fmt: skip
    b.add_argument("--paired-processes", type=int, default=PAIRED_PROCESSES, metavar="N",
                   help="paired processes a step, where the metric is paired")  # fmt: skip
    b.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    b.add_argument("--report", type=Path, default=None, help="also write the report here")
    policies_arg(b)
    b.set_defaults(func=run)


def run(args) -> int:
    from .. import bisect_commits

    policies = load_policies(args.policies)
    with tempfile.TemporaryDirectory(prefix="ragbench-bisect-") as tmp:
        args.store = args.store or Path(tmp) / "bisect.duckdb"
        with open_store(args) as store:
            found = bisect_commits.commit_bisect(
                store, args.cell, args.good, args.bad, policies=policies,
                machine=machine_of(args), mode=args.mode, rounds=args.rounds,
                paired_processes=args.paired_processes, log=log,
            )  # fmt: skip
    text = bisect_commits.markdown(found)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0 if found.first else 1
