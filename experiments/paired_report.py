"""A table of head/base ratios from ``benchmarks.support.paired`` documents: a same-process A/B.

    python -m benchmarks.support.paired --arm base=OLD --arm aa=OLD --arm head=. \\
        --only 'kernel\\.KernelLatency backend=triton,batch=1,' --out ab.json   # on the GPU
    python -m experiments.paired_report ab.json [more.json ...]

``OLD`` is a source tree of the base revision (``git archive BASE ragged benchmarks | tar -x
-C OLD``). Per cell: the medians of base and head, and the median of the per-round ratios
head/base and aa/base (aa: base loaded a second time, how far the process moved what did not
change) with the distribution-free 95% interval of that median. Documents are pooled by cell.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from ragbench import stats
from ragbench.gate import paired


def rows(docs: list[dict]) -> list[str]:
    out = ["| cell | metric | n | base | head | head/base [95%] | aa/base [95%] |",
           "|---|---|---|---|---|---|---|"]  # fmt: skip
    for cell in paired.collect(docs).values():
        if "head" not in cell.ratios:
            out.append(f"| {cell.benchmark} {cell.params} | {cell.metric} | - | - | - | "
                       f"not measured: {cell.errors} | |")  # fmt: skip
            continue
        ratios = []
        for arm in ("head", "aa"):
            r = cell.ratios.get(arm, [])
            lo, hi = stats.median_interval(r, 0.95) if r else (float("nan"),) * 2
            ratios.append(f"{statistics.median(r):.3f} [{lo:.3f}, {hi:.3f}]" if r else "-")
        params = ",".join(f"{k}={v}" for k, v in sorted(cell.params.items()))
        base, head = (statistics.median(cell.rounds[a]) for a in ("base", "head"))
        out.append(f"| {cell.benchmark} {params} | {cell.metric} | {len(cell.ratios['head'])} | "
                   f"{base:.1f} | {head:.1f} | {ratios[0]} | {ratios[1]} |")  # fmt: skip
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("documents", nargs="+", help="JSON written by benchmarks.support.paired --out")
    args = p.parse_args(argv)
    try:
        docs = [json.loads(Path(f).read_text()) for f in args.documents]
        print("\n".join(rows(docs)))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        print(f"paired_report: cannot read the documents: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
