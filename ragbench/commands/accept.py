"""``ragbench accept`` (trusted): a maintainer's acceptance of a gate's failures, recorded or
withdrawn."""

from __future__ import annotations

from .common import github_client, log, open_store, pr_args


def add_parser(sub) -> None:
    a = sub.add_parser(
        "accept",
        help="trusted: record (or withdraw) a maintainer's acceptance of a gate's failures",
        description=(
            "The perf-regression-accepted label was added by USER on the PR at --head: if "
            "GitHub says USER may write to the repository, record the acceptance of the "
            "failures the trusted verdict recorded at that commit (at most [gate] "
            "max_accepted of policies.toml), then update the status and the comment. "
            "--withdraw (the label was removed) deletes it. Needs $GITHUB_TOKEN. Exit 0 done, "
            "2 refused (no write permission, no gate verdict yet, more failing cells than "
            "max_accepted) or unusable input."
        ),
    )
    a.add_argument("--user", required=True, help="who added or removed the label")
    a.add_argument("--withdraw", action="store_true", help="the label was removed")
    pr_args(a)
    a.set_defaults(func=run)


def run(args) -> int:
    from ..pr import accept, max_accepted

    max_accepted(args.policies)
    j = accept(open_store(args, create=False), github_client(args), pr=args.pr, head=args.head,
               user=args.user, withdraw=args.withdraw, log=log,
               policies=args.policies)  # fmt: skip
    if j is None:
        print(f"ragbench accept: no gate verdict of PR #{args.pr} at {args.head[:12]} is "
              "recorded: no status or comment changed")  # fmt: skip
    else:
        print(f"ragbench accept: the verdict is now {j.state.upper()}: {j.description}")
    return 0
