"""``ragbench run``: the asv suite on commits, in this environment or under other stacks
(``--env``)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from .. import asv_run, envs, git
from .common import MODE_HELP, bench_arg, log, machine_arg, machine_of


def add_parser(sub) -> None:
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
    r.add_argument("--results", type=Path, default=asv_run.RESULTS,
                   help="asv results directory (default results/asv)")  # fmt: skip
    r.add_argument("--env", action="append", default=[], metavar="SPEC",
                   help="run under another stack: comma-separated pip requirements, e.g. "
                        "torch==2.12.1,triton==3.7.1 (repeatable: one run per spec). Built once "
                        "in $RAGBENCH_ENVS (default .envs/) on top of this environment, only "
                        "what the spec changes installed; a spec that cannot be installed or "
                        "cannot run the kernel is reported and the others still run "
                        "(exit 2)")  # fmt: skip
    machine_arg(r)
    bench_arg(r)
    r.set_defaults(func=run)


def run(args) -> int:
    t0 = time.perf_counter()
    for spec in args.env:
        envs.requirements(spec)  # a spec pip could not read stops the run before any work
    commits = git.commits(args.commits)  # once: every stack measures the same commits
    summaries, unusable = [], []
    for spec in args.env or [None]:
        try:
            environment = envs.ensure(spec, log=log) if spec else None
            summaries += [{**s, "env_spec": spec} if spec else s for s in asv_run.run(
                commits, mode=args.mode, results_dir=args.results, machine=machine_of(args),
                bench=args.bench, log=log, environment=environment,
            )]  # fmt: skip
        except (envs.EnvError, asv_run.SuiteError, git.GitError) as exc:
            if not spec:
                raise
            why = str(exc) if isinstance(exc, envs.EnvError) else f"--env {spec}: {exc}"
            log(why)  # reported; the other specs still run
            unusable.append({"env_spec": spec, "error": why})
    print(json.dumps(summaries + unusable, indent=2))
    log(f"{len(summaries)} run(s) in {time.perf_counter() - t0:.0f} s"
        + (f"; {len(unusable)} --env spec(s) unusable" if unusable else ""))  # fmt: skip
    if unusable:
        return 2
    return 0 if all(s["asv_exit"] == 0 for s in summaries) else 1
