"""``ragbench``: the command line of the benchmark suite (``.venv/bin/ragbench --help``).

Exit codes, for every command: 0 ok; 1 a regression or failure found (``run``: a benchmark
failed; ``ingest``: a file refused; ``gate``, ``verdict``: the gate fails or is inconclusive;
``detect``: the newest main run regressed or failed, or nothing was judged); 2 unusable input
or an internal error, always with a one-line message and never a traceback
(``RAGBENCH_DEBUG=1`` prints it). When a command fails with 2 inside a GitHub job, it says so
in the job's summary too.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

from . import envs, fingerprint, history, suite, trust
from .compare import RULE
from .paired import PROCESSES as PAIRED_PROCESSES
from .policies import load_policies
from .store import (
    BRANCH_VAR,
    ENV_VAR,
    Store,
    StoreError,
    default_path,
    history_branch,
    store_spec,
)
from .verdicts import FAILING, Headline, Status

MODE_HELP = "grid size: quick (pull requests, make demo; ~1.5 min on an H100 GPU) or full (main)"


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _store(args, read_only: bool = False, create: bool = True) -> Store:
    """The store ``--store`` names; a command that only reads opens it ``read_only`` and one
    that needs an existing store ``create=False``: a mistyped path is exit 2, never a new file."""
    return Store(args.store, read_only=read_only, on_wait=_log, create=create,
                 branch=getattr(args, "history_branch", None))  # fmt: skip


def _machine(args) -> str:
    return args.machine or os.environ.get("RAGBENCH_MACHINE") or fingerprint.default_machine()


def _run(args) -> int:
    t0 = time.perf_counter()
    for spec in args.env:
        envs.requirements(spec)  # a spec pip could not read stops the run before any work
    commits = suite.resolve(args.commits)  # once: every stack measures the same commits
    summaries, unusable = [], []
    for spec in args.env or [None]:
        try:
            environment = envs.ensure(spec, log=_log) if spec else None
            summaries += [{**s, "env_spec": spec} if spec else s for s in suite.run(
                commits, mode=args.mode, results_dir=args.results, machine=_machine(args),
                bench=args.bench, log=_log, environment=environment,
            )]  # fmt: skip
        except (envs.EnvError, suite.SuiteError) as exc:
            if not spec:
                raise
            why = str(exc) if isinstance(exc, envs.EnvError) else f"--env {spec}: {exc}"
            _log(why)  # reported; the other specs still run
            unusable.append({"env_spec": spec, "error": why})
    print(json.dumps(summaries + unusable, indent=2))
    _log(f"{len(summaries)} run(s) in {time.perf_counter() - t0:.0f} s"
         + (f"; {len(unusable)} --env spec(s) unusable" if unusable else ""))  # fmt: skip
    if unusable:
        return 2
    return 0 if all(s["asv_exit"] == 0 for s in summaries) else 1


def _fingerprint(args) -> int:
    fp = fingerprint.collect(
        commit=suite.resolve([args.commit])[0], machine=args.machine, mode=args.mode
    )
    print(json.dumps(fp, indent=2, sort_keys=True))
    return 0


def _ingest(args) -> int:
    from .ingest import ingest

    missing = [p for p in args.paths if not p.exists()]
    if missing:
        raise suite.SuiteError(f"no such file or directory: {', '.join(map(str, missing))}")
    policies = load_policies(args.policies)  # its [machines] name the runners
    store = _store(args)
    report = ingest(store, args.paths, label=args.label, branch=args.branch,
                    machines=policies.machine, log=_log)  # fmt: skip
    _log(f"ragbench ingest: {report.summary()} into {store.name}")
    return 1 if report.failed else 0


def _record(args) -> int:
    from .record import record

    store = _store(args)
    # GitHub's commit -> pull request association names the pull request whose acceptances
    # a main commit gets; with no token (a local run) none is carried
    client = _client(args) if os.environ.get("GITHUB_TOKEN") else None
    out = record(
        store, before=args.before, after=args.after, machine=_machine(args), mode=args.mode,
        results_dir=args.results, bench=args.bench, branch=store.branch,
        max_commits=args.max_commits, client=client, log=_log,
    )  # fmt: skip
    carried = f"{out.carried} accepted cell(s) carried" if client else "no GitHub access"
    _log(
        f"ragbench record: {len(out.stored)} commit(s) stored, {len(out.skipped)} already "
        f"there; benchmarks failed on {len(out.benchmark_failures)} (stored as failed), "
        f"{len(out.refused)} result file(s) refused, {len(out.unmeasured)} not measurable; "
        f"acceptances of merged pull requests: {carried}"
    )
    for sha, why in out.unmeasured + out.uncarried:
        _log(f"  {sha[:12]}: {why}")
    return out.exit_code


def _export(args) -> int:
    for path in _store(args, read_only=True).export_parquet(args.out):
        print(path)
    return 0


def _store_copy(args) -> int:
    source = Store(args.source, read_only=True, on_wait=_log)
    target = Store(args.target, on_wait=_log)
    t0 = time.perf_counter()
    added, behind = target.copy_from(source)
    if behind:
        from . import changepoints

        n = changepoints.update(target, behind, load_policies(args.policies))
        _log(f"ragbench store copy: the change points of {n} series brought up to date")
    _log(f"ragbench store copy: {source.name} -> {target.name} in "
         f"{time.perf_counter() - t0:.1f} s: " + ", ".join(f"{n} {t}" for t, n in added.items())
         + " added")  # fmt: skip
    print(json.dumps(added))
    return 0


def _store_maintain(args) -> int:
    store = _store(args, create=False)  # maintaining a store that is not there is a typo
    t0 = time.perf_counter()
    sizes = store.maintain(args.keep_days)
    _log(f"ragbench store maintain: {store.name} in {time.perf_counter() - t0:.1f} s: "
         f"{sizes['files_before']} -> {sizes['files_after']} file(s), "
         f"{sizes['bytes_before'] / 1e6:.1f} -> {sizes['bytes_after'] / 1e6:.1f} MB")  # fmt: skip
    print(json.dumps(sizes))
    return 0


def _store_info(args) -> int:
    store = _store(args, read_only=True)
    files, size = store.size()
    info = {"store": store.name, "backend": "ducklake" if store.lake else "duckdb",
            **store.counts(), "machines": store.machines(), "files": files,
            "bytes": size}  # fmt: skip
    print(json.dumps(info, indent=2))
    return 0


def _gate(args) -> int:
    from .gate import run_gate, run_settle, to_json
    from .report import gate_markdown

    policies = load_policies(args.policies)
    if args.settle is None and args.base is None:
        raise ValueError("gate needs --base REV (the pull request's merge base), or --settle "
                         "GATE_JSON (a gate's --json) to settle what it left")  # fmt: skip
    store = _store(args, read_only=not args.measure)  # --stored only reads
    if args.settle is not None:
        result = run_settle(store, args.settle, policies=policies, machine=_machine(args),
                            mode=args.mode, log=_log)  # fmt: skip
    else:
        result = run_gate(
            store, args.base, args.head, policies=policies, machine=_machine(args),
            measure=args.measure, rounds=args.rounds, mode=args.mode, bench=args.bench,
            paired_processes=args.paired_processes, log=_log, drift_check=args.drift,
            environment=args.environment, across_environments=args.across_environments,
        )  # fmt: skip
    if result.plan and args.json is None:  # the settle command reads the plan from it
        args.json = Path(tempfile.gettempdir()) / f"ragbench-gate-{result.head[:12]}.json"
    result.json_path = args.json
    text = gate_markdown(result)
    print(text)
    if args.report:
        args.report.write_text(text)
    if args.json:
        args.json.write_text(json.dumps(to_json(result), indent=2))
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a") as fh:
            fh.write(text)
    _log(f"ragbench gate: {result.comparison.headline.upper()} in {result.seconds:.0f} s")
    return result.exit_code


def _versions(args) -> int:
    import tempfile

    from . import drift
    from .gate import _resolve, run_gate
    from .report import drift_section, gate_markdown

    policies = load_policies(args.policies)
    args.commit = _resolve(args.commit)  # one commit (a range is refused) before any build
    if args.bisect:
        return _bisect(args, policies)
    if not (args.from_spec and args.to_spec):
        raise ValueError("versions needs --from SPEC --to SPEC (or --bisect CELL --between A B)")
    if args.from_spec == "pinned":
        args.from_spec = envs.pinned()
    if args.to_spec == "newest":  # the newest torch, with the triton it pins
        from .bisect import newest

        args.to_spec = newest("torch")
    if envs.requirements(args.from_spec) == envs.requirements(args.to_spec):  # unreadable: 2
        raise ValueError(
            f"--from {args.from_spec} and --to {args.to_spec} are the same stack: "
            "pass the stack you have as --from and the one to move to as --to"
        )
    sides = {"base": envs.ensure(args.from_spec, log=_log),
             "head": envs.ensure(args.to_spec, log=_log)}  # fmt: skip
    with (tempfile.TemporaryDirectory(prefix="ragbench-versions-") as tmp,
          Store(args.store or Path(tmp) / "versions.duckdb") as store):  # fmt: skip
        result = run_gate(
            store, args.commit, args.commit, policies=policies, machine=_machine(args),
            rounds=args.rounds, mode=args.mode, bench=args.bench, paired_processes=0,
            log=_log, environments=sides,
        )  # fmt: skip
        # the outputs of the two stacks, each computed twice by its own Python (ragbench.drift)
        stacks = drift.compare_stacks(result.head, {s: e.python for s, e in sides.items()},
                                      Path(tmp), margin=drift.margin_of(policies),
                                      mode=args.mode, bench=args.bench, log=_log)  # fmt: skip
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
    import re
    import tempfile

    from . import bisect
    from .gate import run_gate

    if not args.between:
        raise ValueError("--bisect needs --between SPEC SPEC (the stack without the change first)")
    key = bisect.parse_cell(args.bisect)
    if policies.for_metric(key[0], key[1]).kind == "info":
        raise bisect.BisectError(f"{args.bisect!r} is shown, not judged (policy info, or no "
                                 "such metric): no release can change its verdict")  # fmt: skip
    first, last = args.between

    def shows(spec: str) -> tuple[bool, str]:
        base = envs.ensure(first, log=_log)  # built at the first step, then read from its stamp
        env = envs.ensure(spec, log=_log)
        with (tempfile.TemporaryDirectory(prefix="ragbench-bisect-") as tmp,
              Store(args.store or Path(tmp) / "bisect.duckdb") as store):  # fmt: skip
            result = run_gate(
                store, args.commit, args.commit, policies=policies, machine=_machine(args),
                rounds=args.rounds, mode=args.mode, bench=[f"^{re.escape(key[0])}\\."],
                paired_processes=0, log=_log, environments={"base": base, "head": env},
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

    b = bisect.bisect(first, last, shows, log=_log)
    text = bisect.markdown(b, args.bisect, first, last)
    print(text)
    if args.report:
        args.report.write_text(text + "\n")
    return 0 if b.first else 1


def _client(args):
    from .github import Client

    return Client(args.repo or os.environ.get("GITHUB_REPOSITORY") or "",
                  os.environ.get("GITHUB_TOKEN") or "")  # fmt: skip


def _verdict(args) -> int:
    from .pr import max_accepted, verdict

    max_accepted(args.policies)  # a policies file that cannot be read stops it here (exit 2)
    j = verdict(
        _store(args), _client(args) if args.github else None, gate_json=args.gate_json,
        report=args.report, pr=args.pr, head=args.head, machine=args.machine, log=_log,
        policies=args.policies,
    )  # fmt: skip
    print(f"ragbench verdict: {j.state.upper()}: {j.description}")
    return j.exit_code


def _accept(args) -> int:
    from .pr import accept, max_accepted

    max_accepted(args.policies)
    j = accept(_store(args, create=False), _client(args), pr=args.pr, head=args.head,
               user=args.user, withdraw=args.withdraw, log=_log,
               policies=args.policies)  # fmt: skip
    print(f"ragbench accept: the verdict is now {j.state.upper()}: {j.description}")
    return 0


def _changepoints(args) -> int:
    from . import changepoints

    policies = load_policies(args.policies)
    store = _store(args, create=False)
    t0 = time.perf_counter()
    n = changepoints.rebuild(store, args.machine, policies, log=_log)
    _log(f"ragbench changepoints: {n} series up to date in {store.name} "
         f"({time.perf_counter() - t0:.1f} s)")  # fmt: skip
    return 0


def _detect(args) -> int:
    from .report import history_markdown, judged

    policies = load_policies(args.policies)
    store = _store(args, read_only=True)
    machine = _machine(args)
    # the lookback in SQL and the stored change points: never every row into Python (a
    # store of 10,000 runs x 750 cells x 3 machines: scripts/scale_bench.py)
    reports = history.stored_histories(store, machine, policies, last=args.last)
    failed = store.newest_failures(machine)
    if not reports and not failed and not store.runs(machine=machine):
        raise suite.SuiteError(_no_runs(store, machine))
    print(history_markdown(reports, machine, failed))
    nothing = not judged(reports)  # every metric info: no verdict, never an all-clear
    return 1 if failed or nothing or any(r.status == Status.REGRESSION for r in reports) else 0


def _no_runs(store: Store, machine: str) -> str:
    """Why ``detect`` has nothing: the machines that have runs on the history's branch (pass
    one), else the branches that have runs (ingest with --branch, or pass it)."""
    here = f"the store has no runs of machine {machine!r} on branch {store.branch!r}"
    machines = sorted({r["machine"] for r in store.runs()})
    if machines:
        return (f"{here}; its machines on that branch: {', '.join(machines)}: pass "
                f"--machine {machines[0]}")  # fmt: skip
    branches = ", ".join(f"{b or '(none)'}: {n}" for b, n in store.branches().items())
    return (f"{here} (runs per branch: {branches or 'none'}); ingest with --branch, or pass "
            "--branch")  # fmt: skip


# --- arguments ------------------------------------------------------------------------------


def _store_arg(p: argparse.ArgumentParser, history: bool = False) -> None:
    p.add_argument(
        "--store",
        type=store_spec,
        default=None,
        help=f"DuckDB results file, or a DuckLake 'ducklake:postgres:dbname=... "
        f"data_path=...' (docs/store.md; default ${ENV_VAR}, else {default_path()})",
    )
    if history:
        p.add_argument(
            "--branch", dest="history_branch", default=None,
            help=f"the history's branch (default ${BRANCH_VAR}, else {history_branch()!r})",
        )  # fmt: skip


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


def _policies_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--policies",
        type=Path,
        default=None,
        help="policies file (TOML) in place of ragbench/policies.toml: each metric's kind and "
        "threshold, the gate's and main's settings (docs/store.md, Detection)",
    )


def _pr_number(text: str) -> int:
    n = int(text)
    if not 1 <= n < 2**31:
        raise argparse.ArgumentTypeError(f"{text} is not a pull request number")
    return n


def _pr_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pr", type=_pr_number, required=True, help="pull request number")
    p.add_argument("--head", required=True, help="the pull request's head commit (full hash)")
    p.add_argument("--repo", default=None, help="owner/name (default $GITHUB_REPOSITORY)")
    _store_arg(p)
    _policies_arg(p)  # its [gate] max_accepted


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragbench",
        description="Benchmark ragged per commit with asv, store the results, gate regressions.",
        epilog="Exit codes: 0 ok, 1 a regression or failure found, 2 unusable input or an "
        "internal error.",
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
    r.add_argument("--results", type=Path, default=suite.RESULTS,
                   help="asv results directory (default results/asv)")  # fmt: skip
    r.add_argument("--env", action="append", default=[], metavar="SPEC",
                   help="run under another stack: comma-separated pip requirements, e.g. "
                        "torch==2.12.1,triton==3.7.1 (repeatable: one run per spec). Built once "
                        "in $RAGBENCH_ENVS (default .envs/) on top of this environment, only "
                        "what the spec changes installed; a spec that cannot be installed or "
                        "cannot run the kernel is reported and the others still run "
                        "(exit 2)")  # fmt: skip
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
            "Directories are searched recursively. Each file is checked alone: a commit hash, "
            "plausible dates, at least one measurement, finite non-negative numbers. A bad file "
            "is reported and refused (exit 1), every good one is stored; a run already stored "
            "is skipped. A cell asv recorded as failed is stored as failed."
        ),
    )
    i.add_argument("paths", nargs="+", type=Path, help="result files or directories")
    _store_arg(i)
    i.add_argument("--label", default=None, help="tag the runs (e.g. gate:<id>:base:0)")
    i.add_argument("--branch", default=None,
                   help="record the runs as made on this branch (history is main's)")  # fmt: skip
    i.add_argument("--policies", type=Path, default=None,
                   help="policies file (TOML); its [machines] map runner names to machines "
                   "(hosted CI runners, each named after its node, as one machine)")  # fmt: skip
    i.set_defaults(func=_ingest)

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
    rec.add_argument("--results", type=Path, default=suite.RESULTS,
                     help="asv results directory (default results/asv)")  # fmt: skip
    rec.add_argument("--max-commits", type=int, default=30,
                     help="measure at most this many commits (default 30)")  # fmt: skip
    _store_arg(rec, history=True)
    _machine_arg(rec)
    _bench_arg(rec)
    rec.set_defaults(func=_record)

    e = sub.add_parser(
        "export",
        help="write the store's tables and views as Parquet",
        description="meta, runs, measurements, acceptances, gates, series, speedups, "
        "dispatch_floors and drift, one <name>.parquet each.",
    )
    e.add_argument("--out", type=Path, required=True, help="output directory")
    _store_arg(e)
    e.set_defaults(func=_export)

    st = sub.add_parser(
        "store",
        help="the store itself: copy between a file and a lake, maintenance, what it holds",
        description="A store is a DuckDB file or a DuckLake string "
        "('ducklake:postgres:dbname=perf host=db user=ragbench data_path=DIR_OR_S3_PREFIX'; "
        "the password from $PGPASSWORD or ~/.pgpass).",
    )
    ssub = st.add_subparsers(dest="store_command", required=True, metavar="ACTION")
    c = ssub.add_parser(
        "copy",
        help="copy every run, acceptance and gate verdict that TO lacks from FROM",
        description="Copy FROM's runs (measurements, raw samples, labels), acceptances and "
        "gate verdicts that TO lacks into TO, in one transaction, run ids kept, with the "
        "stored change points (those of a machine TO had runs of are brought up to date): a "
        "runner's "
        "file into the lake, or the lake into a file for a local look. Run again, it adds "
        "nothing. Prints the rows added per table (JSON).",
    )
    c.add_argument("source", metavar="FROM", type=store_spec, help="a store (file or lake)")
    c.add_argument("target", metavar="TO", type=store_spec,
                   help="a store (file or lake), created if needed")  # fmt: skip
    _policies_arg(c)  # main's change-point settings, for the copied runs' series
    c.set_defaults(func=_store_copy)
    mt = ssub.add_parser(
        "maintain",
        help="keep the store small (the runner's weekly job)",
        description="A lake: small adjacent Parquet files merged, snapshots older than "
        "--keep-days expired, files no snapshot reads deleted (DuckLake's own calls). A file: "
        "a checkpoint. Raw samples stay. Prints files and bytes before and after (JSON).",
    )
    mt.add_argument("--keep-days", type=float, default=30,
                    help="snapshots kept for time travel (default 30, at least 1)")  # fmt: skip
    _store_arg(mt)
    mt.set_defaults(func=_store_maintain)
    inf = ssub.add_parser("info", help="backend, row counts, machines, files and bytes (JSON)")
    _store_arg(inf)
    inf.set_defaults(func=_store_info)

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
    _store_arg(g)
    _machine_arg(g)
    g.add_argument(
        "--stored",
        dest="measure",
        action="store_false",
        help="compare the runs already in the store instead of measuring (no re-measurement)",
    )
    g.add_argument("--environment", default=None, metavar="ENV",
                   help="--stored: compare the runs of this environment only (asv's env_name, "
                   "pytest-benchmark's 'python 3.12, <CPU>', or an env_key)")  # fmt: skip
    g.add_argument("--across-environments", action="store_true",
                   help="--stored: pool runs of different environments (refused otherwise: a "
                   "Python 3.8 run against a 3.10 one is no code change)")  # fmt: skip
    g.add_argument("--rounds", type=int, default=None, help="alternating rounds (policies: 2)")
    g.add_argument("--paired-processes", type=int, default=PAIRED_PROCESSES, metavar="N",
                   help=f"fresh processes of the paired comparison (default {PAIRED_PROCESSES}; "
                   "0: none; the host-time cells then fail only beyond 100%%, else are "
                   "inconclusive)")  # fmt: skip
    g.add_argument("--no-drift", dest="drift", action="store_false",
                   help="skip the comparison of head's outputs with base's (ragbench.drift): "
                   "the numerics then keep only their bounds")  # fmt: skip
    g.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    _bench_arg(g)
    _policies_arg(g)
    g.add_argument("--report", type=Path, default=None, help="also write the report here")
    g.add_argument("--json", type=Path, default=None,
                   help="write the verdict, the failing cells and what settles them here "
                   "(ragbench verdict; --settle); where something is left to settle and no "
                   "--json is given: ragbench-gate-HEAD.json in the temp directory")  # fmt: skip
    g.add_argument("--settle", type=Path, default=None, metavar="GATE_JSON",
                   help="measure again only the cells the gate whose --json this is left "
                   "inconclusive or flagged, with the rounds its report names (estimated from "
                   "their spread), and merge them into its verdict (the other cells passed "
                   "there); --base, --head and --rounds come from the file")  # fmt: skip
    g.set_defaults(func=_gate)

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
    _machine_arg(u)
    u.add_argument("--rounds", type=int, default=None, help="alternating rounds (policies: 2)")
    u.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    _bench_arg(u)
    _policies_arg(u)
    u.add_argument("--report", type=Path, default=None, help="also write the report here")
    u.set_defaults(func=_versions)

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
    v.add_argument("--machine", default=None, help="the gate's machine (default: from the JSON)")
    v.add_argument("--github", action="store_true", help="post the comment and the status")
    _pr_args(v)
    v.set_defaults(func=_verdict)

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
    _pr_args(a)
    a.set_defaults(func=_accept)

    c = sub.add_parser(
        "changepoints",
        help="bring the stored change points of main's history up to date",
        description=(
            "E-Divisive change points of every series (of --machine, or of every machine), "
            "stored in the store (ragbench/changepoints.py): windows already computed with the "
            "same settings are kept, the rest computed. An ingest does this for the series it "
            "gave a point; run it once on a store made before, or after changing [main]'s "
            "settings in the policies. Exit 0 done, 2 unusable input."
        ),
    )
    _store_arg(c, history=True)
    c.add_argument("--machine", default=None, help="this machine's series only")
    c.add_argument("--policies", type=Path, default=None, help="policies file (TOML)")
    c.set_defaults(func=_changepoints)

    d = sub.add_parser(
        "detect",
        help="main-branch history: lookback of the newest run, change points",
        description=(
            "For every series of a machine on the history's branch: the newest commit against "
            "the median and MAD of the previous runs in the same environment (from the newest "
            "accepted change on), and E-Divisive change points over the history, each marked "
            "as an environment change (torch/triton/driver/GPU) or code. Cells that failed on "
            "the newest commit are listed. Exit 1 when the newest run regressed or failed, or "
            "when the policies judge none of the machine's metrics (no verdict)."
        ),
    )
    _store_arg(d, history=True)
    _machine_arg(d)
    d.add_argument("--last", type=int, default=200,
                   help="the machine's newest commits to report on (default 200)")  # fmt: skip
    _policies_arg(d)
    d.set_defaults(func=_detect)
    trust.add_parser(sub)  # ragbench/trust.py: the trusted jobs' tripwire, who may run a PR
    return p


def _fail(command: str, message: str) -> int:
    """Exit 2: the message on stderr, and in the GitHub job's summary when there is one."""
    print(f"ragbench {command}: error: {message}", file=sys.stderr)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        try:
            with open(summary, "a") as fh:
                fh.write(f"\n**ragbench {command} failed (exit 2):** {message}\n")
        except OSError:
            pass
    return 2


def main(argv: list[str] | None = None) -> int:
    from .bisect import BisectError
    from .gate import GateError
    from .github import GitHubError
    from .paired import PairedError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (suite.SuiteError, GateError, PairedError, StoreError, GitHubError, OSError,
            envs.EnvError, BisectError, ValueError, PermissionError) as exc:  # fmt: skip
        return _fail(args.command, str(exc))
    except KeyboardInterrupt:
        return _fail(args.command, "interrupted")
    except Exception as exc:  # a bug: still exit 2, never 1 (a verdict) or 0
        if os.environ.get("RAGBENCH_DEBUG"):
            traceback.print_exc()
        hint = "" if os.environ.get("RAGBENCH_DEBUG") else " (RAGBENCH_DEBUG=1 shows where)"
        return _fail(args.command, f"internal error: {type(exc).__name__}: {exc}{hint}")
