"""``ragbench alerts``: main's alerts listed, or one's state changed."""

from __future__ import annotations

import getpass

from ..policies import load_policies
from .common import machine_arg, open_store, policies_arg, store_arg


def add_parser(sub) -> None:
    a = sub.add_parser(
        "alerts",
        help="main's alerts (steps grouped by commit): list them, or set one's state",
        description=(
            "Each ingest of main turns its bad steps (stored change points beyond a cell's "
            "threshold, and the newest runs the lookback flags) into alerts grouped by the "
            "commit they arrived with (ragbench/alerts.py). Without --set: the alerts (of "
            "--machine, in --state), each with its cells, the range of commits, the command "
            "that re-measures exactly those cells and the one that bisects the range; exit 1 "
            "while one is new, else 0. With --set STATE --commit C: that alert's state "
            "(acknowledged, expected with --reason, invalid, or new again); fixed is set by "
            "the ingest that finds every step undone. Exit 2: no such alert, or no such state."
        ),
    )
    store_arg(a, history=True)
    machine_arg(a)
    a.add_argument("--state", default=None, help="list only the alerts in this state")
    a.add_argument("--set", dest="new_state", default=None, metavar="STATE",
                   help="acknowledged, expected (needs --reason), invalid, or new")  # fmt: skip
    a.add_argument("--commit", default=None, help="--set: the alert's commit (a prefix)")
    a.add_argument("--reason", default=None, help="--set expected: why the step is intended")
    a.add_argument("--user", default=None, help="who sets it (default: this user)")
    policies_arg(a)  # [main] repository_url: the diff's link
    a.set_defaults(func=run)


def run(args) -> int:
    from .. import alerts

    if args.new_state is not None:
        if not (args.machine and args.commit):
            raise ValueError("alerts --set needs --machine and --commit (the alert's)")
        store = open_store(args, create=False)
        user = args.user or getpass.getuser()
        was = alerts.change_state(store, args.machine, args.commit, args.new_state, by=user,
                                  reason=args.reason)  # fmt: skip
        print(f"{args.machine} at {was['commit_hash'][:12]}: {was['state']} -> {args.new_state}")
        return 0
    store = open_store(args, read_only=True, create=False)
    found = store.alerts(args.machine, state=args.state)
    repository = alerts.repository_url(load_policies(args.policies))
    for a in found:
        print(text(a, repository))
    new = sum(a["state"] == "new" for a in found)
    print(f"{len(found)} alert(s), {new} new" + (" (ragbench alerts --set acknowledged|expected|"
          "invalid --machine M --commit C)" if new else ""))  # fmt: skip
    return 1 if new else 0


def text(a: dict, repository: str | None) -> str:
    """One alert in markdown: its state, range, cells and commands."""
    from .. import alerts

    since = f"{a['prev_commit_hash'][:12]}..{a['commit_hash'][:12]}" if a["prev_commit_hash"] \
        else a["commit_hash"][:12]  # fmt: skip
    why = f" ({a['reason']})" if a["reason"] else ""
    fixed = f", fixed by {a['fixed_by'][:12]}" if a["fixed_by"] else ""
    lines = [f"## {a['machine']} at {a['commit_hash'][:12]} ({a['commit_time']}): "
             f"{a['state']}{why}{fixed}", "", f"Arrived in {since}"
             + (f": {alerts.diff_url(repository, a)}" if repository else "."), ""]  # fmt: skip
    for c in a["cells"]:
        change, interval = alerts.cell_words(c)
        interval = f", after/before {interval}" if interval else ""
        env = f" [{c['environment']}]" if c["environment"] else ""
        lines.append(f"- `{c['benchmark']}.{c['metric']} {c['param_key']}`{env}: "
                     f"{c['before']:.4g} -> {c['after']:.4g}, {change}{interval} "
                     f"({c['found_by']})")  # fmt: skip
    lines += ["", f"Re-measure: `{alerts.repro_command(a)}`"]
    bisect = alerts.bisect_command(a)
    if bisect:
        lines.append(f"Bisect the range: `{bisect}`")
    return "\n".join(lines) + "\n"
