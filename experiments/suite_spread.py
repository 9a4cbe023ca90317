"""Run-to-run spread of the suite's metrics: max/min of the medians over repeated runs.

    python -m experiments.suite_spread RESULTS_DIR [RESULTS_DIR ...] [--bench REGEX]

Each RESULTS_DIR is an asv results directory of one run of the same commit on the same
machine (``.venv/bin/ragbench run --results DIR``). Per benchmark: the number of cells and the
median, 90th percentile and largest max/min ratio of the cell medians across the runs, with
the worst cell. This is the noise the regression gate has to live with.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

from ragbench import asv_results


def run_cells(results_dir: Path) -> dict[tuple, float]:
    """{(benchmark, params): median} of the one result file under ``results_dir``."""
    files = [p for p in Path(results_dir).glob("*/*.json") if p.name != "machine.json"]
    if len(files) != 1:
        sys.exit(f"{results_dir}: expected one result file, found {len(files)}")
    names = asv_results.param_names(results_dir)
    data = asv_results.load(files[0])
    return {
        (c.benchmark, tuple(c.params.items())): c.value
        for c in asv_results.cells(data, names)
        if c.value is not None
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="+", type=Path, help="asv results directories, one per run")
    ap.add_argument("--bench", default="^kernel\\.", help="benchmark regex (default ^kernel\\.)")
    args = ap.parse_args(argv)
    if len(args.results) < 2:
        ap.error("give at least two runs")
    runs = [run_cells(d) for d in args.results]
    spreads: dict[str, list[tuple[float, tuple]]] = defaultdict(list)
    for key in set.intersection(*(set(r) for r in runs)):
        if not re.search(args.bench, key[0]):
            continue
        values = [r[key] for r in runs]
        if min(values) > 0:
            spreads[key[0]].append((max(values) / min(values), key[1]))
    print(f"max/min of the medians over {len(runs)} runs")
    print("| benchmark | cells | median | p90 | max | worst cell |")
    print("|---|---|---|---|---|---|")
    for bench, rows in sorted(spreads.items()):
        ratios = sorted(r for r, _ in rows)
        worst = max(rows)
        p90 = ratios[min(len(ratios) - 1, int(0.9 * len(ratios)))]
        cell = ", ".join(f"{k}={v}" for k, v in worst[1])
        print(f"| {bench} | {len(ratios)} | {statistics.median(ratios):.3f} | {p90:.3f} | "
              f"{worst[0]:.3f} | {cell} |")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
