"""Calibrate the regression gate: false alarms on A/A runs, detection of injected slowdowns.

    python -m scripts.calibrate collect --out DIR [--seconds 540]   # on a CUDA GPU
    python -m scripts.calibrate analyze DIR [DIR ...] [--write docs/calibration.md]
    python -m scripts.calibrate paired-collect --out DIR [--design aa] [--only REGEX]  # GPU
    python -m scripts.calibrate paired-analyze DIR [DIR ...]
    python -m scripts.calibrate paired-alone --out DIR [--processes 6]   # on a CUDA GPU
    python -m scripts.calibrate alone-analyze DIR
    python -m scripts.calibrate rule-table --asv DIR [DIR ...] --paired DIR [DIR ...]

``collect`` runs the quick grid's kernel benchmarks (the PR gate's latency cells) in separate
processes, one per run as the gate's asv runs are, in blocks that mimic a gate job: base and
head alternating for the gate's rounds, then one more pair for the re-measurement. The head of
a block is the same code (A/A) or the triton kernel slowed by 2%, 5% or 10% of its device time
(``benchmarks/support/inject.py``); blocks cycle through those conditions until ``--seconds`` pass.
Each run is one JSON file of the values asv would record, read through the suite's own classes.

``analyze`` feeds the blocks to ``ragbench.verdicts.comparison`` with the policies in force and
reports the false-alarm rate per gate run (A/A blocks) and the detection rate of each injected
slowdown.

The ``paired-*`` commands do the same for the metrics that include host time, judged by the
paired comparison (``ragbench.gate.paired``): processes of the paired runner with extra arms (A/A
pairs, heads with planted slowdowns), then the gate's own judgement of each group of processes.
``paired-alone`` measures the gate's fallback for a head that loads only alone.

``rule-table`` sums up what the rule of evidence (``ragbench.verdicts.evidence.RULE``) makes of
both kinds of collection and of synthetic cells: the share of A/A gate runs that pass, fail or end
inconclusive, and what becomes of the planted slowdowns. It uses only the gate's public code
(``compare``, ``recheck``, ``paired``), so the same command run against an older ``ragbench``
gives the table under that rule.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

CONDITIONS = (0.0, 0.02, 0.05, 0.10)  # head's injected slowdown: 0 is A/A
ROUNDS = 2  # base/head pairs per gate run (ragbench gate --rounds)
BLOCK = ROUNDS + 1  # + the re-measurement of flagged cells


def _classes():
    from benchmarks import kernel

    return (kernel.KernelLatency, kernel.DispatchFloor)


def measure(inject: float) -> dict:
    """One run: the kernel grid measured in this process, as asv's cells would hold it."""
    os.environ["RAGBENCH_INJECT_SLOWDOWN"] = str(inject)
    from benchmarks.support import measure as _measure

    t0 = time.time()
    cache = _measure.kernels(None)
    cells = []
    for cls in _classes():
        for params in itertools.product(*cls.params):
            bench = cls()
            try:
                bench.setup(cache, *params)
            except NotImplementedError:
                continue
            for name in dir(cls):
                if not name.startswith("track_"):
                    continue
                value = getattr(bench, name)(cache, *params)
                if isinstance(value, dict):
                    value = value["samples"]
                elif value != value:  # NaN: no such metric for this cell
                    continue
                cells.append({
                    "benchmark": f"kernel.{cls.__name__}.{name}",
                    "params": dict(zip(cls.param_names, params, strict=True)),
                    "samples": value,
                    "injected": bench.cell.get("injected"),
                })  # fmt: skip
    return {"inject": inject, "started": t0, "seconds": time.time() - t0, "cells": cells}


def collect(out: Path, seconds: float) -> int:
    out.mkdir(parents=True, exist_ok=True)
    t_end = time.time() + seconds
    run = len(list(out.glob("run-*.json")))
    for block in itertools.count(run // (2 * BLOCK)):
        condition = CONDITIONS[block % len(CONDITIONS)]
        if time.time() + 2 * BLOCK * 12 > t_end:  # ~12 s a run on the H100 VM
            break
        for i in range(2 * BLOCK):
            inject = condition if i % 2 else 0.0
            path = out / f"run-{run:04d}.json"
            cmd = [sys.executable, "-m", "scripts.calibrate", "measure", "--inject", str(inject)]
            res = subprocess.run(cmd, capture_output=True, text=True)
            if res.returncode != 0:
                print(res.stderr[-3000:], file=sys.stderr)
                return 1
            data = json.loads(res.stdout)
            data.update(block=block, condition=condition, side="head" if i % 2 else "base")
            path.write_text(json.dumps(data))
            print(f"run {run} block {block} {data['side']} inject {inject}: "
                  f"{data['seconds']:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
            run += 1
    return 0


# --- analysis ------------------------------------------------------------------------------


def load_runs(dirs: list[Path]) -> list[dict]:
    """Every run file under ``dirs`` (one collection each, on its own machine), in the order
    they were measured; ``set`` says which collection a run came from."""
    runs = []
    for i, d in enumerate(dirs):
        for path in sorted(Path(d).glob("run-*.json")):
            runs.append({**json.loads(path.read_text()), "set": i})
    return sorted(runs, key=lambda r: (r["set"], r["started"]))


def side_cells(runs: list[dict]):
    """The runs' cells pooled as ``ragbench.verdicts.comparison`` cells."""
    from ragbench.store import param_key
    from ragbench.verdicts.comparison import Cell, pool

    def cell(c: dict) -> Cell:
        bench, _, method = c["benchmark"].rpartition(".")
        values = c["samples"] if isinstance(c["samples"], list) else [c["samples"]]
        return Cell(bench, method.removeprefix("track_"), param_key(c["params"]), c["params"],
                    "us", list(values))  # fmt: skip

    return pool(cell(c) for run in runs for c in run["cells"])


def gate_run(base: list[dict], head: list[dict], recheck: tuple[dict, dict], policies):
    """What ``ragbench gate`` would decide on the cells judged across processes (the paired
    ones are the paired comparison's): -> (flagged keys, the verdicts after the
    re-measurement of flagged and inconclusive cells, ``recheck.remeasured``)."""
    from ragbench.gate.remeasure import remeasured
    from ragbench.verdicts.comparison import compare
    from ragbench.verdicts.status import Status

    first = {"base": side_cells(base), "head": side_cells(head)}
    c = compare(first["base"], first["head"], policies, detail=False)
    flagged = {v.key for v in c.verdicts if v.status == Status.REGRESSION}
    again = {"base": side_cells([recheck[0]]), "head": side_cells([recheck[1]])}
    remeasured(c, first, again, policies, detail=False)
    return flagged, [v for v in c.verdicts if not v.policy.paired]


def trials(runs: list[dict]) -> dict[float, list[tuple[list, list, tuple]]]:
    """Gate runs per condition: each block's own (base rounds, head rounds, re-measure pair),
    and for A/A also every window of 2 x BLOCK consecutive A runs (separate processes, as far
    apart as a gate job's), which gives many more, overlapping, A/A gate runs."""
    out: dict[float, list] = {c: [] for c in CONDITIONS}
    blocks: dict[tuple, list[dict]] = {}
    for run in runs:
        blocks.setdefault((run["set"], run["block"]), []).append(run)
    for block in blocks.values():
        if len(block) != 2 * BLOCK:
            continue  # cut short
        base = [r for r in block if r["side"] == "base"]
        head = [r for r in block if r["side"] == "head"]
        out[block[0]["condition"]].append((base[:ROUNDS], head[:ROUNDS], (base[-1], head[-1])))
    windows = []
    for s in sorted({r["set"] for r in runs}):  # windows stay within one machine
        a_runs = [r for r in runs if r["inject"] == 0.0 and r["set"] == s]
        for i in range(len(a_runs) - 2 * BLOCK + 1):
            w = a_runs[i : i + 2 * BLOCK]
            windows.append((w[0 : 2 * ROUNDS : 2], w[1 : 2 * ROUNDS : 2], (w[-2], w[-1])))
    out["aa_windows"] = windows
    return out


def is_target(key) -> bool:
    """A cell the injected slowdown slows: the triton kernel's device time."""
    return key[0] == "kernel.KernelLatency" and key[1] == "gpu_us" and "backend=triton" in key[2]


def rates(runs: list[dict], policies) -> dict:
    """False alarms per gate run (A/A) and detection of each injected slowdown, in total and
    per triton cell (with the slowdown the gate's rounds measured there). Under the rule of
    evidence (``evidence.RULE``) a run also ends inconclusive where a cell other than the
    injected one is, and an injected cell is caught (regression), inconclusive, or passed."""
    from ragbench.verdicts.status import Status

    out = {}
    for cond, ts in trials(runs).items():
        if not ts:
            continue
        alarms = flagged_runs = inconclusive_runs = 0
        per_cell: dict[str, dict] = {}
        for base, head, recheck in ts:
            flagged, verdicts = gate_run(base, head, recheck, policies)
            injected = cond not in (0.0, "aa_windows")
            others = [v for v in verdicts if not (injected and is_target(v.key))]
            alarm = any(v.status == Status.REGRESSION for v in others)
            alarms += alarm
            inconclusive_runs += not alarm and any(v.status == Status.INCONCLUSIVE for v in others)
            flagged_runs += any(not (injected and is_target(k)) for k in flagged)
            if injected:
                b, h = side_cells(base), side_cells(head)
                for v in (v for v in verdicts if is_target(v.key)):
                    c = per_cell.setdefault(v.key[2], {"caught": 0, "inconclusive": 0,
                                                       "targets": 0, "measured": []})  # fmt: skip
                    c["targets"] += 1
                    c["caught"] += v.status == Status.REGRESSION
                    c["inconclusive"] += v.status == Status.INCONCLUSIVE
                    c["measured"].append(statistics.median(h[v.key].samples)
                                         / statistics.median(b[v.key].samples) - 1)  # fmt: skip
        measured = [m for c in per_cell.values() for m in c["measured"]]
        out[cond] = {
            "gate_runs": len(ts), "false_alarm_runs": alarms,
            "inconclusive_runs": inconclusive_runs,
            "flagged_before_recheck": flagged_runs,
            "targets": sum(c["targets"] for c in per_cell.values()),
            "caught": sum(c["caught"] for c in per_cell.values()),
            "inconclusive": sum(c["inconclusive"] for c in per_cell.values()),
            "achieved_slowdown": statistics.median(measured) if measured else None,
            "cells": per_cell,
        }  # fmt: skip
    return out


def noise(runs: list[dict]) -> dict[str, dict]:
    """Per metric: the spread of A runs' medians (max/min per cell, median over cells)."""
    a_runs = [r for r in runs if r["inject"] == 0.0]
    per: dict[str, list[float]] = {}
    cells = [side_cells([r]) for r in a_runs]
    for key in cells[0] if cells else []:
        meds = [statistics.median(c[key].samples) for c in cells if key in c]
        if min(meds) > 0:
            per.setdefault(f"{key[0]}.{key[1]}", []).append(max(meds) / min(meds))
    return {k: {"cells": len(v), "median_spread": statistics.median(v), "max_spread": max(v)}
            for k, v in per.items()}  # fmt: skip


def sweep(runs: list[dict], policies, metrics: list[str], thresholds: list[float]) -> list[dict]:
    """Rates with the threshold of ``metrics`` (benchmark.metric globs) set to each value."""
    from ragbench.policies import Policies, Policy

    rows = []
    for t in thresholds:
        rules = tuple(Policy(m, "latency", threshold=t) for m in metrics)
        swept = Policies((*rules, *policies.rules), policies.gate, policies.main)
        rows.append({"threshold": t, **{str(k): v for k, v in rates(runs, swept).items()}})
    return rows


def upper_95(events: int, n: int) -> float:
    """One-sided 95% upper confidence bound of a rate seen ``events`` times in ``n``
    (Clopper-Pearson; the "rule of three" at zero)."""
    if events >= n:
        return 1.0
    lo, hi = events / n, 1.0
    for _ in range(60):  # P(X <= events | p) = 0.05, by bisection
        p = (lo + hi) / 2
        tail = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) for k in range(events + 1))
        lo, hi = (p, hi) if tail > 0.05 else (lo, p)
    return hi


def _pct(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.0f}%)" if d else "-"


def detect_policies():
    """The gate's policies in force (ragbench/policies.toml)."""
    from ragbench.policies import load_policies

    return load_policies()


HOST_METRICS = ["kernel.KernelLatency.call_us", "kernel.KernelLatency.host_us",
                "kernel.DispatchFloor.*"]  # fmt: skip


def _sweep_table(runs, policies, metrics, thresholds) -> list[str]:
    lines = ["| threshold | A/A false alarms (windows) | before re-measure | +2% caught | "
             "+5% caught | +10% caught |", "|---|---|---|---|---|---|"]  # fmt: skip
    for row in sweep(runs, policies, metrics, thresholds):
        aa = row.get("aa_windows", {})
        caught = [_pct(row[str(c)]["caught"], row[str(c)]["targets"]) if str(c) in row else "-"
                  for c in CONDITIONS[1:]]  # fmt: skip
        lines.append(f"| {row['threshold'] * 100:.0f}% | "
                     f"{_pct(aa.get('false_alarm_runs', 0), aa.get('gate_runs', 0))} | "
                     f"{_pct(aa.get('flagged_before_recheck', 0), aa.get('gate_runs', 0))} | "
                     f"{' | '.join(caught)} |")  # fmt: skip
    return lines


def analyze(dirs: list[Path], write: Path | None) -> int:
    runs = load_runs(dirs)
    if not runs:
        print(f"no run-*.json files under {', '.join(map(str, dirs))}", file=sys.stderr)
        return 2
    policies = detect_policies()
    r = rates(runs, policies)
    aa_n = sum(r[c]["gate_runs"] for c in (0.0, "aa_windows") if c in r)
    aa_alarms = sum(r[c]["false_alarm_runs"] for c in (0.0, "aa_windows") if c in r)
    lines = [
        f"{len(runs)} runs ({len(dirs)} collection(s)), thresholds as in policies.toml.",
        "",
        "| head of the gate run | gate runs | runs with a false alarm (after re-measure) | "
        "before re-measure | runs inconclusive, no alarm | triton gpu_us cells caught | "
        "inconclusive | passed (missed) | measured slowdown (median) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    names = {0.0: "A/A (blocks)", "aa_windows": "A/A (sliding windows of A runs)"}
    for cond, v in r.items():
        name = names[cond] if cond in names else f"triton kernel +{cond * 100:.0f}%"
        ach = "-" if v["achieved_slowdown"] is None else f"{v['achieved_slowdown'] * 100:+.1f}%"
        missed = v["targets"] - v["caught"] - v["inconclusive"]
        lines.append(
            f"| {name} | {v['gate_runs']} | {_pct(v['false_alarm_runs'], v['gate_runs'])} | "
            f"{_pct(v['flagged_before_recheck'], v['gate_runs'])} | "
            f"{_pct(v['inconclusive_runs'], v['gate_runs'])} | "
            f"{_pct(v['caught'], v['targets'])} | {_pct(v['inconclusive'], v['targets'])} | "
            f"{_pct(missed, v['targets'])} | {ach} |"
        )
    lines += ["", f"A/A in all: {aa_alarms} false alarm(s) in {aa_n} gate runs; one-sided 95% "
              f"upper bound {upper_95(aa_alarms, aa_n) * 100:.1f}% per run.", "",
              "Per triton cell (the gate's two rounds; measured = head/base medians - 1):", "",
              "| injected | cell | caught | measured slowdown: median (min-max) |",
              "|---|---|---|---|"]  # fmt: skip
    for cond, v in r.items():
        for cell, c in sorted(v["cells"].items()):
            m = c["measured"]
            lines.append(f"| +{cond * 100:.0f}% | {cell} | {_pct(c['caught'], c['targets'])} | "
                         f"{statistics.median(m) * 100:+.1f}% ({min(m) * 100:+.1f}% to "
                         f"{max(m) * 100:+.1f}%) |")  # fmt: skip
    lines += ["", "Run-to-run spread of the A runs (max/min of each cell's median):", "",
              "| metric | cells | median cell | worst cell |", "|---|---|---|---|"]  # fmt: skip
    for k, v in sorted(noise(runs).items()):
        lines.append(f"| `{k}` | {v['cells']} | {v['median_spread']:.3f} | {v['max_spread']:.3f} |")
    lines += ["", "Threshold sweep for `kernel.KernelLatency.gpu_us`, the others as in force:", ""]
    lines += _sweep_table(runs, policies, ["kernel.KernelLatency.gpu_us"], [0.01, 0.02, 0.03, 0.04])
    lines += ["", "Threshold sweep for the host-time metrics (`call_us`, `host_us`, "
              "`DispatchFloor.*`) together:", ""]  # fmt: skip
    lines += _sweep_table(runs, policies, HOST_METRICS, [0.3, 0.6, 1.0, 1.5])
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        write.write_text(text)
    return 0


# --- the paired comparison (ragbench.gate.paired): host-time metrics -----------------------------

# Arms of a calibration process (planted slowdown of each), all the same source tree, by
# design: "detect": base, the gate's A/A arm, a second unslowed arm (the head of A/A
# comparisons) and two heads with planted slowdowns; "aa": two gate triples of unslowed arms,
# two A/A comparisons a process (a round of six arms drifts more than the gate's three: if
# anything, more false alarms than the gate's); "gate": the gate's own process, its three arms
# (base, aa, head) of one source tree: one A/A comparison a process.
DESIGNS = {
    "detect": {"base": 0.0, "aa": 0.0, "aa2": 0.0, "h05": 0.05, "h10": 0.10},
    "aa": {"base": 0.0, "aa": 0.0, "aa2": 0.0, "b2": 0.0, "b2aa": 0.0, "b2h": 0.0},
    "gate": {"base": 0.0, "aa": 0.0, "head": 0.0},
}
# The gate triples (base, A/A arm, head) of each condition, where a process has their arms.
TRIPLES = {
    "A/A": [("base", "aa", "aa2"), ("b2", "b2aa", "b2h"), ("base", "aa", "head")],
    "+5%": [("base", "aa", "h05")],
    "+10%": [("base", "aa", "h10")],
}


def paired_collect(out: Path, seconds: float, only: str | None, rounds: int | None,
                   design: str = "detect") -> int:  # fmt: skip
    """Processes of the paired runner, as the gate starts them, with the arms of ``design``,
    until ``seconds`` pass; one paired-NNNN.json each."""
    out.mkdir(parents=True, exist_ok=True)
    repo = Path(__file__).resolve().parent.parent
    t_end, last = time.time() + seconds, 0.0
    i = len(list(out.glob("paired-*.json")))
    while time.time() + last < t_end:
        path = out / f"paired-{i:04d}.json"
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.support.paired",
            "--out",
            str(path),
            "--seed",
            str(i),
        ]
        arms = DESIGNS[design]
        cmd += [a for arm in arms for a in ("--arm", f"{arm}={repo}")]
        cmd += [a for arm, f in arms.items() if f for a in ("--slow", f"{arm}={f}")]
        cmd += ["--only", only] if only else []
        cmd += ["--rounds", str(rounds)] if rounds else []
        t0 = time.time()
        res = subprocess.run(cmd, capture_output=True, text=True, cwd=repo)
        last = time.time() - t0
        if res.returncode != 0:
            print(res.stderr[-3000:], file=sys.stderr)
            return 1
        doc = json.loads(path.read_text())
        if doc["errors"]:
            print(f"arms failed: {doc['errors']}", file=sys.stderr)
            return 1
        print(f"process {i}: {len(doc['cells'])} cells in {last:.0f} s", file=sys.stderr,
              flush=True)  # fmt: skip
        i += 1
    return 0


def paired_sets(dirs: list[Path]) -> list[list[dict]]:
    """The paired-NNNN.json documents of each collection (one machine each), in order."""
    return [[json.loads(p.read_text()) for p in sorted(Path(d).glob("paired-*.json"))]
            for d in dirs]  # fmt: skip


def _as_gate(docs: list[dict], triple: tuple[str, str, str]) -> list[dict]:
    """The documents as the gate's: the arms of ``triple`` as base, aa and head."""

    def arms(values: dict) -> dict:
        return dict(zip(("base", "aa", "head"), (values[a] for a in triple), strict=True))

    return [{**d, "errors": {}, "cells": [{**c, "values": arms(c["values"])} for c in d["cells"]]}
            for d in docs]  # fmt: skip


def _slowed(key) -> bool:
    """Whether the planted slowdown is in this cell (the triton kernel or pipeline)."""
    return "backend=triton," in key[2] + "," or "pipeline=triton," in key[2] + ","


def _label(key) -> str:
    batch = re.search(r"batch=(\d+)", key[2])
    bs = f" BS {batch.group(1)}" if batch and key[0].startswith("pipeline") else ""
    return f"{key[0]}.{key[1]}{bs}"


def _key(c: dict) -> tuple:
    """A paired runner's cell's key, as ``ragbench.gate.paired`` keys it."""
    from ragbench.gate import paired

    return paired.PairedCell(c["benchmark"], c["metric"], c["params"], c["unit"]).key


def paired_rates(sets: list[list[dict]], policies, overlapping: bool = False,
                 second_look: bool = False) -> dict:  # fmt: skip
    """What the gate decides on comparisons of PROCESSES documents of one collection:
    consecutive disjoint groups (``overlapping``: every combination); ``second_look``: with
    the gate's second look at the cells left inconclusive, on as many other processes of the
    collection (``paired.second_look``). -> per condition and metric label: comparisons, false
    alarms, inconclusive, caught, and gate runs with an alarm."""
    from ragbench.gate import paired
    from ragbench.verdicts.status import Status

    size = paired.PROCESSES
    groups = []  # (the gate's processes, the processes of its second look)
    for docs in sets:
        starts = range(0, len(docs) - size + 1, size)
        combos = (itertools.combinations(range(len(docs)), size) if overlapping
                  else (range(i, i + size) for i in starts))  # fmt: skip
        for n, idx in enumerate(combos):
            others = [d for i, d in enumerate(docs) if i not in idx]
            k = n * size % len(others) if others else 0
            groups.append(([docs[i] for i in idx], (others[k:] + others[:k])[:size]))
    out: dict = {"groups": len(groups)}
    for cond, triples in TRIPLES.items():
        per: dict = {}
        alarm_runs = inconclusive_runs = runs = 0
        for (g, more), triple in ((g, t) for g in groups for t in triples
                                  if set(t) <= g[0][0]["arms"].keys()):  # fmt: skip
            docs = _as_gate(g, triple)
            verdicts = paired.judge(paired.collect(docs), policies, paired.TOGETHER, size)
            again = {v.key for v in verdicts if v.status == Status.INCONCLUSIVE}
            if second_look and again and len(more) == size:
                only = [{**d, "cells": [c for c in d["cells"] if _key(c) in again]}
                        for d in _as_gate(more, triple)]  # fmt: skip
                looked = {v.key: v for v in paired.second_look(docs, only, again, policies, size)}
                verdicts = [looked.get(v.key, v) for v in verdicts]
            alarm = inconclusive = False
            for v in verdicts:
                target = cond != "A/A" and _slowed(v.key)
                row = per.setdefault((_label(v.key), target),
                                     {"n": 0, "regression": 0, "inconclusive": 0})  # fmt: skip
                row["n"] += 1
                row[v.status] = row.get(v.status, 0) + 1
                alarm |= not target and v.status == Status.REGRESSION
                inconclusive |= not target and v.status == Status.INCONCLUSIVE
            alarm_runs, runs = alarm_runs + alarm, runs + 1
            inconclusive_runs += inconclusive and not alarm
        out[cond] = {"per": per, "alarm_runs": alarm_runs, "runs": runs,
                     "inconclusive_runs": inconclusive_runs}  # fmt: skip
    return out


def planted(sets: list[list[dict]]) -> dict[str, dict[str, float]]:
    """The measured size of each planted slowdown: per slowed cell label, the median per-round
    ratio head/base over every process of the collections (img/s: base/head)."""
    out: dict[str, dict[str, list]] = {}
    for docs in sets:
        for d in docs:
            for c in d["cells"]:
                key = (c["benchmark"], c["metric"], ",".join(
                    f"{k}={c['params'][k]}" for k in sorted(c["params"])))  # fmt: skip
                if not _slowed(key):
                    continue
                b = c["values"]["base"]
                for arm in [a for a in ("h05", "h10") if a in c["values"]]:  # design detect
                    r = [(x / y) if c["unit"] != "img/s" else (y / x)
                         for x, y in zip(c["values"][arm], b, strict=True)]  # fmt: skip
                    out.setdefault(_label(key), {}).setdefault(arm, []).extend(r)
    return {k: {a: statistics.median(r) - 1 for a, r in v.items()} for k, v in out.items()}


def _with_thresholds(policies, threshold: float):
    import dataclasses

    rules = tuple(dataclasses.replace(r, threshold=threshold) if r.paired else r
                  for r in policies.rules)  # fmt: skip
    return dataclasses.replace(policies, rules=rules)


def paired_analyze(dirs: list[Path], write: Path | None) -> int:
    from ragbench.gate import paired

    sets = [s for s in paired_sets(dirs) if s]
    if not sets:
        print(f"no paired-*.json files under {', '.join(map(str, dirs))}", file=sys.stderr)
        return 2
    policies = detect_policies()
    n = sum(len(s) for s in sets)
    sizes = planted(sets)
    lines = [
        f"{n} processes in {len(sets)} collection(s); a comparison pools "
        f"{paired.PROCESSES} consecutive processes of one collection, as the gate does.",
        "",
    ]
    for threshold in (None, 0.02, 0.03, 0.05):
        pol = policies if threshold is None else _with_thresholds(policies, threshold)
        r = paired_rates(sets, pol)
        title = f"every paired threshold {threshold:.0%}" if threshold else "thresholds in force"
        runs = ", ".join(f"{c} {r[c]['alarm_runs']} of {r[c]['runs']}" for c in TRIPLES)
        undecided = ", ".join(f"{c} {r[c]['inconclusive_runs']} of {r[c]['runs']}"
                              for c in TRIPLES)  # fmt: skip
        lines += [f"**{title}** (gate runs with a false alarm: {runs}; inconclusive without "
                  f"one: {undecided})", "",
                  "| metric | A/A false alarms | A/A inconclusive | +5% caught | +5% passed "
                  "(missed) | +10% caught | +10% passed (missed) | planted +5% / +10% measured |",
                  "|---|---|---|---|---|---|---|---|"]  # fmt: skip
        for label in sorted({k[0] for k in r["A/A"]["per"]}):
            aa = r["A/A"]["per"].get((label, False), {"n": 0, "regression": 0, "inconclusive": 0})
            fa = aa["regression"]
            caught = []
            for cond in ("+5%", "+10%"):
                t = r[cond]["per"].get((label, True))
                missed = t and t["n"] - t["regression"] - t["inconclusive"]
                caught += [_pct(t["regression"], t["n"]), _pct(missed, t["n"])] if t else ["-"] * 2
            size = sizes.get(label)
            size = f"{size['h05'] * 100:+.1f}% / {size['h10'] * 100:+.1f}%" if size else "-"
            upper = upper_95(fa, aa["n"])
            inconclusive = _pct(aa["inconclusive"], aa["n"])
            lines.append(f"| `{label}` | {fa}/{aa['n']} (95% upper {upper:.1%}) | "
                         f"{inconclusive} | {' | '.join(caught)} | {size} |")  # fmt: skip
        lines.append("")
    r = paired_rates(sets, policies, overlapping=True)
    runs = ", ".join(f"{c} {r[c]['alarm_runs']} of {r[c]['runs']}" for c in TRIPLES)
    lines += [f"Every combination of {paired.PROCESSES} processes of a collection (overlapping, "
              f"thresholds in force): gate runs with a false alarm: {runs}."]  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        write.write_text(text)
    return 0


LONELY_INIT = (
    "import sys as _sys\n"
    "if any(k.startswith('ragged_') and not k.startswith(__name__) for k in _sys.modules):\n"
    "    raise ImportError('another ragged is loaded in this process (calibration)')\n"
)


def paired_alone(out: Path, processes: int) -> int:
    """The gate's fallback where head loads only alone: a copy of this tree whose ``ragged``
    refuses to share a process, measured by ``ragbench.gate.paired.measure`` as the gate does, with
    ``processes`` a side; the documents land in ``out`` for ``alone-analyze``."""
    import shutil
    import tempfile

    from ragbench.gate import paired

    repo = Path(__file__).resolve().parent.parent
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        lonely = Path(tmp) / "lonely"
        shutil.copytree(repo / "ragged", lonely / "ragged")
        init = lonely / "ragged" / "__init__.py"
        init.write_text(LONELY_INIT + init.read_text())
        t0 = time.time()

        def log(m: str) -> None:
            print(m, file=sys.stderr, flush=True)

        method, docs = paired.measure(repo, lonely, Path(tmp), processes=processes, log=log)
    if method != paired.ALONE:
        print(f"expected the alternating-process fallback, got {method}", file=sys.stderr)
        return 1
    for i, d in enumerate(docs):
        (out / f"alone-{i:04d}.json").write_text(json.dumps(d))
    print(f"{len(docs)} processes in {time.time() - t0:.0f} s", file=sys.stderr)
    return alone_analyze([out], None)


def alone_analyze(dirs: list[Path], write: Path | None) -> int:
    """What the fallback decided, per metric, with the first 3 processes a side (the gate's
    default) and with all of them: statuses and the smallest change each cell could detect."""
    from ragbench.gate import paired

    policies = detect_policies()
    lines = []
    for d in dirs:
        docs = [json.loads(p.read_text()) for p in sorted(Path(d).glob("alone-*.json"))]
        if len(docs) < 2:
            print(f"no alone-*.json documents under {d}", file=sys.stderr)
            return 2
        for side in sorted({min(paired.PROCESSES, len(docs) // 2), len(docs) // 2}):
            verdicts = paired.judge(paired.collect(docs[: 2 * side]), policies, paired.ALONE, side)
            lines += [
                f"**{d.name}: {side} processes a side** (head alone, base alone, alternating)",
                "",
                "| metric | cells | statuses | smallest detectable change (median, best) |",
                "|---|---|---|---|",
            ]
            for label in sorted({_label(v.key) for v in verdicts}):
                vs = [v for v in verdicts if _label(v.key) == label]
                statuses = sorted(Counter(v.status for v in vs).items())
                counts = ", ".join(f"{s} {n}" for s, n in statuses)
                det = sorted(v.detectable for v in vs if v.detectable is not None)
                fmt = lambda x: "none" if math.isinf(x) else f"{x:.0%}"  # noqa: E731
                reach = f"{fmt(statistics.median(det))}, {fmt(det[0])}" if det else "-"
                lines.append(f"| `{label}` | {len(vs)} | {counts} | {reach} |")
            lines.append("")
    text = "\n".join(lines)
    print(text)
    if write:
        write.write_text(text)
    return 0


# --- the rule of evidence on all collections: rule-table ----------------------------------

# Synthetic cells: samples 10 x uniform(1 - s, 1 + s), 40 a side (the suite's two rounds), at
# spreads s the GPU runs showed for gpu_us (run-to-run 2.5% for the median cell, 5% for the
# worst; the spread of the A runs below) and at 30% (a noisy cell), judged at gpu_us's 2%
# threshold as the most significant of 33 tested cells (alpha 0.01 / 33, as Holm's first step).
SYNTH_SPREADS = (0.025, 0.05, 0.30)
SYNTH_STEPS = (0.0, 0.02, 0.05, 0.10)
SYNTH_CELLS = 33


def synthetic_rates(seeds: int) -> dict[tuple[float, float], Counter]:
    """-> {(spread, step): statuses over ``seeds`` cells}."""
    import numpy as np

    from ragbench.policies import Policies, Policy
    from ragbench.verdicts.comparison import Cell, compare

    pol = Policies((Policy("*", "latency", threshold=0.02),),
                   {"alpha": 0.01 / SYNTH_CELLS}, {})  # fmt: skip
    key = ("synthetic", "gpu_us", "")
    out: dict[tuple[float, float], Counter] = {}
    for spread in SYNTH_SPREADS:
        for step in SYNTH_STEPS:
            counts = out.setdefault((spread, step), Counter())
            for seed in range(seeds):
                rng = np.random.default_rng(seed)
                b, h = (list(10 * f * rng.uniform(1 - spread, 1 + spread, 40))
                        for f in (1.0, 1.0 + step))  # fmt: skip
                (v,) = compare({key: Cell(*key, {}, "us", b)}, {key: Cell(*key, {}, "us", h)},
                               pol, detail=False).verdicts  # fmt: skip
                counts[str(v.status)] += 1
    return out


def _share(n: int, d: int) -> str:
    return f"{n}/{d} ({100 * n / d:.1f}%)" if d else "-"


def rule_table(asv_dirs: list[Path], paired_dirs: list[Path], seeds: int,
               write: Path | None, overlapping: bool = False) -> int:  # fmt: skip
    """One table: A/A gate runs (pass, false failure, inconclusive) and detection, for the
    asv collections (``gpu_us`` across processes, with the re-measurement), the paired ones
    (host-time metrics in one process) and synthetic cells."""
    policies = detect_policies()
    lines = ["| what | A/A gate runs | PASS | false failures | inconclusive | +2% | +5% | +10% |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip

    def detection(caught: int, inconclusive: int, n: int) -> str:
        if not n:
            return "-"
        return f"{_share(caught, n)} caught, {inconclusive} inc., {n - caught - inconclusive} pass"

    runs = load_runs(asv_dirs) if asv_dirs else []
    if runs:
        r = rates(runs, policies)
        aa = [r[c] for c in (0.0, "aa_windows") if c in r]
        n = sum(x["gate_runs"] for x in aa)
        alarms = sum(x["false_alarm_runs"] for x in aa)
        inc = sum(x["inconclusive_runs"] for x in aa)
        det = [detection(r[c]["caught"], r[c]["inconclusive"], r[c]["targets"]) if c in r
               else "-" for c in CONDITIONS[1:]]  # fmt: skip
        lines.append(f"| asv runs, gpu_us across processes ({len(runs)} runs) | {n} | "
                     f"{_share(n - alarms - inc, n)} | {_share(alarms, n)} | {_share(inc, n)} | "
                     f"{' | '.join(det)} |")  # fmt: skip
    sets = [s for s in paired_sets(paired_dirs) if s]
    looks = (("one look", False), ("the gate's two looks", True)) if sets else ()
    for name, second in looks:
        r = paired_rates(sets, policies, overlapping, second_look=second)
        aa = r["A/A"]
        n, alarms, inc = aa["runs"], aa["alarm_runs"], aa["inconclusive_runs"]
        det = ["-"]
        for cond in ("+5%", "+10%"):
            rows = [x for (_, target), x in r[cond]["per"].items() if target]
            caught, undecided = (sum(x[k] for x in rows) for k in ("regression", "inconclusive"))
            det.append(detection(caught, undecided, sum(x["n"] for x in rows)))
        groups = "every 3 of them" if overlapping else "3 at a time"
        lines.append(f"| paired, host-time cells in one process ({sum(map(len, sets))} "
                     f"processes, {groups}), {name} | {n} | {_share(n - alarms - inc, n)} | "
                     f"{_share(alarms, n)} | {_share(inc, n)} | {' | '.join(det)} |")  # fmt: skip
    counts = synthetic_rates(seeds) if seeds else {}
    for spread in SYNTH_SPREADS if seeds else ():
        aa = counts[(spread, 0.0)]
        det = [detection(counts[(spread, step)]["regression"],
                         counts[(spread, step)]["inconclusive"], seeds)
               for step in SYNTH_STEPS[1:]]  # fmt: skip
        lines.append(f"| synthetic cell, {spread:.1%} spread, 2% threshold | {seeds} | "
                     f"{_share(aa['unchanged'] + aa['improvement'], seeds)} | "
                     f"{_share(aa['regression'], seeds)} | "
                     f"{_share(aa['inconclusive'], seeds)} | {' | '.join(det)} |")  # fmt: skip
    text = "\n".join(lines) + "\n"
    print(text)
    if write:
        write.write_text(text)
    return 0


def _analyzer(sub, name: str, help: str, prefix: str) -> None:
    """An analysis subcommand: directories of ``prefix-*.json`` files, ``--write`` the tables."""
    p = sub.add_parser(name, help=help)
    p.add_argument("dirs", nargs="+", type=Path, help=f"directories of {prefix}-*.json files")
    p.add_argument("--write", type=Path, default=None, help="also write the tables here")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True)
    m = sub.add_parser("measure", help="one run (a separate process): JSON on stdout")
    m.add_argument("--inject", type=float, default=0.0, help="slowdown of the triton kernel")
    c = sub.add_parser("collect", help="blocks of runs into DIR (CUDA GPU)")
    c.add_argument("--out", type=Path, required=True)
    c.add_argument("--seconds", type=float, default=540, help="stop starting blocks after this")
    _analyzer(sub, "analyze", "false-alarm and detection rates of collected runs", "run")
    pc = sub.add_parser("paired-collect", help="paired-runner processes into DIR (CUDA GPU)")
    pc.add_argument("--out", type=Path, required=True)
    pc.add_argument("--seconds", type=float, default=540, help="stop starting processes then")
    pc.add_argument("--only", default=None, help="the paired runner's --only REGEX")
    pc.add_argument("--rounds", type=int, default=None, help="the paired runner's --rounds")
    pc.add_argument(
        "--design",
        choices=DESIGNS,
        default="detect",
        help="detect: A/A and planted +5%%/+10%% heads; aa: two A/A triples a process; "
        "gate: the gate's own three arms, one A/A triple a process",
    )
    _analyzer(sub, "paired-analyze", "rates of the paired comparison", "paired")
    al = sub.add_parser("paired-alone", help="the fallback of a head that loads only alone")
    al.add_argument("--out", type=Path, required=True)
    al.add_argument("--processes", type=int, default=6, help="processes a side (default 6)")
    _analyzer(sub, "alone-analyze", "what the fallback decided, per metric", "alone")
    rt = sub.add_parser("rule-table", help="A/A pass share and detection under the rule")
    rt.add_argument("--asv", nargs="*", type=Path, default=[], help="collections of run-*.json")
    rt.add_argument("--paired", nargs="*", type=Path, default=[],
                    help="collections of paired-*.json")  # fmt: skip
    rt.add_argument("--seeds", type=int, default=200, help="synthetic cells per case (0: none)")
    rt.add_argument("--write", type=Path, default=None, help="also write the table here")
    rt.add_argument("--overlapping", action="store_true",
                    help="paired: every 3 processes, not disjoint triples")  # fmt: skip
    args = ap.parse_args(argv)
    if args.command == "rule-table":
        return rule_table(args.asv, args.paired, args.seeds, args.write, args.overlapping)
    if args.command == "paired-alone":
        return paired_alone(args.out, args.processes)
    if args.command == "alone-analyze":
        return alone_analyze(args.dirs, args.write)
    if args.command == "paired-analyze":
        return paired_analyze(args.dirs, args.write)
    if args.command == "paired-collect":
        return paired_collect(args.out, args.seconds, args.only, args.rounds, args.design)
    if args.command == "measure":
        print(json.dumps(measure(args.inject)))
        return 0
    if args.command == "analyze":
        return analyze(args.dirs, args.write)
    return collect(args.out, args.seconds)


if __name__ == "__main__":
    sys.exit(main())
