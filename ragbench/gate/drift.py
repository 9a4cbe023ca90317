"""Numeric drift against base: head's outputs compared with base's on the same inputs, seeds
and stack, judged against what the same code gives run to run.

The numerics benchmarks hold each output to a bound against a reference (the pipeline's logits
within 2x ``padded_full``'s drift of ``padded_max``, the kernel within 2x eager PyTorch's error
of the float64 oracle): loose enough that a kernel whose softmax scale is 1% off passes the
pipeline's bound. This comparison is exact instead. ``benchmarks/support/outputs.py`` computes the
raw outputs of the same workloads for base, head and base again (``aa``, after head, where
head moved) in one process; for each output:

- identical to base's, bit for bit: unchanged;
- different: a drift finding (``Status.DRIFT``, which fails the gate unless a maintainer
  accepts it) when the difference is more than ``margin`` times what base gives run to run
  (the largest difference between base and ``aa``; ``margin``: ``drift_margin`` in the
  policies' ``[gate]``, 2). On a deterministic path that noise is 0, so any difference is a
  finding; where base itself is not reproducible, only a difference beyond twice its own
  spread is;
- keep masks are an output of their own: masks that differ are a finding (measured in
  positions that changed) whatever the logits did;
- an output that head cannot compute and base can fails (``Status.FAILED``).

``ragbench versions`` compares one commit under two stacks the same way: each stack's own
Python writes its file (two stacks cannot share a process); where the two stacks' outputs
differ, each stack computes those cells again, twice, in a fresh process, and a difference
beyond ``margin`` times the larger of the two stacks' run-to-run noise (within and across
processes) is reported as drift between stacks.

    .venv/bin/python -m ragbench.gate.drift FILE            # head against base (and aa), one file
    .venv/bin/python -m ragbench.gate.drift FILE_A FILE_B   # between stacks: B's base against A's
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import re
import shlex
import sys
import time
import zipfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .. import asv_run, git
from ..policies import Policies, Policy
from ..store import param_key
from ..verdicts.comparison import Key, Verdict
from ..verdicts.status import Status

MARGIN = 2.0  # default of [gate] drift_margin: beyond twice the run-to-run noise
METRICS = {"drift.Pipeline": ("logits", "keep_masks"), "drift.Kernel": ("output",)}
UNITS = {"logits": "logit", "keep_masks": "positions", "output": "abs"}
# The asv benchmarks whose workloads each part computes: the gate's --bench selects the parts.
PARTS = {"drift.Pipeline": ("numerics.Drift", "cpu.Drift"),
         "drift.Kernel": ("numerics.KernelError", "cpu.KernelError")}  # fmt: skip


class DriftError(asv_run.SuiteError):
    """The outputs runner itself could not run, or wrote no usable file."""


# --- one output: how far head moved, and how far base moves run to run ---------------------


@dataclass
class Difference:
    """Two arrays of one output compared. ``measure`` is what the verdict compares with the
    run-to-run noise: the largest absolute difference (inf where one side is NaN), or for keep
    masks the number of positions that changed."""

    measure: float
    elements: int  # values (positions) that differ
    total: int
    rows: int  # images (pipeline) or tokens (kernel) with any difference
    row_total: int
    mean_abs: float | None = None
    top1: int | None = None  # images whose top-1 class changed (logits)
    shape: str | None = None  # "(2, 1000) -> (3, 1000)" where the shapes differ

    def describe(self, metric: str) -> str:
        if self.shape:
            return f"shape {self.shape}"
        rows = "images" if metric != "output" else "tokens"
        where = f"{self.elements:,} of {self.total:,}"
        if metric == "keep_masks":
            return f"{where} positions changed ({self.rows} of {self.row_total} images)"
        text = (f"max abs diff {self.measure:.3g}, mean {self.mean_abs:.3g}; {where} values "
                f"({self.rows} of {self.row_total} {rows})")  # fmt: skip
        if self.top1 is not None:
            text += f"; top-1 changed for {self.top1} image(s)"
        return text


def difference(metric: str, a, b) -> Difference | None:
    """None where ``a`` and ``b`` are the same bit for bit (NaN where NaN), else how they
    differ. Rows: axis 0 (logits: images; kernel output: tokens), keep masks [stages, B, N]:
    axis 1 (images)."""
    import numpy as np

    if a.shape != b.shape:
        return Difference(float("inf"), max(a.size, b.size), max(a.size, b.size), 0, 0,
                          shape=f"{a.shape} -> {b.shape}")  # fmt: skip
    axis = 1 if metric == "keep_masks" else 0
    if a.dtype == bool or b.dtype == bool:
        moved = a != b
        if not moved.any():
            return None
        rows = moved.any(axis=tuple(i for i in range(moved.ndim) if i != axis))
        n = int(moved.sum())
        return Difference(float(n), n, moved.size, int(rows.sum()), rows.size)
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
        diff = np.where(same, 0.0, np.abs(a64 - b64))
    diff[np.isnan(diff)] = np.inf  # one side NaN, or inf against -inf
    moved = diff > 0
    if not moved.any():
        return None
    rows = moved.reshape(moved.shape[0], -1).any(axis=1)
    top1 = None
    if metric == "logits" and a.ndim == 2:
        top1 = int((np.nan_to_num(a64).argmax(1) != np.nan_to_num(b64).argmax(1)).sum())
    return Difference(float(diff.max()), int(moved.sum()), moved.size, int(rows.sum()),
                      rows.size, float(diff.mean()), top1)  # fmt: skip


@dataclass
class Output:
    """One output of one cell, judged: its status, how far head moved, the noise."""

    benchmark: str
    metric: str
    params: dict
    status: Status
    moved: Difference | None = None
    noise: float | None = None  # run-to-run, in moved.measure's unit; None: not needed
    note: str = ""

    @property
    def key(self) -> Key:
        return (self.benchmark, self.metric, param_key(self.params))

    def verdict(self, margin: float) -> Verdict:
        policy = Policy("drift.*", "drift", threshold=margin)
        return Verdict(self.key, self.params, UNITS.get(self.metric), policy,
                       self.status, note=self.note)  # fmt: skip


def _noise_text(noise: float, metric: str) -> str:
    return f"{noise:.0f} position(s)" if metric == "keep_masks" else f"{noise:.3g}"


def judge_output(benchmark: str, metric: str, params: dict, base, head, noise_pairs: list,
                 margin: float, errors: tuple[str | None, str | None] = (None, None),
                 ) -> Output:  # fmt: skip
    """``head`` against ``base`` (arrays, None where that side raised: ``errors`` says why),
    the noise the largest difference of ``noise_pairs`` (pairs of arrays of the same code)."""
    out = Output(benchmark, metric, params, Status.UNCHANGED)
    if head is None and base is not None:
        out.status, out.note = Status.FAILED, f"head raised: {errors[1] or 'no output'}"
    elif head is None:
        out.note = "no output on either side"
    elif base is None:
        out.status, out.note = Status.NEW, f"base raised: {errors[0] or 'no output'}"
    elif (moved := difference(metric, base, head)) is not None:
        out.moved = moved
        spread = [difference(metric, a, b) for a, b in noise_pairs]
        out.noise = max((d.measure if d else 0.0 for d in spread), default=0.0)
        what = moved.describe(metric)
        if not noise_pairs:  # the same code could not run again: fail closed, noise 0
            out.status, out.note = Status.DRIFT, f"{what}; run-to-run noise not measured"
        elif moved.measure > margin * out.noise:
            noise = _noise_text(out.noise, metric)
            out.status, out.note = Status.DRIFT, f"{what}; run-to-run {noise}"
        else:
            out.note = (f"moved within run-to-run noise: {what}; run-to-run "
                        f"{_noise_text(out.noise, metric)}")  # fmt: skip
    return out


# --- files of the outputs runner --------------------------------------------------------


class Outputs:
    """A file of ``benchmarks.support.outputs``: its meta document and arrays, by cell and arm."""

    def __init__(self, path: Path):
        import numpy as np

        self.path = Path(path)
        try:
            self._npz = np.load(self.path, allow_pickle=False)
            self.meta = json.loads(str(self._npz["meta"]))
            if self.meta.get("schema") != 1 or not isinstance(self.meta.get("cells"), list):
                raise ValueError("no schema-1 meta document")
        except (OSError, ValueError, KeyError, zipfile.BadZipFile) as exc:
            raise DriftError(
                f"{self.path}: not a file of benchmarks.support.outputs ({exc})"
            ) from None
        self.cells = {(c["benchmark"], param_key(c["params"])): (i, c)
                      for i, c in enumerate(self.meta["cells"])}  # fmt: skip

    def arrays(self, key, arm: str) -> dict | None:
        """{name: array} of ``arm`` in cell ``key``; None where it raised or was skipped."""
        i, cell = self.cells.get(key, (None, None))
        if cell is None or arm not in cell["arrays"]:
            return None
        return {name: self._npz[f"c{i}.{arm}.{name}"] for name in cell["arrays"][arm]}

    def error(self, key, arm: str) -> str | None:
        """Why ``arm`` has no arrays in cell ``key``, where the file says."""
        _, cell = self.cells.get(key, (None, None))
        if cell is None:
            return f"no cell {key[0]} {key[1]} in {self.path.name}"
        return cell.get("errors", {}).get(arm) or self.meta.get("errors", {}).get(arm)


Side = tuple[Outputs, str]  # a file and an arm in it


def judge(base: Side, head: Side, noise: list[tuple[Side, Side]], margin: float) -> list[Output]:
    """Every output of every cell of either side: ``head`` against ``base``, the run-to-run
    noise from the ``noise`` pairs (sides of the same code) that have the cell."""
    outputs = []
    keys = list(dict.fromkeys([*base[0].cells, *head[0].cells]))
    for key in keys:
        b, h = base[0].arrays(key, base[1]), head[0].arrays(key, head[1])
        params = (base[0].cells.get(key) or head[0].cells[key])[1]["params"]
        pairs = [(x[0].arrays(key, x[1]), y[0].arrays(key, y[1])) for x, y in noise]
        pairs = [(x, y) for x, y in pairs if x is not None and y is not None]
        errors = (base[0].error(key, base[1]), head[0].error(key, head[1]))
        for metric in METRICS.get(key[0], ()):
            outputs.append(judge_output(
                key[0], metric, params, (b or {}).get(metric), (h or {}).get(metric),
                [(x[metric], y[metric]) for x, y in pairs if metric in x and metric in y],
                margin, errors,
            ))  # fmt: skip
    return outputs


@dataclass
class DriftReport:
    """The comparison's outputs, or why there was none, and how to reproduce it."""

    outputs: list[Output] = field(default_factory=list)
    margin: float = MARGIN
    between: str = "base"  # "base": head against base; "stacks": one commit, two stacks
    skipped: str | None = None  # why nothing was compared
    device: str = ""
    seconds: float = 0.0
    command: str = ""  # the commands that reproduce it

    @property
    def findings(self) -> list[Output]:
        return [o for o in self.outputs if o.status == Status.DRIFT]

    def verdicts(self) -> list[Verdict]:
        return [o.verdict(self.margin) for o in self.outputs]

    def rule(self) -> str:
        """The rule in one sentence, as the report states it."""
        if self.between == "stacks":
            return (
                f"An output drifted between the stacks when it differs by more than "
                f"{self.margin:g}x the larger run-to-run noise of the two (where they differ, "
                "each stack computes them again, twice, in a fresh process); reported, not a "
                "failure."
            )
        return (f"Head's output is a drift finding when it differs from base's, on the same "
                f"inputs, seeds and stack, by more than {self.margin:g}x what base gives run to "
                "run (base computed again after head in the same process, where head moved); on "
                "a deterministic path that is 0 and any difference is a finding. Keep masks "
                "that differ are a finding by themselves.")  # fmt: skip


def margin_of(policies: Policies) -> float:
    margin = float(policies.gate.get("drift_margin", MARGIN))
    if not margin >= 1:
        raise ValueError(f"[gate] drift_margin must be at least 1, got {margin}")
    return margin


# --- running the outputs runner ----------------------------------------------------------


def run_outputs(arms: dict[str, Path], out: Path, *, mode: str = "quick", only: str | None = None,
                aa_where_moved: bool = False, python: Path | str | None = None,
                log: Callable[[str], None] = print) -> Outputs:  # fmt: skip
    """``benchmarks.support.outputs`` in a fresh process of ``python`` (default this one)."""
    args = ["--out", str(out), *(["--only", only] if only else []),
            *(["--aa-where-moved"] if aa_where_moved else [])]  # fmt: skip
    code, last = asv_run.runner("benchmarks.support.outputs", arms, args, mode=mode, python=python)
    if code != 0 or not out.is_file():
        raise DriftError(f"the outputs runner exited with {code}: {last or 'no message'}")
    log(last or "outputs: done")
    return Outputs(out)


def only_for(bench: list[str] | tuple[str, ...]) -> str | None:
    """The runner's ``--only`` for the gate's ``--bench`` patterns (asv's: a regex searched in
    the benchmark's name): the parts whose numerics benchmarks they select; None: all; ""
    where they select none."""
    if not bench:
        return None
    names = {part: [f"{n}.track_output_hash" for n in asv] for part, asv in PARTS.items()}
    parts = [p for p, ns in names.items() if any(re.search(b, n) for b in bench for n in ns)]
    return "^(" + "|".join(re.escape(p) for p in parts) + ") " if parts else ""


def head_against_base(f: Outputs, margin: float = MARGIN) -> DriftReport:
    """The arm head of one file against its arm base, the noise from its arm aa."""
    noise = [((f, "base"), (f, "aa"))]
    meta = f.meta
    return DriftReport(judge((f, "base"), (f, "head"), noise, margin), margin,
                       device=meta.get("device", ""), seconds=meta.get("seconds", 0.0))  # fmt: skip


def compare_trees(base: Path, head: Path, work: Path, *, margin: float = MARGIN,
                  mode: str = "quick", only: str | None = None, shown: tuple | None = None,
                  log: Callable[[str], None] = print) -> DriftReport:  # fmt: skip
    """Head's tree against base's (each holding ``ragged/``): the gate's comparison.
    ``shown``: the (base, head) paths its reproducing command names (default: these)."""
    t0 = time.perf_counter()
    out = work / "outputs.npz"
    arms = {"base": base, "head": head, "aa": base}
    f = run_outputs(arms, out, mode=mode, only=only, aa_where_moved=True, log=log)
    report = head_against_base(f, margin)
    report.seconds = time.perf_counter() - t0
    b, h = map(shlex.quote, map(str, shown or (base, head)))
    report.command = (f"RAGBENCH_MODE={mode} .venv/bin/python -m benchmarks.support.outputs "
                      f"--arm base={b} --arm head={h} --arm aa={b} "
                      + (f"--only {shlex.quote(only)} " if only else "")
                      + "--aa-where-moved --out outputs.npz && .venv/bin/python -m "
                      f"ragbench.gate.drift outputs.npz --margin {margin!r}")  # fmt: skip
    return report


def against_base(base: str, head: str, work: Path, *, margin: float = MARGIN,
                 mode: str = "quick", bench=(), log: Callable[[str], None] = print,
                 ) -> DriftReport:  # fmt: skip
    """The gate's step: the commits' trees checked out and compared (``compare_trees``);
    nothing to run where the two commits have the same ``ragged/`` (the runner and the stack
    are this checkout's for both: their outputs cannot differ), or where ``bench`` selects no
    numerics benchmark."""
    only = only_for(bench)
    if only == "":
        return DriftReport(margin=margin, skipped="--bench selects no numerics benchmark")
    try:
        trees = {git.run("rev-parse", f"{sha}:ragged") for sha in (base, head)}
    except git.GitError:
        why = "base or head is not in this clone (stored results of another), or has no ragged/"
        return DriftReport(margin=margin, skipped=f"{why}: outputs not compared")
    if len(trees) == 1:
        return DriftReport(margin=margin, skipped="base and head have the same ragged/ tree: "
                           "their outputs cannot differ")  # fmt: skip
    log(f"drift: head's outputs against base's ({mode} grid)")
    shown = (f"../drift-base-{base[:8]}", f"../drift-head-{head[:8]}")
    with contextlib.ExitStack() as stack:
        b = stack.enter_context(git.worktree(base, work, prefix="drift"))
        h = stack.enter_context(git.worktree(head, work, prefix="drift"))
        report = compare_trees(b, h, work, margin=margin, mode=mode, only=only, shown=shown,
                               log=log)  # fmt: skip
    report.command = (f"git worktree add --detach {shown[0]} {base[:12]} && git worktree add "
                      f"--detach {shown[1]} {head[:12]} && {report.command}")  # fmt: skip
    return report


def compare_stacks(commit: str, pythons: dict[str, Path], work: Path, *,
                   margin: float = MARGIN, mode: str = "quick", bench=(),
                   log: Callable[[str], None] = print) -> DriftReport:  # fmt: skip
    """``ragbench versions``: ``commit`` computed by the Python of each stack (``pythons``:
    ``base``, the stack upgraded from, and ``head``), the parts ``bench`` selects
    (``only_for``). Where the two differ, each stack computes those cells again, twice (base
    and aa), in a fresh process: its run-to-run noise within and across processes."""
    only = only_for(bench)
    if only == "":
        return DriftReport(margin=margin, between="stacks",
                           skipped="--bench selects no numerics benchmark")  # fmt: skip
    t0 = time.perf_counter()
    sides = ("base", "head")
    with git.worktree(commit, work, prefix="drift") as src:
        first = [run_outputs({"base": src}, work / f"outputs-{s}.npz", mode=mode, only=only,
                             python=pythons[s], log=log) for s in sides]  # fmt: skip
        moved = [key for key in first[0].cells if _moved(first[0], first[1], key)]
        again = None
        if moved:
            cells = "^(" + "|".join(re.escape(f"{b} {k}") for b, k in moved) + ")$"
            twice = {"base": src, "aa": src}
            again = [run_outputs(twice, work / f"again-{s}.npz", mode=mode, only=cells,
                                 python=pythons[s], log=log) for s in sides]  # fmt: skip
    report = between_stacks(*first, margin=margin, again=again)
    report.seconds = time.perf_counter() - t0
    run = "-m benchmarks.support.outputs --arm base=SRC --arm aa=SRC " + (
        f"--only {shlex.quote(only)} " if only else "") + "--out"  # fmt: skip
    report.command = (f"git worktree add SRC {commit[:12]} && RAGBENCH_MODE={mode} "
                      f"{pythons['base']} {run} A.npz && RAGBENCH_MODE={mode} "
                      f"{pythons['head']} {run} B.npz && .venv/bin/python -m "
                      f"ragbench.gate.drift A.npz B.npz --margin {margin!r}")  # fmt: skip
    return report


def _moved(a: Outputs, b: Outputs, key) -> bool:
    """Whether the base arms of ``a`` and ``b`` both computed cell ``key`` and differ."""
    x, y = a.arrays(key, "base"), b.arrays(key, "base")
    return bool(x and y) and any(difference(m, x[m], y[m]) is not None for m in x if m in y)


def between_stacks(a: Outputs, b: Outputs, *, margin: float = MARGIN,
                   again: list[Outputs] | None = None) -> DriftReport:  # fmt: skip
    """Stack B's outputs (arm base) against stack A's, judged against each stack's run-to-run
    noise: its file's aa arm, or ``again`` (each stack's base and aa from a second process)
    and how far that second process moved from the first."""
    if again is None:
        noise = [((a, "base"), (a, "aa")), ((b, "base"), (b, "aa"))]
    else:
        noise = []
        for first, second in zip((a, b), again, strict=True):
            noise += [((second, "base"), (second, "aa")), ((first, "base"), (second, "base"))]
    outputs = judge((a, "base"), (b, "base"), noise, margin)
    device = a.meta.get("device", "")
    files = " ".join(shlex.quote(str(o.path)) for o in (a, b))
    command = f".venv/bin/python -m ragbench.gate.drift {files} --margin {margin!r}"
    return DriftReport(outputs, margin, between="stacks", device=device, command=command)


def drift_section(d) -> list[str]:
    """A ``DriftReport`` as markdown (the gate's report, ``ragbench versions``, this module's
    command line): which outputs moved against base (or between two stacks), by
    how much, the run-to-run noise, the rule, and the command that reproduces it."""
    if d is None:
        return []
    title = ("Numeric drift between the stacks" if d.between == "stacks"
             else "Outputs against base (numeric drift)")  # fmt: skip
    lines = ["", f"### {title}", ""]
    if d.skipped:
        return [*lines, f"Not compared: {d.skipped}."]
    moved = [o for o in d.outputs if o.moved is not None]
    failed = [o for o in d.outputs if o.status == Status.FAILED]
    lines += [
        f"{len(d.outputs)} outputs compared ({d.device}, {d.seconds:.0f} s): "
        f"{len(d.outputs) - len(moved) - len(failed)} identical bit for bit, "
        f"{len(moved) - len(d.findings)} moved within run-to-run noise, "
        f"{len(d.findings)} drift finding(s), {len(failed)} failed on head.",
        "",
        d.rule(),
    ]
    if moved or failed:
        lines += ["", "| output | status | how far it moved | run-to-run noise |",
                  "|---|---|---|---|"]  # fmt: skip
        for o in [*moved, *failed]:
            what = o.moved.describe(o.metric) if o.moved else o.note
            noise = _noise(o.noise)
            lines.append(f"| `{o.benchmark}.{o.metric}` {o.key[2]} | {o.status} | {what} | "
                         f"{noise} |")  # fmt: skip
    return [*lines, "", f"Reproduce: `{d.command}`"] if d.command else lines


def _noise(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "-"
    return "inf" if math.isinf(x) else f"{x:.3g}"


# --- the command line (ragbench.gate.drift as a module) ----------------------------------------


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", type=Path, nargs="+", metavar="FILE",
                    help="one file (head against base), or two (stack B against A)")  # fmt: skip
    ap.add_argument("--margin", type=float, default=MARGIN, help="times the run-to-run noise")
    args = ap.parse_args(argv)
    try:
        if len(args.files) > 2:
            raise ValueError("one file, or two (stack A, stack B)")
        files = [Outputs(p) for p in args.files]
        if len(files) == 1:
            f = files[0]
            if not {"base", "head"} <= set(f.meta.get("arms", {})):
                raise ValueError(f"{f.path} has no arms base and head: give two stacks' files")
            report = head_against_base(f, args.margin)
        else:
            report = between_stacks(*files, margin=args.margin)
    except (DriftError, ValueError) as exc:
        print(f"drift: error: {exc}", file=sys.stderr)
        return 2
    print("\n".join(drift_section(report)))
    return 1 if report.findings or any(o.status == Status.FAILED for o in report.outputs) else 0


if __name__ == "__main__":
    sys.exit(main())
