"""``ragbench verdict`` (trusted): a pull request's gate output judged against its acceptances."""

from __future__ import annotations

from pathlib import Path

from .common import github_client, log, open_store, pr_args


def add_parser(sub) -> None:
    v = sub.add_parser(
        "verdict",
        help="trusted: judge a pull request's gate output against its acceptances",
        description=(
            "Read `ragbench gate --json` (the gate job's artifact: checked field by field, and "
            "for --head, the commit GitHub names), record it in the store, and judge its "
            "failures against the acceptances given on that commit. With --github: post the "
            "report and verdict as the PR's one comment, set the ragbench/gate commit status, "
            "and take a stale acceptance label off a failing head ($GITHUB_TOKEN). Exit 0 "
            "pass or accepted, 1 failures not accepted, 2 no usable gate output."
        ),
    )
    v.add_argument("--gate-json", type=Path, required=True, help="from ragbench gate --json")
    v.add_argument("--report", type=Path, default=None, help="the gate's markdown report")
    v.add_argument("--machine", default=None,
                   help="the machine the gate ran on; the JSON must name it (default "
                   "$RAGBENCH_MACHINE; unset: the JSON's own, unchecked)")  # fmt: skip
    v.add_argument("--base-sha", default=None, metavar="SHA",
                   help="the pull request's base commit (GitHub's event): the JSON's base must "
                   "be its merge base with --head, which git computes in this checkout (the "
                   "PR's head fetched from origin's refs/pull/N/head as data when missing); "
                   "only a base so checked is named in the comment's commands")  # fmt: skip
    v.add_argument("--github", action="store_true", help="post the comment and the status")
    pr_args(v)
    v.set_defaults(func=run)


def run(args) -> int:
    from ..pr import max_accepted, verdict

    max_accepted(args.policies)  # a policies file that cannot be read stops it here (exit 2)
    j = verdict(
        open_store(args), github_client(args) if args.github else None, gate_json=args.gate_json,
        report=args.report, pr=args.pr, head=args.head, machine=args.machine, log=log,
        policies=args.policies, base_sha=args.base_sha,
    )  # fmt: skip
    print(f"ragbench verdict: {j.state.upper()}: {j.description}")
    return j.exit_code
