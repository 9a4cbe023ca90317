"""``ragbench record``: main's history, the pushed commits measured and stored one at a time."""

from __future__ import annotations

import os
from pathlib import Path

from .. import asv_run
from .common import (
    MODE_HELP,
    bench_arg,
    github_client,
    log,
    machine_arg,
    machine_of,
    open_store,
    store_arg,
)


def add_parser(sub) -> None:
    rec = sub.add_parser(
        "record",
        help="main's history: measure and store the pushed commits, one at a time",
        description=(
            "Measure main's first-parent commits BEFORE..AFTER, and older ones not yet stored "
            "for this machine, oldest first; ingest each into the store (branch main) as soon "
            "as it is measured; carry a merged pull request's acceptances to its main commit "
            "(the pull request GitHub associates with the commit, $GITHUB_TOKEN; none without "
            "it). Exit 0 all stored, 1 a benchmark failed (stored as failed) or a result file "
            "was refused, 2 a commit the suite could not run, GitHub could not be asked, or "
            "unusable input."
        ),
    )
    rec.add_argument("--repo", default=None, help="owner/name (default $GITHUB_REPOSITORY)")
    rec.add_argument("--before", default=None, help="the push's old tip (GitHub's before)")
    rec.add_argument("--after", default="HEAD", help="the push's new tip (default HEAD)")
    rec.add_argument("--mode", choices=["quick", "full"], default="full", help=MODE_HELP)
    rec.add_argument("--results", type=Path, default=asv_run.RESULTS,
                     help="asv results directory (default results/asv)")  # fmt: skip
    rec.add_argument("--max-commits", type=int, default=30,
                     help="measure at most this many commits (default 30)")  # fmt: skip
    rec.add_argument("--policies", type=Path, default=None,
                     help="policies file (TOML): the settings of the change points and alerts "
                     "of the stored commits (default: the shipped one)")  # fmt: skip
    store_arg(rec, history=True)
    machine_arg(rec)
    bench_arg(rec)
    rec.set_defaults(func=run)


def run(args) -> int:
    from ..policies import load_policies
    from ..pushes import record

    store = open_store(args)
    # GitHub's commit -> pull request association names the pull request whose acceptances
    # a main commit gets; with no token (a local run) none is carried
    client = github_client(args) if os.environ.get("GITHUB_TOKEN") else None
    out = record(
        store, before=args.before, after=args.after, machine=machine_of(args), mode=args.mode,
        results_dir=args.results, bench=args.bench, branch=store.branch,
        max_commits=args.max_commits, client=client, policies=load_policies(args.policies),
        log=log,
    )  # fmt: skip
    carried = f"{out.carried} accepted cell(s) carried" if client else "no GitHub access"
    log(
        f"ragbench record: {len(out.stored)} commit(s) stored, {len(out.skipped)} already "
        f"there; benchmarks failed on {len(out.benchmark_failures)} (stored as failed), "
        f"{len(out.refused)} result file(s) refused, {len(out.unmeasured)} not measurable; "
        f"acceptances of merged pull requests: {carried}"
    )
    for sha, why in out.unmeasured + out.uncarried:
        log(f"  {sha[:12]}: {why}")
    return out.exit_code
