"""``ragbench export``: the store's tables and views as Parquet."""

from __future__ import annotations

from pathlib import Path

from .common import open_store, store_arg


def add_parser(sub) -> None:
    from ..store.schema import OURS  # what export_parquet writes: every table and view

    e = sub.add_parser(
        "export",
        help="write the store's tables and views as Parquet",
        description=f"{', '.join(sorted(OURS))}: one <name>.parquet each.",
    )
    e.add_argument("--out", type=Path, required=True, help="output directory")
    store_arg(e)
    e.set_defaults(func=run)


def run(args) -> int:
    for path in open_store(args, read_only=True).export_parquet(args.out):
        print(path)
    return 0
