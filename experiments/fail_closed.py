"""Does the gate fail closed here? Plant a broken kernel on a throw-away commit and gate it.

    python -m experiments.fail_closed --fault nan     # the triton backend's output all NaN
    python -m experiments.fail_closed --fault raise   # the triton backend raises
    python -m experiments.fail_closed --bench '^numerics\\.KernelError' --rounds 1

The fault is committed on top of HEAD in a temporary worktree (this checkout is not touched;
the commit stays unreferenced in the repository until git's garbage collection), then
``ragbench gate --base HEAD --head <fault>`` measures both through asv, alternating, into a
scratch store, exactly as a pull request's gate does. Exit 0 when the gate failed the fault
(exit 1, with the cells the fault broke in the report), 1 when it let it through, 2 when the
gate could not run.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ragbench import git
from scripts.rehearse import FAULTS


def plant(fault: str) -> str:
    """Commit ``fault`` on top of HEAD in a temporary worktree; -> the commit."""
    with tempfile.TemporaryDirectory(prefix="fail-closed-") as tmp:
        work = Path(tmp) / "tree"
        git.run("worktree", "add", "--detach", str(work), "HEAD")
        try:
            with (work / "ragged" / "attention.py").open("a") as fh:
                fh.write(FAULTS[fault])
            ident = ["-c", "user.name=ragbench", "-c", "user.email=ragbench@localhost"]
            git.run(*ident, "commit", "--quiet", "-am", f"a planted fault: {fault}", cwd=work)
            return git.run("rev-parse", "HEAD", cwd=work)
        finally:
            git.run("worktree", "remove", "--force", str(work))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog=__doc__.split("\n\n", 1)[1])  # fmt: skip
    ap.add_argument("--fault", choices=sorted(FAULTS), default="nan")
    ap.add_argument("--bench", action="append", default=[], metavar="REGEX",
                    help="only these benchmarks (default: the quick suite)")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=None, help="alternating rounds (policies: 2)")
    ap.add_argument("--report", type=Path, default=None, help="also write the report here")
    args = ap.parse_args(argv)
    head = plant(args.fault)
    print(f"planted {args.fault!r} as {head[:12]} on {git.commit('HEAD')[:12]}",
          file=sys.stderr)  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="fail-closed-store-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "ragbench",
            "gate",
            "--base",
            "HEAD",
            "--head",
            head,
            "--store",
            str(Path(tmp) / "gate.duckdb"),
            "--json",
            str(Path(tmp) / "g.json"),
        ]
        cmd += [f"--bench={b}" for b in args.bench]
        cmd += ["--rounds", str(args.rounds)] if args.rounds else []
        cmd += ["--report", str(args.report)] if args.report else []
        rc = subprocess.run(cmd, env=os.environ).returncode  # fmt: skip
    verdict = {0: "LET THROUGH (the gate passed a broken kernel)", 1: "failed, as it must"}
    print(f"fail_closed: the gate {verdict.get(rc, f'could not run (exit {rc})')}",
          file=sys.stderr)  # fmt: skip
    return {0: 1, 1: 0}.get(rc, 2)


if __name__ == "__main__":
    sys.exit(main())
