"""``ragbench fingerprint``: this environment's fingerprint as JSON."""

from __future__ import annotations

import json

from .. import git
from .. import provenance as fingerprint
from .common import MODE_HELP, machine_arg, machine_of


def add_parser(sub) -> None:
    f = sub.add_parser(
        "fingerprint",
        help="print this environment's fingerprint (JSON)",
        description="GPU, driver, CUDA, torch/triton/timm/Python versions, commit, harness.",
    )
    f.add_argument("--commit", default="HEAD", help="revision to record (default HEAD)")
    machine_arg(f)
    f.add_argument("--mode", choices=["quick", "full"], default="quick", help=MODE_HELP)
    f.set_defaults(func=run)


def run(args) -> int:
    fp = fingerprint.collect(
        commit=git.commits([args.commit])[0],
        machine=machine_of(args),
        mode=args.mode,
    )
    print(json.dumps(fp, indent=2, sort_keys=True))
    return 0
