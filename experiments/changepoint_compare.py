"""The stored (windowed) change points against E-Divisive over a whole series, as detection
found them before (``stats.e_divisive`` on every point at once):

    .venv/bin/python -m experiments.changepoint_compare
        [--calibration docs/calibration/h100-set1.tgz] [--series 20] [--points 1000]

1. Real noise: each cell of a calibration set (docs/calibration.md: runs of one commit on the
   H100, heads slowed by 2, 5 or 10% in blocks), its medians in the order they were measured:
   the change points of both methods, and whether they are the same.
2. Known events: ``--series`` synthetic series of ``--points`` points with the noise of synth's
   scale store (0.5%, one outlier in 500) and steps of 3-10% at random places (at least 30
   points apart): for each method, the steps found (within 3 points) and the change points
   that are no step.
"""

from __future__ import annotations

import argparse
import json
import tarfile
import time
from pathlib import Path

import numpy as np

from ragbench import stats
from ragbench.history import edivisive as changepoints
from ragbench.policies import load_policies

POLICIES = load_policies()
SETTINGS = changepoints.Settings.of(POLICIES)


def whole(values) -> list[int]:
    return stats.e_divisive(values, alpha=SETTINGS.alpha, permutations=SETTINGS.permutations,
                            min_size=SETTINGS.min_size)  # fmt: skip


def calibration(tgz: Path) -> None:
    runs = []
    with tarfile.open(tgz) as tar:
        for m in tar.getmembers():
            if m.name.endswith(".json"):
                runs.append(json.load(tar.extractfile(m)))
    runs.sort(key=lambda r: r["started"])
    series: dict[tuple, list[float]] = {}
    for r in runs:
        for c in r["cells"]:
            value = c.get("median")
            if value is None and c.get("samples"):
                value = float(np.median(c["samples"]))
            if value is not None:
                key = (c.get("benchmark"), c.get("metric"), json.dumps(c.get("params"),
                                                                       sort_keys=True))  # fmt: skip
                series.setdefault(key, []).append(float(value))
    same = 0
    for key, values in sorted(series.items(), key=str):
        a, b = whole(values), changepoints.change_points(values, SETTINGS)
        same += a == b
        if a != b:
            print(f"  differ: {key}: whole {a}, windows {b}")
    longest = max(map(len, series.values())) if series else 0
    print(
        f"calibration {tgz.name}: {len(runs)} runs, {len(series)} series (up to {longest} "
        f"points): the same change points in {same} of {len(series)}"
    )


def known_events(n_series: int, points: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    tally = {"whole": [0, 0, 0.0], "windows": [0, 0, 0.0]}  # found, false, seconds
    steps_total = 0
    for _ in range(n_series):
        k = int(rng.integers(1, 6))
        at = np.sort(rng.choice(np.arange(30, points - 30, 30), k, replace=False))
        level = np.ones(points)
        for a in at:
            level[a:] *= 1 + rng.choice([-1, 1]) * rng.uniform(0.03, 0.10)
        x = level * (1 + 0.005 * rng.standard_normal(points))
        x[rng.random(points) < 0.002] *= 1.3
        steps_total += k
        for name, method in (
            ("whole", whole),
            ("windows", lambda v: changepoints.change_points(v, SETTINGS)),
        ):
            t0 = time.process_time()
            cps = method(list(x))
            tally[name][2] += time.process_time() - t0
            tally[name][0] += sum(any(abs(c - a) <= 3 for c in cps) for a in at)
            tally[name][1] += sum(not any(abs(c - a) <= 3 for a in at) for c in cps)
    print(f"known events: {n_series} series of {points} points, {steps_total} steps")
    print("| method | steps found | change points that are no step | CPU s |")
    print("|---|---|---|---|")
    for name, (found, false, cpu) in tally.items():
        print(f"| {name} | {found} of {steps_total} | {false} | {cpu:.1f} |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibration", type=Path, nargs="*",
                    default=sorted(Path("docs/calibration").glob("h100-set*.tgz")))  # fmt: skip
    ap.add_argument("--series", type=int, default=20)
    ap.add_argument("--points", type=int, default=1000)
    args = ap.parse_args(argv)
    for tgz in args.calibration:
        calibration(tgz)
    known_events(args.series, args.points)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
