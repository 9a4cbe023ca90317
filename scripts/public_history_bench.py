"""A published asv history ingested whole, then two results arriving late: the times of
``ragbench ingest``, ``detect`` and ``alerts`` on it, with a ragbench tree of one's choice.

    .venv/bin/python -m scripts.public_history_bench --results DIR --work DIR
        [--tree DIR] [--machine ubuntu-latest] [--in-order N] [--out-of-order N] [--depth D]

``--results``: an asv project's ``results/`` (django/django-asv's: 4,680 files, 4 machines);
``--work``: where the copy and the store go (removed at the end unless ``--keep``);
``--tree``: the ragbench tree that runs (default this one; an older commit's ``git archive``
to measure before a change). The store is made of every file but the ``--in-order`` newest
commits of ``--machine`` and ``--out-of-order`` commits that lie ``--depth`` points before
its newest (the commits a runner measured after newer ones, as it does: most such runs are
1 to 10 commits behind); then the newest are ingested (in order) and timed, then the older
ones (out of order), then ``detect --machine`` and ``alerts`` are timed. Prints one JSON
line: seconds of each step, the alerts, and how many of them are settings changes (the
``alerts`` output's words, where the tree has them).

Timings come from here, never from a timed test (docs/store.md has them).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def run(tree: Path, *args: str) -> tuple[float, str, int]:
    """``python -m ragbench ARGS`` in ``tree``: (seconds, stdout and stderr, exit code)."""
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "ragbench", *args], cwd=tree,
                       capture_output=True, text=True)  # fmt: skip
    return time.perf_counter() - t0, p.stdout + p.stderr, p.returncode


def commits(results: Path, machine: str) -> list[tuple[int, str]]:
    """(commit date, commit prefix) of the machine's files, oldest first, one per commit."""
    seen = {}
    for path in (results / machine).glob("*-*.json"):
        date = json.loads(path.read_text()).get("date") or 0
        seen[path.name.split("-", 1)[0]] = date
    return sorted((d, c) for c, d in seen.items())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--results", type=Path, required=True)
    ap.add_argument("--work", type=Path, required=True)
    ap.add_argument("--tree", type=Path, default=ROOT)
    ap.add_argument("--machine", default="ubuntu-latest")
    ap.add_argument("--in-order", type=int, default=2)
    ap.add_argument("--out-of-order", type=int, default=2)
    ap.add_argument("--depth", type=int, default=5)
    ap.add_argument("--keep", action="store_true")
    args = ap.parse_args()
    work = args.work
    shutil.rmtree(work, ignore_errors=True)
    data = work / "project" / "results"
    shutil.copytree(args.results, data)
    conf = args.results.parent / "asv.conf.json"
    if conf.exists():
        shutil.copyfile(conf, data.parent / "asv.conf.json")
    order = commits(data, args.machine)
    newest = [c for _, c in order[-args.in_order :]]
    start = len(order) - args.in_order - args.depth
    older = [c for _, c in order[start - args.out_of_order : start]]
    late = {"in order": newest, "out of order": older}
    aside = {k: work / "late" / k.replace(" ", "-") / args.machine for k in late}
    for k, prefixes in late.items():
        aside[k].mkdir(parents=True)
        for p in prefixes:
            for f in (data / args.machine).glob(f"{p}-*.json"):
                shutil.move(f, aside[k] / f.name)
    store = str(work / "store.duckdb")
    out: dict = {"tree": str(args.tree), "late": late}
    t, text, rc = run(args.tree, "ingest", str(data.parent), "--branch", "main", "--store", store)
    out["ingest_all_s"] = round(t, 1)
    out["ingest_all"] = text.strip().splitlines()[-1]
    for k in late:
        files = sorted(map(str, aside[k].glob("*.json")))
        t, text, rc = run(args.tree, "ingest", *files, "--branch", "main", "--store", store)
        out[f"ingest_{k.replace(' ', '_')}_s"] = round(t, 1)
        out[f"ingest_{k.replace(' ', '_')}"] = (
            f"{len(files)} files: " + text.strip().splitlines()[-1]
        )
    t, text, rc = run(args.tree, "detect", "--store", store, "--machine", args.machine)
    out["detect_s"], out["detect_rc"] = round(t, 1), rc
    (work / "detect.txt").write_text(text)
    t, text, rc = run(args.tree, "alerts", "--store", store)
    out["alerts_s"], out["alerts_rc"] = round(t, 1), rc
    out["alerts"] = text.strip().splitlines()[-1]
    steps = r"^## Measurement setting changed: (\d+) step\(s\) at (\d+) commit"
    found = re.search(steps, text, re.M)
    out["settings_steps"] = [int(g) for g in found.groups()] if found else [0, 0]
    (work / "alerts.txt").write_text(text)
    print(json.dumps(out))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
