"""``ragbench versions``: the upgrade report (one commit under two stacks, judged like a gate) and
the version bisect (``--bisect``)."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from .. import envs
from ..policies import load_policies
from ..store import Store, store_spec
from ..suite_views import SUITE_VIEWS
from ..verdicts.status import FAILING, Headline
from .common import MODE_HELP, bench_arg, log, machine_arg, machine_of, policies_arg


def add_parser(sub) -> None:
    u = sub.add_parser(
        "versions",
        help="the upgrade report: one commit under two stacks, judged like a gate",
        description=(
            "Build (or reuse) the two stacks' environments (as run --env), run the suite on the "
            "commit in each, alternating (--rounds each), and judge the second against the "
            "first with the gate's rules: device time, numerics (kernel error, logit drift, "
            "top-1, output hashes) and, where the stacks differ in torch or triton, host time "
            "across processes (two stacks cannot share one, so those cells are inconclusive "
            "unless they moved beyond 100%). Ends with one line: safe to upgrade, or which "
            "cells changed and by how much. Exit 0 safe, 1 not shown safe, 2 unusable input. "
            "With --bisect CELL --between A B: the releases of the one package A and B pin "
            "differently, between the two, are measured against A (binary search) and the "
            "first that changes CELL is named; exit 0 found, 1 B does not change CELL, 2 "
            "unusable input."
        ),
    )
    u.add_argument("--from", dest="from_spec", metavar="SPEC",
                   help="the stack now, e.g. torch==2.14.1,triton==3.8.0; 'pinned': this "
                        "environment's torch and triton")  # fmt: skip
    u.add_argument("--to", dest="to_spec", metavar="SPEC",
                   help="the stack to move to, e.g. torch==2.15.0; 'newest': the newest torch "
                        "release on the registry, with the triton it pins")  # fmt: skip
    u.add_argument("--bisect", metavar="CELL", default=None,
                   help="version bisect: the cell that changed, named as the report names it "
                        "('benchmark.metric params'); needs --between")  # fmt: skip
    u.add_argument(
        "--between",
        nargs=2,
        metavar=("SPEC", "SPEC"),
        default=None,
        help="--bisect: the stack without the change, then the one with it; they "
        "differ in one package's == pin, whose releases in between are tried",
    )
    u.add_argument("--commit", default="HEAD", help="the commit measured (default HEAD)")
    u.add_argument("--store", type=store_spec, default=None,
                   help="keep the runs in this store (default: a temporary one)")  # fmt: skip
    machine_arg(u)
    u.add_argument("--rounds", type=int, default=None, help="alternating rounds (policies: 2)")
    u.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    bench_arg(u)
    policies_arg(u)
    u.add_argument("--report", type=Path, default=None, help="also write the report here")
    u.set_defaults(func=run)


def run(args) -> int:
    from ..gate import drift
    from ..gate.drift import drift_section
    from ..gate.gating import run_gate
    from ..gate.report import gate_markdown
    from ..gate.revisions import resolve_ref

    policies = load_policies(args.policies)
    args.commit = resolve_ref(args.commit)  # one commit (a range is refused) before any build
    if args.bisect:
        return _bisect(args, policies)
    if not (args.from_spec and args.to_spec):
        raise ValueError("versions needs --from SPEC --to SPEC (or --bisect CELL --between A B)")
    if args.from_spec == "pinned":
        args.from_spec = envs.pinned()
    if args.to_spec == "newest":  # the newest torch, with the triton it pins
        from ..version_bisect import newest

        args.to_spec = newest("torch")
    if envs.requirements(args.from_spec) == envs.requirements(args.to_spec):  # unreadable: 2
        raise ValueError(
            f"--from {args.from_spec} and --to {args.to_spec} are the same stack: "
            "pass the stack you have as --from and the one to move to as --to"
        )
    sides = {"base": envs.ensure(args.from_spec, log=log),
             "head": envs.ensure(args.to_spec, log=log)}  # fmt: skip
    with (tempfile.TemporaryDirectory(prefix="ragbench-versions-") as tmp,
          Store(args.store or Path(tmp) / "versions.duckdb",
                views=SUITE_VIEWS) as store):  # fmt: skip
        result = run_gate(
            store, args.commit, args.commit, policies=policies, machine=machine_of(args),
            rounds=args.rounds, mode=args.mode, bench=args.bench, paired_processes=0,
            log=log, environments=sides,
        )  # fmt: skip
        # the outputs of the two stacks, each computed twice by its own Python (ragbench.gate.drift)
        stacks = drift.compare_stacks(result.head, {s: e.python for s, e in sides.items()},
                                      Path(tmp), margin=drift.margin_of(policies),
                                      mode=args.mode, bench=args.bench, log=log)  # fmt: skip
    c = result.comparison
    title = (f"ragbench versions: {args.to_spec} against {args.from_spec}, "
             f"{result.head[:12]}")  # fmt: skip
    text = gate_markdown(result, title=title) + "\n".join(drift_section(stacks)) + "\n"
    changed = [v for v in c.verdicts if v.status in FAILING]
    if c.headline == Headline.PASS:
        last = f"Safe to upgrade from {args.from_spec} to {args.to_spec} on this machine."
    else:
        worst = ", ".join(f"{v.key[0]}.{v.key[1]} {v.key[2]} {v.status}"
                          + (f" {v.change:+.1%}" if v.change is not None else "")
                          for v in changed[:5])  # fmt: skip
        last = (f"Not shown safe ({c.headline}): {len(changed)} cell(s) changed"
                + (f": {worst}" if worst else "") + ".")  # fmt: skip
    print(text + "\n" + last)
    if args.report:
        args.report.write_text(text + "\n" + last + "\n")
    return result.exit_code


def _bisect(args, policies) -> int:
    from .. import version_bisect as bisect
    from ..gate.gating import run_gate

    if not args.between:
        raise ValueError("--bisect needs --between SPEC SPEC (the stack without the change first)")
    key = bisect.parse_cell(args.bisect)
    if policies.for_metric(key[0], key[1]).kind == "info":
        raise bisect.BisectError(f"{args.bisect!r} is shown, not judged (policy info, or no "
                                 "such metric): no release can change its verdict")  # fmt: skip
    first, last = args.between

    def shows(spec: str) -> tuple[bool, str]:
        base = envs.ensure(first, log=log)  # built at the first step, then read from its stamp
        env = envs.ensure(spec, log=log)
        with (tempfile.TemporaryDirectory(prefix="ragbench-bisect-") as tmp,
              Store(args.store or Path(tmp) / "bisect.duckdb",
                    views=SUITE_VIEWS) as store):  # fmt: skip
            result = run_gate(
                store, args.commit, args.commit, policies=policies, machine=machine_of(args),
                rounds=args.rounds, mode=args.mode, bench=[f"^{re.escape(key[0])}\\."],
                paired_processes=0, log=log, environments={"base": base, "head": env},
            )  # fmt: skip
        v = next((v for v in result.comparison.verdicts if v.key == key), None)
        if v is None:
            raise bisect.BisectError(
                f"no cell {args.bisect!r} in {key[0]}'s results (name it as "
                "the gate's report does: 'benchmark.metric params')"
            )
        change = f" {v.change:+.1%}" if v.change is not None else ""
        note = f"{v.status}{change}: {v.note}" if v.note else f"{v.status}{change}"
        return v.status in FAILING, note

    b = bisect.bisect(first, last, shows, log=log)
    text = bisect.markdown(b, args.bisect, first, last)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0 if b.first else 1
