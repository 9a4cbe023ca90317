"""``ragbench``: the command line of the benchmark suite (``python -m ragbench --help``)."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from . import detect, fingerprint, suite
from .store import ENV_VAR, Store, StoreLocked, default_path

MODE_HELP = "grid size: quick (pull requests, make demo; ~1 min on an H100 GPU) or full (main)"


def _run(args) -> int:
    t0 = time.perf_counter()
    summaries = suite.run(
        args.commits,
        mode=args.mode,
        results_dir=args.results,
        machine=_machine(args),
        bench=args.bench,
        log=lambda msg: print(msg, file=sys.stderr, flush=True),
    )
    print(json.dumps(summaries, indent=2))
    print(f"{len(summaries)} commit(s) in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return 0 if all(s["asv_exit"] == 0 for s in summaries) else 1


def _fingerprint(args) -> int:
    fp = fingerprint.collect(
        commit=suite.resolve([args.commit])[0], machine=args.machine, mode=args.mode
    )
    print(json.dumps(fp, indent=2, sort_keys=True))
    return 0


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _store(args, read_only: bool = False) -> Store:
    return Store(args.store, read_only=read_only, on_wait=_log)


def _ingest(args) -> int:
    from .ingest import ingest

    missing = [p for p in args.paths if not p.exists()]
    if missing:
        raise suite.SuiteError(f"no such file or directory: {', '.join(map(str, missing))}")
    with _store(args) as store:
        report = ingest(store, args.paths, label=args.label, branch=args.branch, log=_log)
        _log(f"ragbench ingest: {report.summary()} into {store.path}")
    return 1 if report.failed else 0


def _export(args) -> int:
    with _store(args, read_only=True) as store:
        for path in store.export_parquet(args.out):
            print(path)
    return 0


def _machine(args) -> str:
    return args.machine or os.environ.get("RAGBENCH_MACHINE") or fingerprint.default_machine()


def _gate(args) -> int:
    from .gate import run_gate
    from .report import gate_markdown

    policies = detect.load_policies(args.policies)
    with _store(args) as store:
        result = run_gate(
            store, args.base, args.head, policies=policies, machine=_machine(args),
            measure=args.measure, rounds=args.rounds, mode=args.mode, bench=args.bench, log=_log,
        )  # fmt: skip
    text = gate_markdown(result)
    print(text)
    if args.report:
        args.report.write_text(text)
    if args.json:
        failed = result.comparison.by_status("regression", "violation")
        args.json.write_text(json.dumps({
            "base": result.base, "head": result.head, "machine": result.machine,
            "regressions": [{"benchmark": v.key[0], "metric": v.key[1], "param_key": v.key[2],
                             "status": v.status, "change": v.change} for v in failed],
        }, indent=2))  # fmt: skip
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write(text)
    _log(f"ragbench gate: {'FAIL' if result.exit_code else 'PASS'} in {result.seconds:.0f} s")
    return result.exit_code


def _comment(args) -> int:
    from .github import comment

    token = os.environ.get("GITHUB_TOKEN")
    repo = args.repo or os.environ.get("GITHUB_REPOSITORY")
    if not token or not repo:
        raise suite.SuiteError("needs $GITHUB_TOKEN and --repo (or $GITHUB_REPOSITORY)")
    _log(f"ragbench comment: {comment(args.report.read_text(), repo, args.pr, token)}")
    return 0


def _verdict(args) -> int:
    from .github import verdict

    if args.accepted_by:
        with _store(args) as store:
            code = verdict(args.gate_json, store, args.accepted_by, args.reason)
        _log(f"ragbench verdict: regressions accepted by {args.accepted_by}, recorded")
        return code
    code = verdict(args.gate_json, None, None, args.reason)
    _log("ragbench verdict: " + ("regression: FAIL" if code else "PASS"))
    return code


def _detect(args) -> int:
    from .report import history_markdown

    policies = detect.load_policies(args.policies)
    with _store(args, read_only=True) as store:
        machine = _machine(args)
        rows = store.series(machine=machine)
    if not rows:
        raise suite.SuiteError(f"the store has no runs of machine {machine!r}")
    reports = detect.histories(rows, policies, last=args.last)
    print(history_markdown(reports, machine))
    return 1 if any(r.status == "regression" for r in reports) else 0


def _store_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        type=Path,
        default=None,
        help=f"DuckDB results file (default ${ENV_VAR}, else {default_path()})",
    )


def _machine_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--machine",
        default=None,
        help="machine name (default $RAGBENCH_MACHINE, else the host name)",
    )


def _bench_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="REGEX",
        help="only benchmarks matching REGEX (repeatable), as asv run --bench",
    )


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragbench",
        description="Benchmark ragged per commit with asv, store the results, gate regressions.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    r = sub.add_parser(
        "run",
        help="run the asv suite on commits (current Python environment)",
        description=(
            "Run the asv suite (benchmarks/) on each commit, oldest first: the commit's ragged "
            "is checked out into a temporary worktree, the suite is this checkout's. Writes "
            "asv result files with raw samples and an environment fingerprint beside each. "
            "Exit 1 if a benchmark failed (the rest are still recorded), 2 on unusable input."
        ),
    )
    r.add_argument(
        "commits", nargs="*", default=["HEAD"], help="revisions or ranges (A..B), default HEAD"
    )
    r.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    r.add_argument(
        "--results",
        type=Path,
        default=suite.RESULTS,
        help="asv results directory (default .asv/results)",
    )
    _machine_arg(r)
    _bench_arg(r)
    r.set_defaults(func=_run)

    f = sub.add_parser(
        "fingerprint",
        help="print this environment's fingerprint (JSON)",
        description="GPU, driver, CUDA, torch/triton/timm/Python versions, commit, harness.",
    )
    f.add_argument("--commit", default="HEAD", help="revision to record (default HEAD)")
    f.add_argument("--machine", default=fingerprint.default_machine(), help="machine name")
    f.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    f.set_defaults(func=_fingerprint)

    i = sub.add_parser(
        "ingest",
        help="store asv result files and pytest-benchmark JSON in the DuckDB store",
        description=(
            "Read asv result files (with the environment fingerprint beside them) and "
            "pytest-benchmark JSON (--benchmark-json) into the store, one transaction per file. "
            "Directories are searched recursively. A run already stored is skipped; a corrupt "
            "or truncated file is reported and skipped (exit 1), the rest are stored."
        ),
    )
    i.add_argument("paths", nargs="+", type=Path, help="result files or directories")
    _store_arg(i)
    i.add_argument("--label", default=None, help="tag the runs (e.g. gate:<id>:base:0)")
    i.add_argument("--branch", default=None, help="record the runs as made on this branch")
    i.set_defaults(func=_ingest)

    e = sub.add_parser(
        "export",
        help="write the store's tables and views as Parquet",
        description="runs, measurements, acceptances, speedups, dispatch_floors and drift, "
        "one <name>.parquet each.",
    )
    e.add_argument("--out", type=Path, required=True, help="output directory")
    _store_arg(e)
    e.set_defaults(func=_export)

    g = sub.add_parser(
        "gate",
        help="judge head against base: markdown report, exit 1 on a regression",
        description=(
            "Measure base and head in this job, alternating (--rounds each), ingest, and "
            "compare every cell: a latency is a regression when Mann-Whitney U on the raw "
            "samples is significant after Holm's correction AND the change exceeds the metric's "
            "threshold (policies.toml); flagged cells are measured once more and fail only if "
            "the regression reproduces. Numeric drift is held to deterministic bounds. Prints a "
            "markdown report (also appended to $GITHUB_STEP_SUMMARY when set). Exit 0 pass, "
            "1 regression, 2 unusable input. --stored compares what the store already holds."
        ),
    )
    g.add_argument("--base", required=True, help="base revision (a PR's merge base)")
    g.add_argument("--head", default="HEAD", help="head revision (default HEAD)")
    _store_arg(g)
    _machine_arg(g)
    g.add_argument(
        "--stored",
        dest="measure",
        action="store_false",
        help="compare the runs already in the store instead of measuring (no re-measurement)",
    )
    g.add_argument("--rounds", type=int, default=None, help="alternating rounds (policies: 2)")
    g.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    _bench_arg(g)
    g.add_argument("--policies", type=Path, default=None, help="policies file (TOML)")
    g.add_argument("--report", type=Path, default=None, help="also write the report here")
    g.add_argument("--json", type=Path, default=None,
                   help="write the regressions here (for ragbench verdict)")  # fmt: skip
    g.set_defaults(func=_gate)

    c = sub.add_parser(
        "comment",
        help="post the gate's report on a pull request, or update its earlier comment",
        description="Finds the gate's comment by its marker and edits it, so each push updates "
        "one comment. Needs $GITHUB_TOKEN; $GITHUB_API_URL for GitHub Enterprise.",
    )
    c.add_argument("--report", type=Path, required=True, help="the gate's markdown report")
    c.add_argument("--pr", type=int, required=True, help="pull request number")
    c.add_argument("--repo", default=None, help="owner/name (default $GITHUB_REPOSITORY)")
    c.set_defaults(func=_comment)

    v = sub.add_parser(
        "verdict",
        help="fail on the gate's regressions unless a maintainer accepted them",
        description="Reads `ragbench gate --json`. Exit 1 on a regression; with --accepted-by "
        "(the PR carries the perf-regression-accepted label) the regressions are recorded as "
        "accepted in the store and the exit is 0.",
    )
    v.add_argument("--gate-json", type=Path, required=True, help="from ragbench gate --json")
    v.add_argument("--accepted-by", default=None, help="who accepted (the label's author)")
    v.add_argument("--reason", default="perf-regression-accepted label", help="recorded reason")
    _store_arg(v)
    v.set_defaults(func=_verdict)

    d = sub.add_parser(
        "detect",
        help="main-branch history: lookback of the newest run, change points",
        description=(
            "For every series of a machine: the newest commit against the median and MAD of "
            "the previous runs in the same environment, and E-Divisive change points over the "
            "history, each marked as an environment change (torch/triton/driver/GPU) or code. "
            "Exit 1 when the newest run regressed."
        ),
    )
    _store_arg(d)
    _machine_arg(d)
    d.add_argument("--last", type=int, default=200, help="commits per series (default 200)")
    d.add_argument("--policies", type=Path, default=None, help="policies file (TOML)")
    d.set_defaults(func=_detect)
    return p


def main(argv: list[str] | None = None) -> int:
    from .gate import GateError
    from .github import GitHubError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (suite.SuiteError, GateError, StoreLocked, FileNotFoundError, ValueError,
            GitHubError) as exc:  # fmt: skip
        print(f"ragbench {args.command}: error: {exc}", file=sys.stderr)
        return 2
