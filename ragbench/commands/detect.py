"""``ragbench detect``: main's history, the newest run of each series against its lookback, and the
change points."""

from __future__ import annotations

from .. import asv_run
from ..history import series as history
from ..policies import load_policies
from ..store import Store
from ..verdicts.status import Status
from .alerts import stale_text
from .common import machine_arg, machine_of, open_store, policies_arg, store_arg


def add_parser(sub) -> None:
    d = sub.add_parser(
        "detect",
        help="main-branch history: lookback of the newest run, change points",
        description=(
            "For every series of a machine on the history's branch: the newest commit against "
            "the median and MAD of the previous runs in the same environment (from the newest "
            "accepted change on), and E-Divisive change points over the history, each marked "
            "as an environment change (torch/triton/driver/GPU) or code. Cells that failed on "
            "the newest commit are listed, and so are the bounds it broke; a stale series (its "
            "last point older than the machine's newest run: a dropped environment) is named "
            "with that point's date and not judged. Exit 1 when the newest run regressed, broke a "
            "bound or failed, or when the policies judge none of the machine's metrics (no "
            "verdict)."
        ),
    )
    store_arg(d, history=True)
    machine_arg(d)
    d.add_argument("--last", type=int, default=200,
                   help="the machine's newest commits to report on (default 200)")  # fmt: skip
    policies_arg(d)
    d.set_defaults(func=run)


def run(args) -> int:
    from ..history.report import history_markdown, judged

    policies = load_policies(args.policies)
    store = open_store(args, read_only=True)
    machine = machine_of(args)
    # the lookback in SQL and the stored change points: never every row into Python (a
    # store of 10,000 runs x 750 cells x 3 machines: scripts/scale_bench.py)
    reports = history.stored_histories(store, machine, policies, last=args.last)
    failed = store.newest_failures(machine)
    if not reports and not failed and not store.runs(machine=machine):
        raise asv_run.SuiteError(_no_runs(store, machine))
    current = [r for r in reports if not r.stale]  # a stopped series' last point: not judged
    print(history_markdown(reports, machine, failed), end="")
    print(stale_text(machine, [r for r in reports if r.stale]))
    broken = [r for r in current if r.status == Status.VIOLATION]
    if broken:
        print(f"### Bounds broken on the newest run ({len(broken)})\n")
        print("\n".join(f"- `{r.key[0]}.{r.key[1]}` {r.key[2]}: {r.note}" for r in broken))
    nothing = not judged(current)  # every metric info: no verdict, never an all-clear
    found = (Status.REGRESSION, Status.VIOLATION)
    return 1 if failed or nothing or any(r.status in found for r in current) else 0


def _no_runs(store: Store, machine: str) -> str:
    """Why ``detect`` has nothing: the machines that have runs on the history's branch (pass
    one), else the branches that have runs (ingest with --branch, or pass it)."""
    here = f"the store has no runs of machine {machine!r} on branch {store.branch!r}"
    runs = store.runs()  # newest commit first: the first names the machine of the newest run
    machines = sorted({r["machine"] for r in runs})
    if machines:
        return (f"{here}; its machines on that branch: {', '.join(machines)}: pass "
                f"--machine {runs[0]['machine']} (its newest run)")  # fmt: skip
    branches = ", ".join(f"{b or '(none)'}: {n}" for b, n in store.branches().items())
    return (f"{here} (runs per branch: {branches or 'none'}); ingest with --branch, or pass "
            "--branch")  # fmt: skip
