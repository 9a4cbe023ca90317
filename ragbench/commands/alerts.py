"""``ragbench alerts``: main's alerts listed, or one's state changed."""

from __future__ import annotations

import getpass
import shlex

from ..policies import load_policies
from .common import machine_arg, open_store, policies_arg, store_arg


def add_parser(sub) -> None:
    a = sub.add_parser(
        "alerts",
        help="main's alerts (steps grouped by commit): list them, or set one's state",
        description=(
            "Each ingest of main turns its bad steps (stored change points of the code beyond "
            "a cell's threshold whose after/before interval excludes 1.0, and the newest runs "
            "the lookback flags) and its newest commit's findings (a broken bound, a failed or "
            "missing cell) into alerts grouped by the commit they arrived with "
            "(ragbench/history/alerting.py). Without --set: the alerts (of --machine, in --state, "
            "in any "
            "case), each with its cells, the range of commits, the stack's changes of level "
            "since (never a fix), the command that re-measures exactly those cells and the one "
            "that bisects the range, then the stale series (their last point older than the "
            "machine's newest run: not judged) with its date; exit 1 while one is new, else 0. "
            "With --set STATE --commit C: that alert's state (acknowledged, expected with "
            "--reason, invalid, or new again), printed as the store holds it; fixed is set by "
            "the ingest that finds every step undone by the code, and taken back when the "
            "series is no longer back. Exit 2: no such alert, state or machine."
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
    from .. import follow_up, project
    from ..history import alerting as alerts

    state = _state(args.state)
    if args.new_state is not None:
        if not (args.machine and args.commit):
            raise ValueError("alerts --set needs --machine and --commit (the alert's)")
        store = open_store(args, create=False)
        _machine(store, args.machine)
        user = args.user or getpass.getuser()
        was, now = alerts.change_state(store, args.machine, args.commit, args.new_state, by=user,
                                       reason=args.reason)  # fmt: skip
        print(f"{args.machine} at {was['commit_hash'][:12]}: {was['state']} -> {now}")
        if now != args.new_state.lower():
            raise ValueError(f"the alert's state changed while it was set: it is {now}")
        return 0
    store = open_store(args, read_only=True, create=False)
    if args.machine is not None:
        _machine(store, args.machine)
    policies = load_policies(args.policies)
    found = store.alerts(args.machine, state=state)
    repository = follow_up.repository_url(policies)
    moved = {}  # each machine's open alerts' series read together (23 alerts: 137 s -> 10 s)
    for m in dict.fromkeys(a["machine"] for a in found):
        mine = [a for a in found if a["machine"] == m and a["state"] != "fixed"]
        for commit, lines in alerts.moves_of(store, m, mine, policies).items():
            moved[m, commit] = lines
    for a in found:
        lines = moved.get((a["machine"], a["commit_hash"]), [])
        print(text(a, repository, lines, project.load(store, a["machine"]), policies))
    if state is None:
        print(settings_text(store.alerts(args.machine, cells="settings")), end="")
    new = sum(a["state"] == "new" for a in found)
    for m in [args.machine] if args.machine else sorted({a["machine"] for a in found}):
        print(stale_text(m, alerts.stale_series(store, m, policies)), end="")
    print(f"{len(found)} alert(s), {new} new" + (" (ragbench alerts --set acknowledged|expected|"
          "invalid --machine M --commit C)" if new else ""))  # fmt: skip
    return 1 if new else 0


def _state(state: str | None) -> str | None:
    """A state to list, in any case (``New`` is ``new``); ValueError for one that is none."""
    from ..history.alerting import STATES

    if state is None or state.lower() in STATES:
        return state and state.lower()
    raise ValueError(f"--state {state!r}: one of {', '.join(STATES)}")


def _machine(store, machine: str) -> None:
    """ValueError (exit 2) for a machine the store has no runs of: a mistyped name would list
    nothing and exit 0."""
    known = store.machines()
    if machine not in known:
        raise ValueError(f"no runs of machine {machine!r} in the store (its machines: "
                         f"{', '.join(known) or 'none'})")  # fmt: skip


def stale_text(machine: str, reports: list) -> str:
    """The machine's stale series, each with the date of its last point: not judged."""
    if not reports:
        return ""
    lines = [f"## {machine}: {len(reports)} stale series (the last point older than the "
             "machine's newest run: not judged)", ""]  # fmt: skip
    for r in reports[:STALE_SHOWN]:
        env = f" ({r.environment})" if r.environment else ""
        name = f"{r.key[0]}.{r.key[1]} {r.key[2]}".rstrip()
        lines.append(f"- `{name}`{env}: last point "
                     f"{r.points[-1].commit_hash[:12]} of {r.stale_since}")  # fmt: skip
    if len(reports) > STALE_SHOWN:
        lines.append(f"- ... and {len(reports) - STALE_SHOWN} more")
    return "\n".join(lines) + "\n\n"


STALE_SHOWN = 20


def text(a: dict, repository: str | None, moved: list[str] = (), project=None,
         policies=None) -> str:  # fmt: skip
    """One alert in markdown: its state, range, cells and commands; ``moved``: the
    environment's changes of level since (``alerts.moves``), no fix; ``project``: the asv
    project whose results the machine's are (``ragbench.project``), where it is not this
    suite: the link and the commands are of it; ``policies``: those in force, whose rules
    for the cells may differ from the ones they were found under (``alerts.rejudged``)."""
    from .. import follow_up
    from ..history import alerting as alerts

    since = f"{a['prev_commit_hash'][:12]}..{a['commit_hash'][:12]}" if a["prev_commit_hash"] \
        else a["commit_hash"][:12]  # fmt: skip
    why = f" ({a['reason']})" if a["reason"] else ""
    fixed = f", fixed by {a['fixed_by'][:12]}" if a["fixed_by"] else ""
    link = follow_up.diff_url(repository, a, project)
    lines = [f"## {a['machine']} at {a['commit_hash'][:12]} ({a['commit_time']}): "
             f"{a['state']}{why}{fixed}", "", f"Arrived in {since}"
             + (f": {link}" if link else "."), ""]  # fmt: skip
    for c in a["cells"]:
        change, interval = alerts.cell_words(c)
        interval = f", after/before {interval}" if interval else ""
        env = f" [{c['environment']}]" if c["environment"] else ""
        if c["found_by"] not in alerts.STEP_FOUND:
            lines.append(f"- {alerts.cell_name(c)}{env}: {change} "
                         f"(before: {_num(c['before'])}, now: {_num(c['after'])})")  # fmt: skip
            continue
        lines.append(f"- {alerts.cell_name(c)}{env}: "
                     f"{c['before']:.4g} -> {c['after']:.4g}, {change}{interval} "
                     f"({c['found_by']})")  # fmt: skip
    if moved:
        lines += ["", "Since then (no fix of the code):"] + [f"- {m}" for m in moved]
    rejudged = alerts.rejudged_words(a, policies) if policies is not None else None
    if rejudged:
        where = f"--machine {shlex.quote(a['machine'])} --commit {a['commit_hash'][:12]}"
        lines += ["", f"{rejudged} Once looked at: `ragbench alerts --set expected|invalid "
                      f"--reason TEXT {where}`"]  # fmt: skip
    gone = follow_up.gone_cells(a, project)
    if gone:
        lines += ["", f"No longer in {project.name or 'the project'}'s suite (its asv "
                  f"benchmarks.json), so not measured again: "
                  + ", ".join(alerts.cell_name({"benchmark": b, "metric": m, "param_key": k})
                              for b, m, k in gone)]  # fmt: skip
    repro = follow_up.repro_command(a, project)
    lines += ["", f"Re-measure: `{repro}`"] if repro else []
    bisect = follow_up.bisect_command(a, project)
    measured, bisected = follow_up.not_followed(a, project, bisect)
    lines += [""] if measured and not repro else []
    lines += measured
    lines += [f"Bisect the range: `{bisect}`"] if bisect else bisected
    return "\n".join(lines) + "\n"


def settings_text(found: list[dict]) -> str:
    """The steps where a measurement setting changed (``ragbench.store.timing``), by commit: not
    alerted as the code's, listed so that a person can still look."""
    from ..history import alerting as alerts

    cells = sum(len(a["cells"]) for a in found)
    if not cells:
        return ""
    lines = [f"## Measurement setting changed: {cells} step(s) at {len(found)} commit(s), not "
             "alerted as the code's", "", "The harness timed these cells otherwise on either "
             "side of the step (asv's number or repeat, pytest-benchmark's iterations or "
             "rounds, by 2x or more, where its calibration does not explain it; or asv's "
             "version of the benchmark, its code): the step is the measurement's until the "
             "same settings show it.", ""]  # fmt: skip
    for a in found:
        lines.append(f"- {a['machine']} at {a['commit_hash'][:12]} ({a['commit_time']}):")
        for c in a["cells"]:
            change, _ = alerts.cell_words(c)
            env = f" [{c['environment']}]" if c["environment"] else ""
            lines.append(f"  - {alerts.cell_name(c)}{env}: {c['settings_changed']}; "
                         f"{c['before']:.4g} -> {c['after']:.4g}, {change} "
                         f"({c['found_by']})")  # fmt: skip
    return "\n".join(lines) + "\n\n"


def _num(x) -> str:
    return "none" if x is None else f"{x:.4g}"
