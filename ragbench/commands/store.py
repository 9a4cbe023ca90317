"""``ragbench store``: the store itself (copy between a file and a lake, maintenance, what it
holds)."""

from __future__ import annotations

import json
import time

from ..policies import load_policies
from ..store import Store, store_spec
from ..suite_views import SUITE_VIEWS
from .common import log, open_store, policies_arg, store_arg


def add_parser(sub) -> None:
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
    policies_arg(c)  # main's change-point settings, for the copied runs' series
    c.set_defaults(func=copy)
    mt = ssub.add_parser(
        "maintain",
        help="keep the store small (the runner's weekly job)",
        description="A lake: small adjacent Parquet files merged, snapshots older than "
        "--keep-days expired, files no snapshot reads deleted (DuckLake's own calls). A file: "
        "a checkpoint. Raw samples stay. Prints files and bytes before and after (JSON).",
    )
    mt.add_argument("--keep-days", type=float, default=30,
                    help="snapshots kept for time travel (default 30, at least 1)")  # fmt: skip
    store_arg(mt)
    mt.set_defaults(func=maintain)
    inf = ssub.add_parser("info", help="backend, row counts, machines, files and bytes (JSON)")
    store_arg(inf)
    inf.set_defaults(func=info)


def copy(args) -> int:
    source = Store(args.source, read_only=True, on_wait=log)
    target = Store(args.target, on_wait=log, views=SUITE_VIEWS)
    t0 = time.perf_counter()
    added, behind = target.copy_from(source)
    if behind:
        from ..history import edivisive as changepoints

        n = changepoints.update(target, behind, load_policies(args.policies))
        log(f"ragbench store copy: the change points of {n} series brought up to date")
    log(f"ragbench store copy: {source.name} -> {target.name} in "
        f"{time.perf_counter() - t0:.1f} s: " + ", ".join(f"{n} {t}" for t, n in added.items())
        + " added")  # fmt: skip
    print(json.dumps(added))
    return 0


def maintain(args) -> int:
    store = open_store(args, create=False)  # maintaining a store that is not there is a typo
    t0 = time.perf_counter()
    sizes = store.maintain(args.keep_days)
    log(f"ragbench store maintain: {store.name} in {time.perf_counter() - t0:.1f} s: "
        f"{sizes['files_before']} -> {sizes['files_after']} file(s), "
        f"{sizes['bytes_before'] / 1e6:.1f} -> {sizes['bytes_after'] / 1e6:.1f} MB")  # fmt: skip
    print(json.dumps(sizes))
    return 0


def info(args) -> int:
    store = open_store(args, read_only=True)
    files, size = store.size()
    summary = {"store": store.name, "backend": store.backend.label,
               **store.counts(), "machines": store.machines(), "files": files,
               "bytes": size}  # fmt: skip
    print(json.dumps(summary, indent=2))
    return 0
