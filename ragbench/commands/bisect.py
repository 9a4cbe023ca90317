"""``ragbench bisect``: the first commit of a range that shows a cell's step."""

from __future__ import annotations

import re
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
    b.add_argument("--config", type=Path, default=None, metavar="ASV_CONF",
                   help="another asv project's asv.conf.json: --good and --bad are its commits, "
                   "which this checkout does not have; asv's own search runs in its directory "
                   "(asv find --config ... GOOD..BAD '^name$': the benchmark, all its params "
                   "together) and names the commit it finds")  # fmt: skip
    b.add_argument("--environment", default=None, metavar="ENV",
                   help="with --config: the project's asv environment to search in "
                   "as the store names it (conda-py3.12, conda-py3.12-numpy1.26, a pre-0.5 "
                   "py2.7-Cython-numpy1.8: asv's -E that selects it alone), or asv's spec "
                   "(conda:3.12)")  # fmt: skip
    b.add_argument("--invert", action="store_true",
                   help="with --config: the step is a drop (a throughput, a track_ value that "
                   "fell): asv find --invert, which searches for a decrease (without it asv "
                   "names the greatest increase)")  # fmt: skip
    b.set_defaults(func=run)


def run(args) -> int:
    from .. import bisect_commits

    if args.config is not None:
        return asv_find(args)
    if args.invert:
        raise ValueError("--invert is asv find's, with --config: this suite's bisection reads "
                         "which way is worse from the policies")  # fmt: skip
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


def asv_find(args) -> int:
    """``--config``: asv's own bisection of the cell's benchmark in another project's
    directory; exit 0 where it names a commit, 1 where it names none, 2 where asv failed."""
    import shlex
    import subprocess
    import sys

    from .. import asv_run, git
    from ..asv_environments import selector
    from ..discovery import asv_name, parse_cell
    from ..project import read

    conf = read(args.config)  # ValueError, one line, where it is no asv config
    key = parse_cell(args.cell)  # CellError (a ValueError), one line
    for flag, ref in (("--good", args.good), ("--bad", args.bad)):
        if git.is_range(ref):
            raise ValueError(f"{flag} {ref!r} is a range: pass one commit")
    words = ["find", "--config", conf.config]
    if args.machine:
        words += ["--machine", args.machine]
    if args.environment:  # asv's spec as given; a name, what selects that one alone
        spec = args.environment
        if ":" not in spec:
            try:
                spec = selector(spec, conf.config)
            except ValueError as exc:
                raise ValueError(f"--environment {spec!r}: {exc}") from None
        words += ["-E", spec]
    words += ["--invert"] * args.invert
    words += [f"{args.good}..{args.bad}", "^" + re.escape(asv_name(key)) + "$"]
    cwd = Path(conf.config).parent
    if args.machine:  # asv asks about a machine it does not know: its defaults, as the gate's
        subprocess.run([sys.executable, "-m", "asv", "machine", "--yes", "--machine",
                        args.machine, "--config", conf.config], cwd=cwd,
                       capture_output=True)  # fmt: skip
    log(f"bisect: asv {shlex.join(words)} (in {cwd})")
    out = subprocess.run([sys.executable, "-m", "asv", *words], cwd=cwd,
                         capture_output=True, text=True)  # fmt: skip
    sys.stderr.write(out.stdout + out.stderr)
    found = re.search(r"Greatest (?:regression|improvement) found: (\S+)", out.stdout)
    if out.returncode != 0:
        last = (out.stderr.strip() or out.stdout.strip() or "no output").splitlines()[-1]
        raise asv_run.SuiteError(f"asv find exited with {out.returncode}: {last[:200]}")
    step = "down" if args.invert else "up"
    text = (f"First commit of the step {step} (asv find, {args.cell}): {found.group(1)}" if found
            else f"asv find named no commit between {args.good} and {args.bad} where it "
            f"went {step}")  # fmt: skip
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0 if found else 1
