"""``ragbench ingest``: asv result files and pytest-benchmark JSON into the store."""

from __future__ import annotations

from pathlib import Path

from .. import asv_run
from ..policies import load_policies
from .common import log, open_store, store_arg


def add_parser(sub) -> None:
    i = sub.add_parser(
        "ingest",
        help="store asv result files and pytest-benchmark JSON in the DuckDB store",
        description=(
            "Read asv result files (with the environment fingerprint beside them) and "
            "pytest-benchmark JSON (--benchmark-json) into the store, one transaction per file. "
            "Directories are searched recursively. Each file is checked alone: a commit hash, "
            "plausible dates, at least one measurement, finite non-negative numbers. A bad file "
            "is reported and refused (exit 1), every good one is stored; a run already stored "
            "is skipped. A cell asv recorded as failed is stored as failed. A run of a "
            "checkout with uncommitted changes (pytest-benchmark's commit_info.dirty) is "
            "skipped unless "
            "--dirty. The asv.conf.json above an asv results directory (or --config) is kept "
            "per machine: the alerts' links and commands are of that project."
        ),
    )
    i.add_argument("paths", nargs="+", type=Path, help="result files or directories")
    store_arg(i)
    i.add_argument("--label", default=None, help="tag the runs (e.g. gate:<id>:base:0)")
    i.add_argument("--branch", default=None,
                   help="record the runs as made on this branch (history is main's)")  # fmt: skip
    i.add_argument("--policies", type=Path, default=None,
                   help="policies file (TOML); its [machines] map runner names to machines "
                   "(hosted CI runners, each named after its node, as one machine), its main "
                   "settings the change points and alerts of the series the runs gave a "
                   "point")  # fmt: skip
    i.add_argument("--config", type=Path, default=None,
                   help="the asv.conf.json of the project whose asv results these are, where it "
                   "is not above their results directory (there it is found): its repo and "
                   "show_commit_url are what the alerts' links and commands name")  # fmt: skip
    i.add_argument("--dirty", action="store_true",
                   help="store runs measured in a checkout with uncommitted changes "
                   "(pytest-benchmark's commit_info.dirty); skipped otherwise, and said "
                   "so")  # fmt: skip
    i.set_defaults(func=run)


def run(args) -> int:
    from ..history.detection import update
    from ..result_files import ingest

    missing = [p for p in [*args.paths, *[args.config] * bool(args.config)] if not p.exists()]
    if missing:
        raise asv_run.SuiteError(f"no such file or directory: {', '.join(map(str, missing))}")
    policies = load_policies(args.policies)  # its [machines] name the runners
    store = open_store(args)
    report = ingest(store, args.paths, label=args.label, branch=args.branch,
                    machines=policies.machine, log=log, config=args.config,
                    dirty=args.dirty)  # fmt: skip
    # the series that got a point: their change points and main's alerts, with these policies
    detected = update(store, report.new_runs, policies)
    log(f"ragbench ingest: {report.summary()}{detected.summary()} into {store.name}")
    return 1 if report.failed else 0
