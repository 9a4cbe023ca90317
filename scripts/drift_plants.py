"""Planted numeric changes against the gate's comparison of outputs (``ragbench.gate.drift``).

    python -m scripts.drift_plants --out DIR [--plants aa,scale,pack,prune,comment]
        [--mode quick] [--keep-outputs]

Each plant is a copy of this checkout's ``ragged/`` with one edit, made under ``DIR/trees``:

    aa       none: base against itself (must pass)
    scale    the kernel's softmax scale x1.002 (``LOG2E`` in kernels/attention.py)
    pack     a packing bug that moves one token: image 1's first kept patch is packed from the
             position after it (kernels/packing.py)
    prune    Threshold-L2 keeping one different patch: image 0 drops its last kept patch and
             keeps its first dropped one (pruning/threshold_l2.py)
    comment  a comment and a renamed local in the kernel's launch path (must pass)

Each is compared with the unedited copy exactly as the gate compares head with base
(``drift.compare_trees``: base, head and base again in one process of
``benchmarks.support.outputs``;
on a GPU the GPU grid, without one the CPU subset in Triton's interpreter; ``--mode full``:
the full grid). Printed: each comparison's verdict, its outputs that moved and by how much,
the run-to-run noise, the wall time and the runner's CPU time; written: ``DIR/drift_plants.md``
and ``DIR/drift_plants.json`` (``--keep-outputs``: each comparison's ``outputs.npz`` too, ~25 MB
on the GPU). Exit 0 when every plant ended as expected (scale, pack and prune fail, aa and
comment pass), 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import resource
import shutil
import sys
import time
from pathlib import Path

from ragbench.gate import drift
from ragbench.gate.drift import drift_section
from ragbench.policies import load_policies
from ragbench.verdicts.status import FAILING, Headline

REPO = Path(__file__).resolve().parent.parent

# name -> (file under ragged/, text, replacement, whether the gate must fail it)
PLANTS = {
    "aa": (None, "", "", False),
    "scale": (
        "kernels/attention.py",
        "LOG2E = 1.4426950408889634\n",
        "LOG2E = 1.4426950408889634 * 1.002  # planted: the softmax scale 0.2% off\n",
        True,
    ),
    "pack": (
        "kernels/packing.py",
        "    dev = x.get_device()\n    has_overflow = overflow is not None\n",
        "    if batch > 1:  # planted: image 1's first kept patch packed from the next position\n"
        "        j = int(keep_mask[1, 1:].nonzero()[0]) + 1\n"
        "        x = x.clone()\n"
        "        x[1, j] = x[1, j + 1]\n"
        "    dev = x.get_device()\n    has_overflow = overflow is not None\n",
        True,
    ),
    "prune": (
        "pruning/threshold_l2.py",
        "        keep = top_k_mask(norms, cand, floor_count(keep_ratio, cand.sum(1)))\n",
        "        keep = top_k_mask(norms, cand, floor_count(keep_ratio, cand.sum(1)))\n"
        "        # planted: image 0 keeps its first dropped patch instead of its last kept one\n"
        "        last, first = int(keep[0].nonzero()[-1]), int((cand[0] & ~keep[0]).nonzero()[0])\n"
        "        keep[0, last], keep[0, first] = False, True\n",
        True,
    ),
    "comment": (
        "kernels/attention.py",
        "    plan_key = (q.get_device(), q.dtype, head_dim, max_seqlen, batch * heads, config)\n"
        "    plan = _plans.get(plan_key)\n",
        "    # one plan per device, dtype, head_dim, length, pairs and config (planted comment)\n"
        "    cache_key = (q.get_device(), q.dtype, head_dim, max_seqlen, batch * heads, config)\n"
        "    plan = _plans.get(cache_key)\n",
        False,
    ),
}
# the comment plant renames the local everywhere it is used
RENAMES = {"comment": ("plan_key", "cache_key")}


def plant(name: str, dest: Path, src: Path = REPO) -> Path:
    """A tree at ``dest`` holding ``src``'s ``ragged/`` with plant ``name``'s edit; ValueError
    where the edit's text is not in the file exactly once (the code moved: update PLANTS)."""
    path, text, replacement, _ = PLANTS[name]
    shutil.copytree(src / "ragged", dest / "ragged", ignore=shutil.ignore_patterns("__pycache__"))
    if path is None:
        return dest
    file = dest / "ragged" / path
    source = file.read_text()
    if source.count(text) != 1:
        raise ValueError(f"plant {name}: the text to edit is not in ragged/{path} exactly once")
    source = source.replace(text, replacement)
    if name in RENAMES:
        source = source.replace(*RENAMES[name])
    file.write_text(source)
    return dest


def _child_cpu() -> float:
    """User + system CPU seconds of the finished child processes (the runner): its cost on a
    loaded machine, where wall time says little."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def headline(report: drift.DriftReport) -> Headline:
    """The gate's headline from these verdicts alone."""
    return Headline.FAIL if any(v.status in FAILING for v in report.verdicts()) else Headline.PASS


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True, help="a directory (created)")
    ap.add_argument("--plants", default=",".join(PLANTS), help="comma-separated, of: "
                    + ", ".join(PLANTS))  # fmt: skip
    ap.add_argument("--mode", default="quick", choices=["quick", "full"], help="the grid")
    ap.add_argument("--keep-outputs", action="store_true",
                    help="keep each comparison's outputs.npz under DIR/work-PLANT")  # fmt: skip
    args = ap.parse_args(argv)
    names = [n for n in args.plants.split(",") if n]
    unknown = [n for n in names if n not in PLANTS]
    if unknown or not names:
        print(f"drift_plants: error: unknown plant(s) {unknown}; expected of {', '.join(PLANTS)}",
              file=sys.stderr)  # fmt: skip
        return 2
    margin = drift.margin_of(load_policies())
    trees = args.out / "trees"
    shutil.rmtree(trees, ignore_errors=True)
    base = plant("aa", trees / "base")
    lines, rows, ok = [], [], True
    for name in names:
        head = plant(name, trees / name)
        work = args.out / f"work-{name}"
        work.mkdir(parents=True, exist_ok=True)
        t0, cpu0 = time.perf_counter(), _child_cpu()
        report = drift.compare_trees(base, head, work, margin=margin, mode=args.mode,
                                     log=lambda m: print(m, file=sys.stderr))  # fmt: skip
        seconds, cpu = time.perf_counter() - t0, _child_cpu() - cpu0
        if not args.keep_outputs:
            shutil.rmtree(work)
        verdict = headline(report)
        expected = Headline.FAIL if PLANTS[name][3] else Headline.PASS
        ok &= verdict == expected
        mark = "as expected" if verdict == expected else f"NOT AS EXPECTED ({expected})"
        heading = (f"## {name}: {verdict.upper()} ({mark}), {seconds:.1f} s wall, {cpu:.1f} s "
                   f"CPU, on {report.device}")  # fmt: skip
        lines += [heading, *drift_section(report), ""]
        rows.append({"plant": name, "verdict": str(verdict), "expected": str(expected),
                     "seconds": round(seconds, 1), "cpu_seconds": round(cpu, 1),
                     "device": report.device,
                     "outputs": [{"output": f"{o.benchmark}.{o.metric} {o.key[2]}",
                                  "status": str(o.status), "note": o.note, "noise": o.noise,
                                  "max_abs_diff": o.moved.measure if o.moved else 0.0}
                                 for o in report.outputs]})  # fmt: skip
        print(heading, flush=True)
        for o in report.outputs:
            if o.moved is not None or o.status != "unchanged":
                print(f"  {o.benchmark}.{o.metric} {o.key[2]}: {o.status}: {o.note}", flush=True)
    text = "\n".join(lines)
    (args.out / "drift_plants.md").write_text(text + "\n")
    (args.out / "drift_plants.json").write_text(json.dumps(rows, indent=1))
    print(f"\n{'All as expected' if ok else 'NOT all as expected'}; the report: "
          f"{args.out / 'drift_plants.md'}")  # fmt: skip
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
