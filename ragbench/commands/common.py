"""What the verbs share: the arguments several take (``--store``, ``--machine``, ``--bench``,
``--policies``, a pull request's), the store, machine and GitHub client they name, and the log
line on stderr."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from .. import provenance as fingerprint
from ..store import BRANCH_VAR, ENV_VAR, Store, default_path, history_branch, store_spec
from ..suite_views import SUITE_VIEWS

MODE_HELP = "grid size: quick (pull requests, make demo; ~1.5 min on an H100 GPU) or full (main)"


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def open_store(args, read_only: bool = False, create: bool = True) -> Store:
    """The store ``--store`` names; a command that only reads opens it ``read_only`` and one
    that needs an existing store ``create=False``: a mistyped path is exit 2, never a new file.
    Its views are of this suite's benchmarks (``SUITE_VIEWS``)."""
    return Store(args.store, read_only=read_only, on_wait=log, create=create,
                 branch=getattr(args, "history_branch", None), views=SUITE_VIEWS)  # fmt: skip


def machine_of(args) -> str:
    return fingerprint.machine(args.machine)


def github_client(args):
    from ..github import Client

    return Client(args.repo or os.environ.get("GITHUB_REPOSITORY") or "",
                  os.environ.get("GITHUB_TOKEN") or "")  # fmt: skip


def store_arg(p: argparse.ArgumentParser, history: bool = False) -> None:
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


def machine_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--machine",
        default=None,
        help="machine name (default $RAGBENCH_MACHINE, else the host name)",
    )


def bench_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="REGEX",
        help="only benchmarks matching REGEX (repeatable), as asv run --bench",
    )


def policies_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--policies",
        type=Path,
        default=None,
        help="policies file (TOML) in place of ragbench/policies.toml: each metric's kind and "
        "threshold, the gate's and main's settings (docs/store.md, Detection)",
    )


def pr_number(text: str) -> int:
    n = int(text)
    if not 1 <= n < 2**31:
        raise argparse.ArgumentTypeError(f"{text} is not a pull request number")
    return n


def pr_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pr", type=pr_number, required=True, help="pull request number")
    p.add_argument("--head", required=True, help="the pull request's head commit (full hash)")
    p.add_argument("--repo", default=None, help="owner/name (default $GITHUB_REPOSITORY)")
    store_arg(p)
    policies_arg(p)  # its [gate] max_accepted
