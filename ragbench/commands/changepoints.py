"""``ragbench changepoints``: the stored change points of main's history brought up to date."""

from __future__ import annotations

import time
from pathlib import Path

from ..policies import load_policies
from .common import log, open_store, store_arg


def add_parser(sub) -> None:
    c = sub.add_parser(
        "changepoints",
        help="bring the stored change points of main's history up to date",
        description=(
            "E-Divisive change points of every series (of --machine, or of every machine), "
            "stored in the store (ragbench/history/edivisive.py): windows already computed with "
            "the "
            "same settings are kept, the rest computed. An ingest does this for the series it "
            "gave a point; run it once on a store made before, or after changing [main]'s "
            "settings in the policies. Exit 0 done, 2 unusable input (a --machine the store "
            "has no runs of names those it has)."
        ),
    )
    store_arg(c, history=True)
    c.add_argument("--machine", default=None, help="this machine's series only")
    c.add_argument("--policies", type=Path, default=None, help="policies file (TOML)")
    c.set_defaults(func=run)


def run(args) -> int:
    from ..history import edivisive as changepoints

    policies = load_policies(args.policies)
    store = open_store(args, create=False)
    known = store.machines()
    if args.machine is not None and args.machine not in known:  # a typo would update nothing
        raise ValueError(f"no runs of machine {args.machine!r} in the store (its machines: "
                         f"{', '.join(known) or 'none'})")  # fmt: skip
    t0 = time.perf_counter()
    n = changepoints.rebuild(store, args.machine, policies, log=log)
    log(f"ragbench changepoints: {n} series up to date in {store.name} "
        f"({time.perf_counter() - t0:.1f} s)")  # fmt: skip
    return 0
