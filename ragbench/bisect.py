"""Bisection: the first release between two stacks, or the first commit of a range, that
shows a change of one cell.

    ragbench versions --bisect 'cpu.Pipeline.img_per_s batch=1,pipeline=triton' \\
        --between torch==2.12.1 torch==2.15.0

The two specs differ in the pinned version (``==``) of one package and in nothing else. The
candidates are that package's final releases strictly between the two (``pip index
versions``, the registry pip is configured with; local builds such as ``+cpu`` left out). A
step measures the commit under the first stack and under a candidate, alternating, and judges
the candidate with the gate's rules (``ragbench versions``' measurement); the candidate shows
the change when the cell's verdict fails (regression, bound violation, failed, missing). The
second stack must show it first, else there is nothing to look for. Then a binary search, which
assumes, as ``git bisect`` does, that once a release shows the change every later one does: a
candidate that cannot be installed or run is skipped and reported, as ``git bisect skip``.

    ragbench bisect --cell 'kernel.KernelLatency.gpu_us backend=triton,...' --good A --bad B

The candidates are the commits B has and A has not (the branch a merge brought in, a batch of
pushes measured once), oldest first. A step gates the candidate against A as ``ragbench gate``
does, on the cell's benchmark only and paired where its metric is (as ``asv find`` searches,
but by the gate's rules); the candidate shows the change when the cell's verdict fails.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from . import envs
from .compare import Key
from .policies import Policies
from .verdicts import FAILING


class BisectError(RuntimeError):
    """Input that cannot be bisected (exit 2)."""


@dataclass
class Step:
    spec: str
    shows: bool | None  # None: the candidate could not be built or run (skipped)
    note: str


@dataclass
class Bisection:
    package: str
    candidates: list[str]
    steps: list[Step] = field(default_factory=list)
    first: str | None = None  # the first spec that shows it; None: the to-stack does not


def parse_cell(text: str) -> Key:
    """``"benchmark.metric params"`` (as the gate's report names a cell) -> its key."""
    name, _, params = text.strip().partition(" ")
    benchmark, _, metric = name.rpartition(".")
    if not benchmark or not metric or "." not in benchmark:
        raise BisectError(
            f"--bisect {text!r}: expected 'benchmark.metric params', e.g. "
            "'cpu.KernelError.max_abs_err dtype=float16' (as the report names it)"
        )
    return (benchmark, metric, params.strip())


def differing(from_spec: str, to_spec: str) -> tuple[str, Version, Version]:
    """The one package whose ``==`` pin the two specs change -> (name, from, to)."""
    a, b = (
        {Requirement(r).name.lower(): Requirement(r) for r in envs.requirements(s)}
        for s in (from_spec, to_spec)
    )
    changed = sorted(n for n in a.keys() | b.keys() if str(a.get(n)) != str(b.get(n)))
    if not changed:
        raise BisectError(
            f"--between {from_spec} {to_spec}: the two are the same stack, nothing lies between: "
            "pass the stack without the change, then the one with it (one == pin differs)"
        )
    if len(changed) != 1 or changed[0] not in a or changed[0] not in b:
        raise BisectError(
            f"--between {from_spec} {to_spec}: the specs must pin the same "
            f"packages and differ in one (they differ in {', '.join(changed) or 'none'})"
        )
    name = changed[0]
    pins = [_pin(r) for r in (a[name], b[name])]
    if None in pins:
        raise BisectError(f"--between: pin {name} with == on both sides, e.g. {name}==X.Y.Z")
    if pins[0] == pins[1]:
        raise BisectError(
            f"--between: {name} {pins[0]} and {pins[1]} are the same release: "
            "pass the release without the change, then the one with it"
        )
    if pins[0] > pins[1]:
        raise BisectError(
            f"--between: {name} {pins[0]} is not older than {pins[1]}: pass the older stack "
            f"first (--between {to_spec} {from_spec})"
        )
    return name, pins[0], pins[1]


def _pin(req: Requirement) -> Version | None:
    specs = list(req.specifier)
    if len(specs) != 1 or specs[0].operator not in ("==", "==="):
        return None
    try:
        return Version(specs[0].version)
    except InvalidVersion:
        return None


def releases(name: str, low: Version | None = None, high: Version | None = None,
             listing: str | None = None) -> list[str]:  # fmt: skip
    """Final releases of ``name`` strictly between ``low`` and ``high`` (None: unbounded),
    oldest first (``listing``: ``pip index versions``' output, for tests)."""
    if listing is None:
        out = subprocess.run(
            [sys.executable, "-m", "pip", "index", "versions", name, "--disable-pip-version-check"],
            capture_output=True,
            text=True,
        )
        if out.returncode != 0:
            raise BisectError(f"pip index versions {name}: {out.stderr.strip()[-300:]}")
        listing = out.stdout
    line = next((ln for ln in listing.splitlines() if ln.startswith("Available versions:")), "")
    found = set()
    for v in line.partition(":")[2].split(","):
        try:
            found.add(Version(v.strip()))
        except InvalidVersion:
            continue
    return [
        str(v)
        for v in sorted(found)
        if (low is None or v > low)
        and (high is None or v < high)
        and not (v.is_prerelease or v.is_devrelease or v.local)
    ]


def newest(name: str, listing: str | None = None) -> str:
    """``name==X``: the newest final release on the registry."""
    found = releases(name, listing=listing)
    if not found:
        raise BisectError(f"pip index versions {name}: no final release listed")
    return f"{name}=={found[-1]}"


def candidate_spec(from_spec: str, name: str, version: str) -> str:
    """``from_spec`` with ``name`` pinned to ``version`` instead."""
    reqs = [
        r if Requirement(r).name.lower() != name else f"{name}=={version}"
        for r in envs.requirements(from_spec)
    ]
    return ",".join(reqs)


def bisect(
    from_spec: str,
    to_spec: str,
    shows: Callable[[str], tuple[bool, str]],
    listing: str | None = None,
    log: Callable[[str], None] = print,
) -> Bisection:
    """Search the releases between the two stacks; ``shows(spec)`` -> (whether the cell
    changed against ``from_spec``, a note), raising ``envs.EnvError`` for a stack that cannot
    be built or run."""
    name, low, high = differing(from_spec, to_spec)
    specs = [candidate_spec(from_spec, name, v) for v in releases(name, low, high, listing)]
    b = Bisection(name, list(specs))
    log(f"bisect: {len(specs)} {name} release(s) between {low} and {high}")
    b.first = search(specs, to_spec, shows, b.steps, envs.EnvError, log)
    return b


def search(candidates: list[str], last: str, shows: Callable[[str], tuple[bool, str]],
           steps: list[Step], skip: type[Exception] | tuple = (),
           log: Callable[[str], None] = print) -> str | None:  # fmt: skip
    """The first of ``candidates`` (oldest first), else ``last``, that ``shows`` the change;
    None where ``last`` does not (its exception is the caller's: unusable input). Binary
    search, assuming (as ``git bisect`` does) that once one shows it every later one does; a
    candidate whose ``shows`` raises ``skip`` is skipped (``git bisect skip``). Each step
    measured is appended to ``steps``."""
    hit, note = shows(last)
    steps.append(Step(last, hit, note))
    if not hit:
        return None
    candidates = list(candidates)
    lo, hi = -1, len(candidates)  # candidates[lo] does not show it (-1: the good end), [hi] does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        log(f"bisect: {candidates[mid]} ({hi - lo - 1} candidate(s) left)")
        try:
            hit, note = shows(candidates[mid])
        except skip as exc:
            steps.append(Step(candidates[mid], None, str(exc)))
            del candidates[mid]
            hi -= 1
            continue
        steps.append(Step(candidates[mid], hit, note))
        lo, hi = (lo, mid) if hit else (mid, hi)
    return candidates[hi] if hi < len(candidates) else last


def commits_between(good: str, bad: str) -> list[str]:
    """The commits ``bad`` has and ``good`` has not, oldest first, ``bad`` last: what a merge
    brought in (a --no-ff merge's branch, a batch of pushes measured once). BisectError where
    ``good`` is no ancestor of ``bad``."""
    from . import suite

    try:
        good, bad = suite.resolve([good, bad])
        suite.git("merge-base", "--is-ancestor", good, bad)
    except suite.SuiteError as exc:
        raise BisectError(f"--good {good[:12]} must be an ancestor of --bad {bad[:12]}: "
                          f"{str(exc)[-200:]}") from None  # fmt: skip
    found = suite.git("rev-list", "--reverse", "--topo-order", f"{good}..{bad}").split()
    if not found:
        raise BisectError(f"--good {good[:12]} and --bad {bad[:12]} are the same commit")
    return found


def commit_markdown(cell: str, good: str, candidates: list[str], steps: list[Step],
                    first: str | None, seconds: float) -> str:  # fmt: skip
    """The commit bisection's report: each commit measured against ``good``, the first bad."""
    lines = [f"## ragbench bisect: `{cell}`", "",
             f"{len(candidates)} commit(s) after `{good[:12]}` up to `{candidates[-1][:12]}`, "
             "each gated against it (the gate's rules; paired where the metric is).", "",
             "| commit | against the good one | verdict, or why it was skipped |",
             "|---|---|---|"]  # fmt: skip
    for s in steps:
        word = "skipped" if s.shows is None else "shows it" if s.shows else "does not show it"
        lines.append(f"| `{s.spec[:12]}` | {word} | {s.note.replace('|', chr(92) + '|')} |")
    lines.append("")
    if first is None:
        lines.append(f"`{candidates[-1][:12]}` does not show a change of this cell against "
                     f"`{good[:12]}`: nothing to bisect.")  # fmt: skip
    else:
        lines.append(f"First bad commit: `{first}` ({len(steps)} commit(s) measured in "
                     f"{seconds / 60:.1f} min). See it: `git show {first[:12]}`.")  # fmt: skip
    return "\n".join(lines)


def markdown(b: Bisection, cell: str, from_spec: str, to_spec: str) -> str:
    lines = [
        f"## ragbench versions --bisect: `{cell}`",
        "",
        f"{len(b.candidates)} {b.package} release(s) between `{from_spec}` and `{to_spec}`: "
        f"{', '.join(c.split('==')[-1] for c in b.candidates) or 'none'}.",
        "",
        "| stack | against the first stack | verdict, or why it was skipped |",
        "|---|---|---|",
    ]
    for s in b.steps:
        word = "skipped" if s.shows is None else "shows it" if s.shows else "does not show it"
        note = s.note.replace("|", "\\|")  # pip's and Python's last lines, joined by " | "
        lines.append(f"| `{s.spec}` | {word} | {note} |")
    lines.append("")
    if b.first is None:
        lines.append(f"`{to_spec}` does not show a change of this cell: nothing to bisect.")
    else:
        lines.append(
            f"First release that shows it: `{b.first}` ({len(b.steps)} stack(s) measured)."
        )
    return "\n".join(lines)


def commit_bisect(store, cell: str, good: str, bad: str, *, policies: Policies,
                  machine: str, mode: str = "quick", rounds: int | None = None,
                  paired_processes: int = 3, log: Callable[[str], None] = print,
                  ) -> tuple[list[str], list[Step], str | None]:  # fmt: skip
    """The first commit after ``good`` up to ``bad`` whose gate against ``good`` fails on
    ``cell`` -> (the candidates, the steps, the first bad one or None where ``bad`` does not
    show it)."""
    import re

    from . import gate, suite

    key = parse_cell(cell)
    policy = policies.for_metric(key[0], key[1])
    if policy.kind == "info":
        raise BisectError(f"{cell!r} is shown, not judged (policy info, or no such metric): no "
                          "commit can change its verdict")  # fmt: skip
    candidates = commits_between(good, bad)
    good = gate._resolve(good)
    log(f"bisect: {len(candidates)} commit(s) after {good[:12]} up to {candidates[-1][:12]}")

    def shows(sha: str) -> tuple[bool, str]:
        result = gate.run_gate(
            store, good, sha, policies=policies, machine=machine, rounds=rounds, mode=mode,
            bench=[f"^{re.escape(key[0])}\\."], drift_check=False, log=log,
            paired_processes=paired_processes if policy.paired else 0,
        )  # fmt: skip
        v = next((v for v in result.comparison.verdicts if v.key == key), None)
        if v is None:
            raise BisectError(f"no cell {cell!r} in {key[0]}'s results (name it as the gate's "
                              "report does: 'benchmark.metric params')")  # fmt: skip
        change = f" {v.change:+.1%}" if v.change is not None else ""
        return v.status in FAILING, f"{v.status}{change}" + (f": {v.note}" if v.note else "")

    steps: list[Step] = []
    skip = (gate.GateError, suite.SuiteError)  # a commit that cannot be built or run
    first = search(candidates[:-1], candidates[-1], shows, steps, skip, log)
    return candidates, steps, first
