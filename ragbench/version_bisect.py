"""Version bisection: the first release between two stacks that shows a change of one
cell, and the binary search it shares with the commit bisection (``ragbench.bisect_commits``).

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
candidate that cannot be installed or run is skipped and reported, as ``git bisect skip``;
where skipped candidates leave the first one open, every one that may be it is named.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from . import envs
from .verdicts.comparison import Key


class BisectError(RuntimeError):
    """Input that cannot be bisected (exit 2)."""


@dataclass
class Step:
    spec: str
    shows: bool | None  # None: the candidate could not be built or run (skipped)
    note: str
    base: str = ""  # what it was measured against (the commit bisection: a base it contains)


@dataclass
class Bisection:
    package: str
    candidates: list[str]
    steps: list[Step] = field(default_factory=list)
    possible: list[str] = field(default_factory=list)  # ``search``'s answer

    @property
    def first(self) -> str | None:
        """The first spec that shows it; None where the to-stack does not, or where skipped
        candidates leave several possible."""
        return self.possible[0] if len(self.possible) == 1 else None


def parse_cell(text: str, flag: str = "--bisect") -> Key:
    """``"benchmark.metric params"`` (``discovery.cell_text``) of this suite (its benchmarks
    are ``module.Class``) -> its key; BisectError, one line, where it is not one."""
    from .discovery import CellError
    from .discovery import parse_cell as parse

    try:
        key = parse(text, flag)
    except CellError as exc:
        raise BisectError(str(exc)) from None
    if "." not in key[0]:
        raise BisectError(f"{flag} {text!r}: expected 'benchmark.metric params' of this suite, "
                          "e.g. 'cpu.KernelError.max_abs_err dtype=float16'")  # fmt: skip
    return key


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
    b.possible = search(specs, to_spec, shows, b.steps, envs.EnvError, log)
    return b


def search(candidates: list[str], last: str, shows: Callable[[str], tuple[bool, str]],
           steps: list[Step], skip: type[Exception] | tuple = (),
           log: Callable[[str], None] = print, last_step: Step | None = None,
           ) -> list[str]:  # fmt: skip
    """Which of ``candidates`` (oldest first), else ``last``, is the first that ``shows``
    the change -> one where the search names it; several where skipped candidates leave it
    open (each may be the first, as ``git bisect`` says when only skipped commits are left to
    test); none where ``last`` does not show it. ``last`` is measured first (what it raises
    is the caller's: unusable input), unless ``last_step`` is its step already measured.
    Binary search, assuming (as ``git bisect`` does) that once one shows it every later one
    does; a candidate whose ``shows`` raises ``skip`` is skipped (``git bisect skip``) and
    the one nearest the middle of what is left is measured instead. Each step measured is
    appended to ``steps``."""
    if last_step is None:
        hit, note = shows(last)
        steps.append(Step(last, hit, note))
    else:
        hit = last_step.shows
    if not hit:
        return []
    lo, hi = -1, len(candidates)  # candidates[lo] does not show it (-1: the good end), [hi] does
    skipped: set[int] = set()
    while True:
        left = [i for i in range(lo + 1, hi) if i not in skipped]
        if not left:
            break
        middle = (lo + hi) / 2
        mid = min(left, key=lambda i: (abs(i - middle), i))
        log(f"bisect: {candidates[mid][:40]} ({hi - lo - 1} candidate(s) left)")
        try:
            hit, note = shows(candidates[mid])
        except skip as exc:
            log(f"bisect: skipped {candidates[mid][:40]}: {exc}")
            steps.append(Step(candidates[mid], None, str(exc)))
            skipped.add(mid)
            continue
        steps.append(Step(candidates[mid], hit, note))
        lo, hi = (lo, mid) if hit else (mid, hi)
    ends = [*candidates, last]
    return [ends[i] for i in range(lo + 1, hi) if i in skipped] + [ends[hi]]


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
    if not b.possible:
        lines.append(f"`{to_spec}` does not show a change of this cell: nothing to bisect.")
    elif b.first is None:
        lines.append(f"Skipped stacks leave the first release that shows it open: any of "
                     f"{', '.join(f'`{s}`' for s in b.possible)} ({len(b.steps)} stack(s) "
                     "measured).")  # fmt: skip
    else:
        lines.append(
            f"First release that shows it: `{b.first}` ({len(b.steps)} stack(s) measured)."
        )
    return "\n".join(lines)
