"""The gate's markdown report (a GitHub step summary and PR comment): the verdict, its tables,
and the smallest change the run could detect."""

from __future__ import annotations

import statistics
from collections import defaultdict

from ..markdown import number, percent
from ..verdicts.comparison import Comparison
from ..verdicts.evidence import INTERVAL, RULE, WELCH, Verdict, powered
from ..verdicts.status import Status, nothing_judged, verdict_words
from . import paired
from .drift import drift_section
from .gating import GateResult, rerun_command
from .runs import differences, own_runs


def _name(v: Verdict) -> str:
    bench, metric, params = v.key
    return f"`{bench}.{metric}` {params}".strip()


def _env(runs: list[dict]) -> str:
    """The runs' environment, as far as it was recorded (another project's results carry no
    GPU, torch or triton: they are left out, never printed as None); runs pooled from several
    (``--across-environments``) name each value (``environment conda-py3.11 / py3.12``)."""
    if not runs:  # a settle run of host-time cells alone: the paired runner measured them
        return "no asv run here (host-time cells only, timed by the paired runner)"
    parts = []
    for k in ("gpu", "torch", "triton", "driver", "python", "env_name"):
        values = " / ".join(sorted({str(r[k]) for r in runs if r.get(k)}))
        if values:
            parts.append(
                values if k == "gpu" else f"{k.replace('env_name', 'environment')} {values}"
            )
    pooled = f" ({len(runs)} runs pooled)" if len(runs) > 1 and " / " in " ".join(parts) else ""
    return (", ".join(parts) or "environment not recorded") + pooled


def short_pair(a: str, b: str) -> tuple[str, str]:
    """Two commits abbreviated to 12 characters, or as many as tell them apart."""
    n = 12
    while n < min(len(a), len(b)) and a[:n] == b[:n] and a != b:
        n += 1
    return a[:n], b[:n]


def _stat_table(verdicts: list[Verdict]) -> list[str]:
    lines = [
        "| cell | base | head | change | interval of head/base (95% bootstrap; paired: "
        "family-wise; no samples: from asv's 99% intervals, or of the means from their "
        "summaries) | p (Holm) | could detect | threshold |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for v in verdicts:
        interval = f"{v.interval[0]:.3f}-{v.interval[1]:.3f}" if v.interval else "-"
        note = f" ({v.note})" if v.note else (" (reproduced)" if v.rechecked else "")
        lines.append(
            f"| {_name(v)}{note} | {number(v.base)} | {number(v.head)} | {verdict_words(v)} | "
            f"{interval} | {number(v.p_adj, 2)} | {percent(v.detectable)} | "
            f"{v.policy.threshold * 100:.0f}% |"
        )
    return lines


def gate_markdown(res: GateResult, title: str | None = None) -> str:
    c = res.comparison
    regressions = c.by_status(Status.REGRESSION)
    violations = c.by_status(Status.VIOLATION)
    failed = c.by_status(Status.FAILED)
    missing = c.by_status(Status.MISSING)
    improvements = c.by_status(Status.IMPROVEMENT)
    timed = [v for v in c.by_status(Status.INCONCLUSIVE) if v.key in res.settings]
    inconclusive = [v for v in c.by_status(Status.INCONCLUSIVE) if v.key not in res.settings]
    # the rows of kinds the data has: no bounds or hashes on a project that has none
    kinds = {v.policy.kind for v in c.verdicts}
    unchanged = [v for v in c.gated() if v.status == Status.UNCHANGED]
    shown = [v for v in unchanged if powered(v)]
    point = [v for v in unchanged if not powered(v)]
    held = [v for v in c.judged() if v.policy.kind == "bound" and v.status == Status.UNCHANGED]
    verdict = f"**{c.headline.upper()}**"
    lines = [
        f"## {title or 'ragbench gate: {} against {}'.format(*short_pair(res.head, res.base))}"
        f" - {verdict}",
        "",
        RULE,
        "",
        f"Machine `{res.machine}`: {_env(res.head_runs)}.",
    ]
    if _env(res.base_runs) != _env(res.head_runs):
        lines.append(f"Base ran in another environment: {_env(res.base_runs)}.")
    lines += differences(res.base_runs, res.head_runs)
    if res.rerun_of:
        lines.append(
            f"Settling the gate `{res.rerun_of}` (as its store recorded it): its cells "
            "without evidence or flagged, "
            f"measured again here ({res.rounds} alternating round(s) each) and judged on these "
            "samples alone; its other cells passed there and are not repeated; its other "
            "failures stand."
        )
    elif res.measured:
        lines.append(
            f"Base and head measured in this job, alternating, {res.rounds} round(s) each; "
            f"{res.rechecked} flagged or inconclusive cell(s) re-measured once."
        )
    else:
        lines.append(
            f"From the store ({len(res.base_runs)} base run(s), {len(res.head_runs)} head "
            "run(s)), not measured alternating in one job and not re-measured."
        )
    if res.paired_method == paired.TOGETHER:
        lines.append(
            f"Host-time metrics: base, head and base again (A/A) timed in the same process, "
            f"randomized interleaved rounds, {res.paired_processes} fresh process(es), "
            f"{res.paired_seconds:.0f} s"
            + (f"; {res.paired_again} cell(s) without evidence measured again in as many more "
               "and judged on all, at the stricter interval of a second look."
               if res.paired_again else ".")
        )  # fmt: skip
    elif res.paired_method == paired.ALONE:
        lines.append(
            "Host-time metrics: base and head could not share a process (one loads only "
            f"alone): {2 * res.paired_processes} alternating processes, one median each. "
            "Host time moves up to 2.5x between processes (docs/calibration.md), so these "
            "cells are inconclusive: check their change by hand."
        )
    lines += [
        *sensitivity_line(c),
        "",
        f"Significance: Mann-Whitney U on raw samples (paired cells: a sign test of the "
        f"per-round ratios), Holm-corrected, family-wise alpha {c.alpha}; a change counts only "
        "beyond its metric's threshold." + _by_intervals(c),
        "",
        "| | cells |",
        "|---|---|",
        f"| regressions | {len(regressions)} |",
        *([f"| bound violations | {len(violations)} |"] if "bound" in kinds else []),
        f"| failed on head (the benchmark raised) | {len(failed)} |",
        f"| missing on head (base has a value: NaN, skipped or gone) | {len(missing)} |",
        f"| improvements | {len(improvements)} |",
        f"| unchanged, shown with the power to see the threshold | {len(shown)} |",
        f"| unchanged, the interval of head/base under the threshold | {len(point)} |",
        *([f"| bounds held on head | {len(held)} |"] if "bound" in kinds else []),
        f"| inconclusive (no evidence either way: no pass) | {len(inconclusive)} |",
        *([f"| measurement setting changed (not the code's: no pass) | {len(timed)} |"]
          if timed else []),
        *([f"| bound broken on base too (not this change) | "
           f"{len(c.by_status('pre-existing'))} |"] if "bound" in kinds else []),
        *([f"| output hash changed (reported only) | {len(c.by_status('hash-changed'))} |"]
          if "hash" in kinds else []),
        f"| new on head (no baseline: not counted) | {len(c.by_status('new'))} |",
        f"| not gated (info) | {len(c.by_status('info'))} |",
    ]  # fmt: skip
    if failed:
        lines += ["", "### Failed on head", ""]
        lines += [f"- {_name(v)}: {v.note}" for v in failed]
    if missing:
        lines += ["", "### Missing on head", ""]
        lines += [f"- {_name(v)}: base {number(v.base)}, {v.note}" for v in missing]
    if regressions:
        lines += ["", "### Regressions", "", *_stat_table(regressions)]
    if violations:
        lines += ["", "### Bound violations", ""]
        lines += [f"- {_name(v)}: {v.note}" for v in violations]
    lines += drift_section(res.drift)
    if timed:
        lines += ["", "### Measurement setting changed: not compared as the code's, so no pass",
                  "", "The harness timed these cells otherwise on base and on head (asv's "
                  "number or repeat, pytest-benchmark's iterations or rounds, by 2x or more, "
                  "where its calibration does not explain it): their change is the "
                  "measurement's until both are measured with the same settings.", "",
                  "| cell | base | head | change | settings |", "|---|---|---|---|---|",
                  *[f"| {_name(v)} | {number(v.base)} | {number(v.head)} | {verdict_words(v)} | "
                    f"{res.settings[v.key]} |" for v in timed]]  # fmt: skip
    if improvements:
        lines += ["", "### Improvements", "", *_stat_table(improvements)]
    if inconclusive:
        lines += ["", "### Inconclusive: no evidence either way, so no pass", "",
                  *_stat_table(inconclusive[:50])]  # fmt: skip
        if len(inconclusive) > 50:
            lines.append(f"- ... and {len(inconclusive) - 50} more")
        if not res.measured and own_runs(res.base_runs + res.head_runs):
            lines += ["", "To settle them: measure base and head again in one job "
                      "(`ragbench gate` without `--stored`); asv results kept without raw "
                      "samples get them with `asv run --record-samples`."]  # fmt: skip
        elif not res.measured:
            lines += ["", "To settle them: measure base and head again with the project's "
                      "harness, alternating and with the same settings (asv: `asv run "
                      "--record-samples`, the same `number`), and ingest those runs."]  # fmt: skip
    if not c.judged():
        lines += ["", f"### Nothing was judged: {nothing_judged(c)}, so no pass", ""]
        if not any(v.policy.kind != "info" for v in c.verdicts):
            lines += ["Every cell's policy is `info` (shown, never judged). Give these metrics a "
                      "kind and threshold in a policies file and pass it: `ragbench gate "
                      "--policies FILE` (docs/store.md, Detection)."]  # fmt: skip
        else:
            lines += ["Base and head share no cell the policies judge with a value on both "
                      f"sides ({len(c.by_status(Status.MISSING))} on base alone, "
                      f"{len(c.by_status(Status.NEW))} on head alone): compare runs of the same "
                      "benchmarks, in the same environment (`--environment`)."]  # fmt: skip
    pre = c.by_status(Status.PRE_EXISTING)
    if pre:
        lines += ["", "### Bounds broken on base as well", ""]
        lines += [f"- {_name(v)}: {v.note}" for v in pre]
    hashes = c.by_status(Status.HASH_CHANGED)
    if hashes:
        lines += ["", "### Output hashes changed (numbers moved; within bounds)", ""]
        lines += [f"- {_name(v)}" for v in hashes]
    new = c.by_status(Status.NEW)
    if new:
        lines += ["", "### New on head (no baseline data)", ""]
        lines += [f"- {_name(v)}" + (f" ({v.note})" if v.note else "") for v in new[:50]]
        if len(new) > 50:
            lines.append(f"- ... and {len(new) - 50} more")
    lines += ["", *sensitivity(c.verdicts)]
    if point:
        lines += ["", "### Unchanged by the interval of head/base (under the threshold)",
                  "", *_stat_table(point)]  # fmt: skip
    if shown:
        lines += ["", "<details><summary>Unchanged cells</summary>", "",
                  *_stat_table(shown), "", "</details>"]  # fmt: skip
    lines += _bounds_table(held)
    lines += _info_table(c.by_status(Status.INFO))
    command = rerun_command(res)
    if command:
        lines += ["", "### To settle", "", f"`{command}`", "",
                  f"Measures only what is left without evidence or flagged: "
                  f"{res.plan.describe()}, the rounds estimated from their spread (an "
                  "interval narrows as 1/sqrt(samples)), merged into this verdict as "
                  f"`{res.store}` recorded it (gate `{res.gate_id}`)."]  # fmt: skip
    return "\n".join(lines) + "\n"


def _bounds_table(held: list[Verdict]) -> list[str]:
    """The deterministic bounds that held: each cell's value on head beside its bound."""
    if not held:
        return []
    lines = ["", "<details><summary>Bounds held on head</summary>", "",
             "| cell | base | head | bound |", "|---|---|---|---|"]  # fmt: skip
    for v in held:
        p, bound = v.policy, []
        if p.max is not None:
            widened = " (widened by its reference cell)" if p.relative_to else ""
            bound.append(f"< {number(p.max)}{widened}")
        if p.min is not None:
            bound.append(f">= {number(p.min)}")
        lines.append(
            f"| {_name(v)} | {number(v.base)} | {number(v.head)} | {' and '.join(bound)} |"
        )
    return [*lines, "", "</details>"]


def _info_table(info: list[Verdict]) -> list[str]:
    """The cells shown, never judged (policy ``info``: this suite's timings on a CPU, where
    Triton's interpreter times numpy, not a kernel), with their values and ratio."""
    if not info:
        return []
    lines = ["", f"### Shown, not judged: {len(info)} cell(s) whose policy is `info`", "",
             "Recorded and shown, never judged: a metric gets a threshold once it has been "
             "calibrated on the machine class it runs on (docs/calibration.md). Medians, no "
             "interval and no test.", "",
             "<details><summary>The cells</summary>", "",
             "| cell | base | head | head/base |", "|---|---|---|---|"]  # fmt: skip
    for v in info:
        ratio = v.head / v.base if v.base and v.head is not None and v.unit != "hash" else None
        lines.append(f"| {_name(v)} | {number(v.base)} | {number(v.head)} | {number(ratio, 3)} |")
    return [*lines, "", "</details>"]


def sensitivity_line(c: Comparison) -> list[str]:
    """One line: the smallest change the run could detect, host-time (paired) and the other
    gated metrics apart (median and worst cell)."""
    parts = []
    gated = c.gated()
    for label, paired_cells in (("host-time metrics ", True), ("the other metrics ", False)):
        values = [v.detectable for v in gated
                  if v.detectable is not None and v.policy.paired == paired_cells]  # fmt: skip
        if values:
            label = label if parts or any(v.policy.paired for v in gated) else ""
            parts.append(f"{label}{percent(statistics.median(values))} (median of {len(values)} "
                         f"cells), {percent(max(values))} at worst")  # fmt: skip
    if parts:
        return ["Sensitivity (smallest change this run could detect): " + "; ".join(parts) + "."]
    bounds = len(c.judged()) - len(gated)
    what = (f"{len(gated)} timed cell(s) had too few samples to be tested" if gated
            else "no timed cell was judged")  # fmt: skip
    judged = f"; {bounds} deterministic bound(s) judged" if bounds else ""
    return [f"Sensitivity: none to state: {what}{judged}."]


def _by_intervals(c: Comparison) -> str:
    """The sentence on cells judged by asv's confidence intervals, where there are any."""
    n = sum(v.method == INTERVAL for v in c.verdicts)
    welch = sum(v.method == WELCH for v in c.verdicts)
    text = (
        f" {n} cell(s) without enough raw samples: judged by asv's 99% confidence intervals "
        "as `asv compare` does (a change counts only where they do not overlap; per cell, "
        "no correction over the run)." if n else ""
    )  # fmt: skip
    if welch:
        text += (f" {welch} cell(s) without raw samples: judged by Welch's t on their "
                 "summaries (mean, standard deviation, rounds), Holm-corrected with the "
                 "run's other tests, and the interval of the means' ratio.")  # fmt: skip
    return text


def sensitivity(verdicts: list[Verdict]) -> list[str]:
    """Per metric: the smallest slowdown this run could have detected (over its cells)."""
    per: dict[str, list[float]] = defaultdict(list)
    for v in verdicts:
        if v.detectable is not None:
            per[f"{v.key[0]}.{v.key[1]}"].append(v.detectable)
    if not per:
        return []
    lines = [
        "### Smallest slowdown this run could have detected",
        "",
        "| metric | cells | best cell | median cell | threshold |",
        "|---|---|---|---|---|",
    ]
    for name, values in sorted(per.items()):
        threshold = next(v.policy.threshold for v in verdicts
                         if f"{v.key[0]}.{v.key[1]}" == name)  # fmt: skip
        lines.append(
            f"| `{name}` | {len(values)} | {percent(min(values))} | "
            f"{percent(statistics.median(values))} | {threshold * 100:.0f}% |"
        )
    return lines
