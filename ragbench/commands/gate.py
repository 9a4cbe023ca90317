"""``ragbench gate``: head judged against base, measured in this job (or as stored)."""

from __future__ import annotations

import os
from pathlib import Path

from ..gate.paired import PROCESSES as PAIRED_PROCESSES
from ..policies import load_policies
from ..verdicts.evidence import RULE
from .common import (
    MODE_HELP,
    bench_arg,
    log,
    machine_arg,
    machine_of,
    open_store,
    policies_arg,
    store_arg,
)


def add_parser(sub) -> None:
    g = sub.add_parser(
        "gate",
        help="judge head against base: markdown report, exit 1 on a regression or failure",
        description=(
            "Measure base and head in this job, alternating (--rounds each), ingest, and "
            "compare every cell: a latency is a regression when Mann-Whitney U on the raw "
            "samples is significant after Holm's correction AND the change exceeds the metric's "
            "threshold (policies.toml); flagged and inconclusive cells are measured once more: "
            "a regression stands unless the re-measurement shows, with power, that it is within "
            "its threshold. Numeric drift is held to deterministic bounds. A cell "
            "that failed on head, or that base has and head does not (NaN, skipped, gone), "
            "fails the gate. Prints a markdown report (also appended to $GITHUB_STEP_SUMMARY "
            "when set). The metrics that include host time (paired = true in the policies) "
            "are judged instead from base, head and base again (A/A) timed in the same process, "
            "in randomized interleaved rounds, in --paired-processes fresh processes. "
            f"{RULE} Exit 0 pass, 1 fail or inconclusive, 2 unusable input. --stored "
            "compares what the store already holds (the paired comparison still runs). Where "
            "ragged/ differs, head's outputs (logits, keep masks, kernel outputs) are compared "
            "with base's on the same inputs: one that moved beyond base's run-to-run noise is a "
            "drift finding, which fails."
        ),
    )
    g.add_argument("--base", default=None,
                   help="base revision (a PR's merge base); required unless --settle")  # fmt: skip
    g.add_argument("--head", default="HEAD", help="head revision (default HEAD)")
    store_arg(g)
    machine_arg(g)
    g.add_argument(
        "--stored",
        dest="measure",
        action="store_false",
        help="compare the runs already in the store instead of measuring (no re-measurement)",
    )
    g.add_argument("--environment", default=None, metavar="ENV",
                   help="--stored: compare the runs of this environment only (asv's env_name, "
                   "pytest-benchmark's 'python 3.12, <CPU>', or an env_key); with --config: "
                   "measure in this one of the project's asv environments, as the store "
                   "names it (conda-py3.12-numpy1.26; asv measures TYPE:X.Y, the gate judges "
                   "that one), or asv's spec conda:3.12")  # fmt: skip
    g.add_argument("--config", type=Path, default=None, metavar="ASV_CONF",
                   help="another asv project's asv.conf.json: base and head are its commits, "
                   "each measured by asv with that config (asv builds them from its repo), "
                   "then judged by the same rules; no paired or drift comparison (this "
                   "suite's). Without it, a revision this checkout lacks on a machine whose "
                   "stored results are another project's is refused, naming the "
                   "config")  # fmt: skip
    g.add_argument("--across-environments", action="store_true",
                   help="--stored: pool runs of different environments (refused otherwise: a "
                   "Python 3.8 run against a 3.10 one is no code change)")  # fmt: skip
    g.add_argument("--rounds", type=int, default=None, help="alternating rounds (policies: 2)")
    g.add_argument("--paired-processes", type=int, default=PAIRED_PROCESSES, metavar="N",
                   help=f"fresh processes of the paired comparison (default {PAIRED_PROCESSES}; "
                   "0: none; the host-time cells then fail only beyond 100%%, else are "
                   "inconclusive)")  # fmt: skip
    g.add_argument("--no-drift", dest="drift", action="store_false",
                   help="skip the comparison of head's outputs with base's (ragbench.gate.drift): "
                   "the numerics then keep only their bounds")  # fmt: skip
    g.add_argument("--mode", choices=["quick", "full"], default=None,
                   help=f"{MODE_HELP} (default quick; --settle: the gate's)")  # fmt: skip
    bench_arg(g)
    policies_arg(g)
    g.add_argument("--report", type=Path, default=None, help="also write the report here")
    g.add_argument("--json", type=Path, default=None,
                   help="write the verdict, the failing cells and what settles them here "
                   "(ragbench verdict); where something is left to settle and no --json is "
                   "given: gate-ID.json in a directory of this user's alone ($XDG_RUNTIME_DIR/"
                   "ragbench, else ragbench-UID in the temp directory)")  # fmt: skip
    g.add_argument("--settle", default=None, metavar="GATE",
                   help="measure again only the cells a gate recorded in --store left "
                   "inconclusive or flagged, with the rounds its report names (estimated from "
                   "their spread), and merge them into its recorded verdict (the other cells "
                   "passed there). GATE: the id its report names, or its --json as written "
                   "(a JSON whose digest the store did not record is refused); --base, --head, "
                   "--rounds and --mode come from the store; a gate of another project's "
                   "commits takes its --config (and --environment) again, as its report "
                   "names them")  # fmt: skip
    g.set_defaults(func=run)


def run(args) -> int:
    from ..gate.gate_json import write_json
    from ..gate.gating import rerun_gate, run_gate
    from ..gate.report import gate_markdown

    policies = load_policies(args.policies)
    if args.settle is None and args.base is None:
        raise ValueError("gate needs --base REV (the pull request's merge base), or --settle "
                         "GATE (the id a gate's report names) to settle what it left")  # fmt: skip
    store = open_store(args, read_only=not args.measure)  # --stored only reads
    if args.settle is not None:
        result = rerun_gate(store, args.settle, policies=policies, machine=machine_of(args),
                             mode=args.mode, log=log, config=args.config,
                             environment=args.environment)  # fmt: skip
    else:
        result = run_gate(
            store, args.base, args.head, policies=policies, machine=machine_of(args),
            measure=args.measure, rounds=args.rounds, mode=args.mode or "quick",
            bench=args.bench, paired_processes=args.paired_processes, log=log,
            drift_check=args.drift, environment=args.environment,
            across_environments=args.across_environments, config=args.config,
        )  # fmt: skip
    record(args, store, result)
    if result.plan or args.json:  # the settle command names the recorded gate; this its JSON
        result.json_path = write_json(result, args.json)
    text = gate_markdown(result)
    print(text)
    if args.report:
        args.report.write_text(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write(text)
    log(f"ragbench gate: {result.comparison.headline.upper()} in {result.seconds:.0f} s")
    return result.exit_code


def record(args, store, result) -> None:
    """``result``'s verdict, blocking cells and plan recorded in the store (``rerun.record``):
    what ``--settle`` continues, by the id its report then names. A store this gate may not
    write (--stored opened it to read) is said in one line, and the report names no settle
    command."""
    from ..gate import rerun
    from ..gate.gate_json import to_json
    from ..store import StoreError

    try:
        writer = store if not store.read_only else open_store(args, create=False)
        result.gate_id = rerun.record(writer, to_json(result),
                                       source="settle" if result.rerun_of else "gate",
                                       settles=result.rerun_of)  # fmt: skip
        result.store = writer.name
    except (StoreError, OSError) as exc:
        log(f"gate: not recorded in {store.name} ({exc}): nothing to settle it by")
