"""Version bisect: the first release between two stacks that shows a change of one cell.

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
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass, field

from packaging.requirements import Requirement
from packaging.version import InvalidVersion, Version

from . import detect, envs


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


def parse_cell(text: str) -> detect.Key:
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
    hit, note = shows(to_spec)  # an EnvError here is unusable input: the caller's exit 2
    b.steps.append(Step(to_spec, hit, note))
    if not hit:
        return b
    lo, hi = -1, len(specs)  # specs[lo] does not show it (from_spec at -1), specs[hi] does
    while hi - lo > 1:
        mid = (lo + hi) // 2
        log(f"bisect: {specs[mid]} ({hi - lo - 1} candidate(s) left)")
        try:
            hit, note = shows(specs[mid])
        except envs.EnvError as exc:
            b.steps.append(Step(specs[mid], None, str(exc)))
            del specs[mid]
            hi -= 1
            continue
        b.steps.append(Step(specs[mid], hit, note))
        lo, hi = (lo, mid) if hit else (mid, hi)
    b.first = specs[hi] if hi < len(specs) else to_spec
    return b


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
