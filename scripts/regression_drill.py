"""A planted regression, end to end on a CUDA GPU: main's history, its alert, the gate, settle
and bisect, each timed.

    python -m scripts.regression_drill --out DIR [--steps history,gate,settle,bisect]
        [--history 8] [--branch 8] [--at 5] [--plant gpu --sleep-cycles 20000]
        [--plant host --host-us 1.5] [--cell CELL]

In a throwaway clone of this repository (its HEAD), checked out as ``main``: ``--history``
commits that change nothing measured, then a branch of ``--branch`` such commits of which the
``--at``-th plants a slowdown into every triton attention call, merged into main with --no-ff
(a merge of several commits, measured once). ``--plant gpu``: GPU time (``torch.cuda._sleep``
of ``--sleep-cycles`` cycles: about 10 us at the H100's 1.98 GHz; the call leaves the fast
path); ``--plant host``: a spin of ``--host-us`` on the calling thread before each
``varlen_attention(backend="triton")``, the fast path kept. Then, each step on the triton and
FA2 kernel latencies of the quick grid (``--bench``: gpu_us, or host_us for a host plant):

- ``history``: the suite on every main commit and the merge, ingested into DIR/perf.duckdb as
  main's history; ``ragbench alerts`` lists the alert the ingest made (DIR/alerts.txt);
- ``gate``: the merge's first parent against the merge (DIR/gate.md, DIR/gate.json);
- ``settle``: ``ragbench gate --settle DIR/gate.json`` where the gate left a plan
  (DIR/settle.md);
- ``bisect``: the command the alert prints (``follow_up.bisect_command``: ``--good`` the
  merge's first parent, ``--bad`` the merge), on the alert's first cell or ``--cell``: timed,
  its answer against the planted commit (DIR/bisect.md).

The bisect alone, self-contained on a GPU machine (no network: a local clone; Python with
this project, asv and duckdb installed), e.g. the host-time step in the 2nd of 8 commits::

    python -m scripts.regression_drill --out DIR --steps bisect --plant host --host-us 1.5 \
        --branch 8 --at 2

(without the history step and ``--cell``, the cell is the plant's metric at ``CELL_PARAMS``,
the triton call at batch 1).

DIR/drill.json keeps each step's seconds, exit code and outcome. A step that needs an earlier
one's output (settle: the gate's JSON) runs that one first.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BENCH = {
    "gpu": r"^kernel\.KernelLatency\.track_gpu_us",
    "host": r"^kernel\.KernelLatency\.track_host_us",
}
CELL_PARAMS = "backend=triton,batch=1,geometry=deit_b,lengths=uniform,prune=0.8"
STEPS = ("history", "gate", "settle", "bisect")
PLANT_HOST = """


import time as _time  # noqa: E402

_real_varlen_attention = varlen_attention


def varlen_attention(*args, **kwargs):  # noqa: F811  planted by scripts/regression_drill.py
    if kwargs.get("backend", "triton") == "triton":
        end = _time.perf_counter_ns() + {ns}
        while _time.perf_counter_ns() < end:
            pass
    return _real_varlen_attention(*args, **kwargs)
"""
PLANT = """

import dataclasses as _dc  # noqa: E402

import torch as _torch  # noqa: E402

_real_triton = BACKENDS["triton"]


def _slowed(*args):  # planted by scripts/regression_drill.py: GPU time in every call
    out = _real_triton.run(*args)
    _torch.cuda._sleep({cycles})
    return out


BACKENDS["triton"] = _dc.replace(_real_triton, run=_slowed)
"""


def _log(msg: str) -> None:
    print(f"drill: {msg}", file=sys.stderr, flush=True)


def git(clone: Path, *args: str) -> str:
    ident = ["-c", "user.name=drill", "-c", "user.email=drill@localhost"]
    return subprocess.run(["git", *ident, *args], cwd=clone, check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip


def build(clone: Path, history: int, branch: int, at: int, cycles: int, plant: str = "gpu",
          host_us: float = 1.5) -> dict:  # fmt: skip
    """The clone's commits: main's history, the branch (its ``at``-th commit planted) and the
    --no-ff merge; -> their hashes."""
    subprocess.run(["git", "clone", "-q", "--no-hardlinks", str(REPO), str(clone)], check=True)
    git(clone, "checkout", "-q", "-B", "main")
    main = [git(clone, "rev-parse", "HEAD")]
    for i in range(history):
        git(clone, "commit", "-q", "--allow-empty", "-m", f"drill: main {i + 1}")
        main.append(git(clone, "rev-parse", "HEAD"))
    git(clone, "checkout", "-q", "-b", "drill-branch")
    commits = []
    for i in range(1, branch + 1):
        if i == at:
            target = clone / "ragged" / "attention.py"
            if plant == "host":
                code, what = PLANT_HOST.format(ns=round(host_us * 1e3)), f"+{host_us} us host"
            else:
                code, what = PLANT.format(cycles=cycles), f"+{cycles} GPU cycles"
            target.write_text(target.read_text() + code)
            git(clone, "commit", "-q", "-am", f"drill: branch {i}, triton {what}")
        else:
            git(clone, "commit", "-q", "--allow-empty", "-m", f"drill: branch {i}")
        commits.append(git(clone, "rev-parse", "HEAD"))
    git(clone, "checkout", "-q", "main")
    git(clone, "merge", "-q", "--no-ff", "-m", "drill: merge the branch", "drill-branch")
    return {"main": main, "branch": commits, "planted": commits[at - 1],
            "merge": git(clone, "rev-parse", "HEAD")}  # fmt: skip


def ragbench(clone: Path, out: Path, name: str, *args: str) -> dict:
    """``ragbench ARGS`` run by this Python in the clone (its own code): stdout to DIR/NAME,
    timed."""
    t0 = time.perf_counter()
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.run([sys.executable, "-m", "ragbench", *args], cwd=clone, text=True,
                          stdout=subprocess.PIPE, env=env)  # fmt: skip
    (out / name).write_text(proc.stdout)
    seconds = time.perf_counter() - t0
    _log(f"{name}: exit {proc.returncode} in {seconds:.0f} s")
    return {"exit": proc.returncode, "seconds": round(seconds, 1), "file": name}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="where the reports and store go")
    ap.add_argument("--steps", default=",".join(STEPS), help=f"of {', '.join(STEPS)}")
    ap.add_argument("--history", type=int, default=8, help="main commits before the branch")
    ap.add_argument("--branch", type=int, default=8, help="commits the merge brings in")
    ap.add_argument("--at", type=int, default=5, help="the branch commit that plants it")
    ap.add_argument("--plant", choices=("gpu", "host"), default="gpu",
                    help="GPU time (torch.cuda._sleep) or a host spin a triton call")  # fmt: skip
    ap.add_argument("--sleep-cycles", type=int, default=20000, help="GPU cycles a triton call")
    ap.add_argument("--host-us", type=float, default=1.5, help="host spin a triton call (us)")
    ap.add_argument("--machine", default="drill-gpu", help="the machine name results carry")
    ap.add_argument("--cell", default=None,
                    help="bisect this cell ('benchmark.metric params') instead of the alert's "
                    "first (without the history step: the plant's metric at "
                    "CELL_PARAMS)")  # fmt: skip
    args = ap.parse_args(argv)
    steps = [s for s in args.steps.split(",") if s]
    if set(steps) - set(STEPS) or not 1 <= args.at <= args.branch:
        ap.error(f"--steps of {', '.join(STEPS)}; --at within 1..--branch")
    args.out.mkdir(parents=True, exist_ok=True)
    store = args.out.resolve() / "perf.duckdb"
    common = ["--machine", args.machine]
    figures: dict = {"steps": {}}
    with tempfile.TemporaryDirectory(prefix="ragbench-drill-") as tmp:
        clone = Path(tmp) / "repo"
        t0 = time.perf_counter()
        c = build(clone, args.history, args.branch, args.at, args.sleep_cycles, args.plant,
                  args.host_us)  # fmt: skip
        bench = BENCH[args.plant]
        figures.update(commits=c, build_s=round(time.perf_counter() - t0, 1))
        base, merge = c["main"][-1], c["merge"]
        _log(f"main {len(c['main'])} commits, the merge {merge[:12]} of {args.branch}, "
             f"planted at {c['planted'][:12]}")  # fmt: skip
        gate_json = args.out.resolve() / "gate.json"
        if "history" in steps:
            results = Path(tmp) / "results"
            run = ragbench(clone, args.out, "run.json", "run", *c["main"][1:], merge,
                           "--bench", bench, "--results", str(results), *common)  # fmt: skip
            ing = ragbench(clone, args.out, "ingest.txt", "ingest", "--store", str(store),
                           "--branch", "main", str(results))  # fmt: skip
            listed = ragbench(clone, args.out, "alerts.txt", "alerts", "--store", str(store),
                              *common)  # fmt: skip
            figures["steps"]["history"] = {"run": run, "ingest": ing, "alerts": listed}
        if "gate" in steps or "settle" in steps:
            figures["steps"]["gate"] = ragbench(
                clone, args.out, "gate.md", "gate", "--base", base, "--head", merge, "--bench",
                bench, "--no-drift", *(["--paired-processes", "0"] * (args.plant == "gpu")),
                "--json", str(gate_json),
                "--store", str(Path(tmp) / "gate.duckdb"), *common)  # fmt: skip
        if "settle" in steps:
            planned = gate_json.exists() and json.loads(gate_json.read_text()).get("settle")
            figures["steps"]["settle"] = (
                ragbench(clone, args.out, "settle.md", "gate", "--settle", str(gate_json),
                         "--store", str(Path(tmp) / "gate.duckdb"), *common)
                if planned else {"skipped": "the gate left nothing to settle"})  # fmt: skip
        if "bisect" in steps:
            cell = args.cell or (_alert_cell(args.out / "alerts.txt") if "history" in steps else
                                 f"kernel.KernelLatency.{args.plant}_us {CELL_PARAMS}")  # fmt: skip
            figures["steps"]["bisect"] = (
                bisect(clone, args.out, cell, base, merge, c["planted"], args.machine, tmp)
                if cell else {"skipped": "no alert to bisect"})  # fmt: skip
    (args.out / "drill.json").write_text(json.dumps(figures, indent=2) + "\n")
    print(json.dumps(figures["steps"], indent=2))
    return 0 if figures["steps"].get("bisect", {}).get("found_planted", True) else 1


def bisect(clone: Path, out: Path, cell: str, prev: str, merge: str, planted: str,
           machine: str, tmp: str) -> dict:  # fmt: skip
    """The bisection the alert of the merge prints (``follow_up.bisect_command``, run in the
    clone), timed; its answer against the planted commit."""
    found = subprocess.run(
        [sys.executable, "-c", "import json, sys; from ragbench import follow_up; "
         "print(follow_up.bisect_command(json.loads(sys.argv[1])))",
         json.dumps({"prev_commit_hash": prev, "commit_hash": merge, "machine": machine,
                     "cells": [dict(zip(("benchmark", "metric", "param_key"), _key(cell),
                                        strict=True))]})],
        cwd=clone, capture_output=True, text=True, check=True,
    )  # fmt: skip
    command = shlex.split(found.stdout.strip())
    _log(f"bisect: {shlex.join(command)}")
    result = ragbench(clone, out, "bisect.md", *command[1:], "--store",
                      str(Path(tmp) / "bisect.duckdb"))  # fmt: skip
    text = (out / "bisect.md").read_text()
    first = re.search(r"First bad commit: `([0-9a-f]{40})`", text)
    cost = re.search(r"\((\d+) step\(s\), (\d+) measurement\(s\)", text)
    result.update(command=shlex.join(command), first=first.group(1) if first else None,
                  planted=planted, found_planted=bool(first) and first.group(1) == planted,
                  steps=int(cost.group(1)) if cost else None,
                  measurements=int(cost.group(2)) if cost else None)  # fmt: skip
    answer = ("found the planted commit" if result["found_planted"] else
              f"no answer (exit {result['exit']}, see bisect.md)" if result["exit"] == 2 else
              "WRONG ANSWER")  # fmt: skip
    print(f"bisect: {answer}: {result['first'] or 'none named'} (planted {planted}) in "
          f"{result['seconds']} s, {result['steps']} step(s), {result['measurements']} "
          "measurement(s)")  # fmt: skip
    return result


def _key(cell: str) -> tuple[str, str, str]:
    name, _, params = cell.strip().partition(" ")
    benchmark, _, metric = name.rpartition(".")
    return benchmark, metric, params.strip()


def _alert_cell(listing: Path) -> str | None:
    """The first cell ``ragbench alerts`` lists (``benchmark.metric params``), or None."""
    text = listing.read_text() if listing.exists() else ""
    found = re.search(r"`([\w.]+\.\w+ [^`]*)`", text)
    return found.group(1) if found else None


if __name__ == "__main__":
    sys.exit(main())
