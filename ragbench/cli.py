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
import os
import sys
import traceback

from . import asv_run, envs, trust
from .commands import (
    accept,
    alerts,
    bisect,
    changepoints,
    detect,
    export,
    fingerprint,
    gate,
    ingest,
    record,
    run,
    store,
    verdict,
    versions,
)
from .git import GitError
from .store import StoreError

# the verbs in the order ``--help`` lists them; each module adds its own parser
VERBS = (run, fingerprint, ingest, record, export, store, gate, versions, verdict, accept,
         changepoints, detect, alerts, bisect, trust)  # fmt: skip


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="ragbench",
        description="Benchmark ragged per commit with asv, store the results, gate regressions.",
        epilog="Exit codes: 0 ok, 1 a regression or failure found, 2 unusable input or an "
        "internal error.",
    )
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for verb in VERBS:
        verb.add_parser(sub)
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
    from .gate.errors import GateError
    from .gate.paired import PairedError
    from .github import GitHubError
    from .version_bisect import BisectError

    args = parser().parse_args(argv)
    try:
        return args.func(args)
    except (asv_run.SuiteError, GitError, GateError, PairedError, StoreError, GitHubError, OSError,
            envs.EnvError, BisectError, ValueError, PermissionError) as exc:  # fmt: skip
        return _fail(args.command, str(exc))
    except KeyboardInterrupt:
        return _fail(args.command, "interrupted")
    except Exception as exc:  # a bug: still exit 2, never 1 (a verdict) or 0
        if os.environ.get("RAGBENCH_DEBUG"):
            traceback.print_exc()
        hint = "" if os.environ.get("RAGBENCH_DEBUG") else " (RAGBENCH_DEBUG=1 shows where)"
        return _fail(args.command, f"internal error: {type(exc).__name__}: {exc}{hint}")
