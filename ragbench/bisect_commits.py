"""Commit bisection: the first commit between a good and a bad one that shows a cell's step.

    ragbench bisect --cell 'kernel.KernelLatency.gpu_us backend=triton,...' --good A --bad B

Checked before anything is measured (``BisectError``, exit 2): the cell is one the suite has
in the grid mode (``discovery.check_cell``: asv's own discovery), its metric is judged, A and
B are two commits, A an ancestor of B on B's first-parent line (one a merge brought is not:
the line from it would leave out what came before the merge), and more than one commit lies
between them (or B is a merge).

Then, as ``git bisect`` does across a merge, the first-parent line first: the commits of
``git rev-list --first-parent --ancestry-path A..B`` (each contains A), oldest first, B
measured first (it must show the step, else there is nothing to look for), then a binary
search (``bisect.search``) gating each against A. Where the first bad commit of that line is
a merge, its merged branch is searched the same way, each branch commit gated against the
merge-base (a base it contains, where A, the merge's first parent, holds main's commits that
the branch lacks); where none of them shows it, the merge itself is the first bad commit
(the two sides together bring it). A merge found on that branch is searched in turn. A
branch that merged other history in (main, say) holds commits its first-parent line from the
merge-base does not reach: none of them is named, every commit the merge brings may be it
(``git bisect`` searches such a graph, this search does not).

A step measures the cell alone: asv ``--bench`` with ``discovery.bench_regex`` (the cell's
benchmark and params), or, where its metric is ``paired``, the paired runner's ``--only``
(``benchmarks.support.paired``: base, A/A and head in each of ``processes`` processes, the base
loaded beside each candidate as the paired design needs). With asv, each base (A, a
merge-base) is measured once, ``rounds`` runs, and each candidate ``rounds`` runs judged
against those samples by the gate's rules (``compare.compare``). A candidate shows the step
where the verdict is a regression or a bound violation; an inconclusive one is measured once
more (its samples pooled). A commit that cannot be measured (it does not build or import,
the benchmark raised, the cell has no value there, or it stays inconclusive) is skipped and
reported, as ``git bisect skip``; where skips leave the first bad commit open, each commit
that may be it is named. A base that cannot be measured is unusable input.
"""

from __future__ import annotations

import contextlib
import itertools
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from . import asv_run, discovery, git
from .gate import paired
from .policies import Policies
from .verdicts import comparison as compare
from .verdicts.comparison import Cell, Key, Verdict
from .verdicts.status import Status
from .version_bisect import BisectError, Step, parse_cell, search

SHOWS = (Status.REGRESSION, Status.VIOLATION)  # the step, by the gate's rules
UNMEASURED = (Status.FAILED, Status.MISSING)  # no value: the commit is skipped


class Unmeasurable(RuntimeError):
    """A candidate whose cell could not be measured: skipped (``git bisect skip``)."""


class BaseUnmeasurable(BisectError):
    """A base (the good commit, a merge-base) whose cell could not be measured."""


# (commit) -> the cells of one asv run of it on the cell's --bench; SuiteError etc. inside
RunAsv = Callable[[str], dict[Key, Cell]]
# (base commit, head commit, the paired runner's --only) -> (method, documents)
RunPaired = Callable[[str, str, str], tuple[str, list[dict]]]


@dataclass
class Branch:
    """A merge's branch searched against its merge-base."""

    merge: str
    base: str
    candidates: list[str]


@dataclass
class CommitBisection:
    cell: str
    good: str
    bad: str
    line: list[str]  # the first-parent commits after good up to bad, oldest first
    steps: list[Step] = field(default_factory=list)
    possible: list[str] = field(default_factory=list)  # ``search``'s answer, merges resolved
    branches: list[Branch] = field(default_factory=list)
    measured: list[str] = field(default_factory=list)  # one line a measurement
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def first(self) -> str | None:
        """The first bad commit; None where bad does not show the step or skips leave
        several possible."""
        return self.possible[0] if len(self.possible) == 1 else None


# --- the commits -----------------------------------------------------------------------------


def resolve(ref: str, flag: str) -> str:
    """A revision's full hash; BisectError, one line, for one this clone lacks or a range."""
    if git.is_range(ref):
        raise BisectError(f"{flag} {ref!r} is a range: pass one commit")
    try:
        return git.commit(ref)
    except git.GitError:
        raise BisectError(
            f"{flag} {ref!r} is not a commit of this clone (of another asv "
            "project: pass --config, its asv.conf.json)"
        ) from None


def commits_between(good: str, bad: str) -> list[str]:
    """The first-parent line from ``good`` (exclusive) to ``bad``, oldest first: BisectError,
    one line, where it cannot be bisected (the same commit, ``good`` no ancestor of ``bad``,
    or ``bad`` the one commit after ``good`` and no merge: it is the one)."""
    g, b = resolve(good, "--good"), resolve(bad, "--bad")
    if g == b:
        raise BisectError(f"--good {good} and --bad {bad} are the same commit {g[:12]}: pass "
                          "a commit without the step as --good (the alert's) and one with it "
                          "as --bad")  # fmt: skip
    try:
        git.run("merge-base", "--is-ancestor", g, b)
    except git.GitError:
        raise BisectError(f"--good {good} ({g[:12]}) must be an ancestor of --bad {bad} "
                          f"({b[:12]})") from None  # fmt: skip
    line = git.first_parent_line(g, b)
    # g came in through a merge: the line skips what is before it (or, where the merge's
    # second parent leads to g, git's first-parent ancestry path holds nothing)
    if not line or git.parents(line[0])[0] != g:
        raise BisectError(f"--good {good} ({g[:12]}) is not on the first-parent line of --bad "
                          f"{bad} (a merge brought it): pass a commit of that line as --good "
                          f"(git rev-list --first-parent {b[:12]})")  # fmt: skip
    if line == [b] and len(git.parents(b)) < 2:
        raise BisectError(f"no commits between --good {g[:12]} and --bad {b[:12]}: {b[:12]} is "
                          f"the one commit after it (gate it: ragbench gate --base {g[:12]} "
                          f"--head {b[:12]})")  # fmt: skip
    return line


# --- what a step measures --------------------------------------------------------------------


class Ruler:
    """A step's measurement of the cell alone, a commit against a base it contains (see the
    module): ``shows(base, sha)`` -> (whether it shows the step, the verdict in words),
    Unmeasurable for a commit skipped, BaseUnmeasurable for a base."""

    def __init__(self, key: Key, policies: Policies, *, rounds: int, processes: int,
                 run_asv: RunAsv, run_paired: RunPaired,
                 log: Callable[[str], None] = print):  # fmt: skip
        self.key, self.policies, self.rounds, self.processes = key, policies, rounds, processes
        self.policy = policies.for_metric(key[0], key[1])
        self.run_asv, self.run_paired, self.log = run_asv, run_paired, log
        self.bases: dict[str, Cell] = {}
        self.measured: list[str] = []
        self.only = paired.only_of([key])

    def shows(self, base: str, sha: str) -> tuple[bool, str]:
        v = self.verdict(base, sha)
        if v.status in UNMEASURED:
            raise Unmeasurable(f"{v.status}: {v.note}" if v.note else str(v.status))
        if v.status == Status.NEW:
            raise BaseUnmeasurable(f"the base {base[:12]} has no value of {self.cell()}"
                                   + (f" ({v.note})" if v.note else ""))  # fmt: skip
        if v.status == Status.INCONCLUSIVE:
            raise Unmeasurable(f"inconclusive after a second measurement: {v.note}")
        change = f" {v.change:+.1%}" if v.change is not None else ""
        return v.status in SHOWS, f"{v.status}{change}" + (f": {v.note}" if v.note else "")

    def cell(self) -> str:
        return f"{self.key[0]}.{self.key[1]} {self.key[2]}".strip()

    def verdict(self, base: str, sha: str) -> Verdict:
        if self.policy.paired:
            return self._paired(base, sha)
        cell = self.base_cell(base)
        runs = [self._asv(sha, f"{sha[:12]} run {r + 1}/{self.rounds}")
                for r in range(self.rounds)]  # fmt: skip
        v = self._judge(cell, runs)
        if v.status == Status.INCONCLUSIVE:  # once more, and the base's kept samples grow
            runs.append(self._asv(sha, f"{sha[:12]} once more (inconclusive)"))
            again = self._asv(base, f"base {base[:12]} once more (a step was inconclusive)")
            if self.key in again and not again[self.key].failures:
                cell = self.bases[base] = compare.pool([cell, again[self.key]])[self.key]
            v = self._judge(cell, runs)
        return v

    def base_cell(self, base: str) -> Cell:
        """The base's samples of the cell, measured once (``rounds`` runs) and kept."""
        if base not in self.bases:
            try:
                runs = [self._asv(base, f"base {base[:12]} run {r + 1}/{self.rounds}")
                        for r in range(self.rounds)]  # fmt: skip
            except Unmeasurable as exc:
                raise BaseUnmeasurable(f"the base {base[:12]} cannot be measured: {exc}") from None
            cell = compare.pool(c for run in runs for c in run.values()).get(self.key)
            absent = sum(self.key not in run for run in runs)
            if cell is None or cell.failures or absent or not cell.samples:
                why = (f"it raised in {cell.failures} run(s)" if cell and cell.failures else
                       f"no value in {absent} of {len(runs)} run(s)")  # fmt: skip
                raise BaseUnmeasurable(f"the base {base[:12]} has no value of {self.cell()}: "
                                       f"{why}")  # fmt: skip
            self.bases[base] = cell
        return self.bases[base]

    def _asv(self, sha: str, what: str) -> dict[Key, Cell]:
        self.measured.append(f"asv: {what}")
        self.log(f"bisect: asv, {what}")
        return {k: c for k, c in self.run_asv(sha).items() if k == self.key}

    def _judge(self, base: Cell, runs: list[dict[Key, Cell]]) -> Verdict:
        head = compare.pool(c for run in runs for c in run.values())
        if self.key in head:
            # a run without a row of the cell has no value there (NaN, skipped)
            head[self.key].absent += sum(self.key not in run for run in runs)
        v = compare.compare({self.key: base}, head, self.policies).verdicts
        return next(x for x in v if x.key == self.key)

    def _paired(self, base: str, sha: str) -> Verdict:
        docs: list[dict] = []
        for attempt in (1, 2):
            what = f"{base[:12]} and {sha[:12]}, {self.processes} paired process(es)"
            self.measured.append(f"paired: {what}")
            self.log(f"bisect: paired, {what}")
            try:
                method, more = self.run_paired(base, sha, self.only)
            except (paired.PairedError, asv_run.SuiteError, git.GitError) as exc:
                raise Unmeasurable(str(exc)[-300:]) from None
            if attempt == 2 and method == paired.TOGETHER:
                judged = paired.second_look(docs, more, [self.key], self.policies,
                                            self.processes)  # fmt: skip
            else:
                docs += more
                judged = paired.judge(paired.collect(docs), self.policies, method,
                                      self.processes * attempt)  # fmt: skip
            v = next((x for x in judged if x.key == self.key), None)
            if v is None:
                raise Unmeasurable("the paired runner measured no value of it")
            if v.status != Status.INCONCLUSIVE:
                return v
        return v


# --- the search ------------------------------------------------------------------------------


def locate(b: CommitBisection, ruler: Ruler, log: Callable[[str], None] = print) -> None:
    """The first bad commit of ``b``'s range into ``b.possible`` (see the module)."""
    good = b.good

    def against(base: str) -> Callable[[str], tuple[bool, str]]:
        def shows(sha: str) -> tuple[bool, str]:
            return ruler.shows(base, sha)

        return shows

    if not ruler.policy.paired:
        ruler.base_cell(good)  # before bad: BaseUnmeasurable is unusable input
    try:
        b.possible = search(b.line[:-1], b.line[-1], against(good), b.steps, Unmeasurable, log)
    except Unmeasurable as exc:
        raise BisectError(f"--bad {b.bad[:12]} cannot be measured on {b.cell}: {exc}") from None
    for s in b.steps:
        s.base = s.base or good
    while len(b.possible) == 1 and len(git.parents(b.possible[0])) > 1:
        merge = b.possible[0]
        first, *others = git.parents(merge)
        known = next(s for s in b.steps if s.spec == merge)
        for other in others:
            base = git.run("merge-base", first, other)
            branch = git.first_parent_line(base, other)
            if not branch:
                continue
            brought = git.run("rev-list", "--reverse", f"{first}..{other}").split()
            if set(brought) != set(branch):  # the branch merged other history in
                b.notes.append(f"The branch that `{merge[:12]}` merges holds commits its "
                               f"first-parent line from the merge-base `{base[:12]}` does not "
                               "reach (it merged other history in): they are not searched "
                               "one against the merge-base, and any of them may bring the "
                               f"step; search them with git bisect ({len(brought)} "
                               "commit(s)).")  # fmt: skip
                b.possible = [*brought, merge]
                return
            b.branches.append(Branch(merge, base, branch))
            log(f"bisect: {merge[:12]} is a merge: its branch of {len(branch)} commit(s), "
                f"each against the merge-base {base[:12]}")  # fmt: skip
            before = len(b.steps)
            try:
                if not ruler.policy.paired:
                    ruler.base_cell(base)
                found = search(branch, merge, against(base), b.steps, Unmeasurable, log,
                               last_step=known)  # fmt: skip
            except BaseUnmeasurable as exc:
                b.notes.append(f"The branch of `{merge[:12]}` was not searched: {exc}.")
                b.possible = [*branch, merge]
                return
            for s in b.steps[before:]:
                s.base = base
            if found != [merge]:
                b.possible = found
                break
        else:
            b.notes.append(f"`{merge[:12]}` is a merge and no commit of its branch shows the "
                           "step against the merge-base: the merge itself brings it.")  # fmt: skip
            return


def commit_bisect(store, cell: str, good: str, bad: str, *, policies: Policies,
                  machine: str, mode: str = "quick", rounds: int = 1,
                  paired_processes: int = paired.PROCESSES,
                  log: Callable[[str], None] = print, benchmarks: dict | None = None,
                  run_asv: RunAsv | None = None, run_paired: RunPaired | None = None,
                  work_dir: Path | None = None) -> CommitBisection:  # fmt: skip
    """The first commit after ``good`` up to ``bad`` that shows ``cell``'s step (see the
    module). ``benchmarks``: ``discovery.discover``'s listing (default: asv's discovery of
    this suite in ``mode``); ``run_asv``, ``run_paired``: the measurements (default: asv and
    the paired runner, the runs kept in ``store``)."""
    t0 = time.perf_counter()
    key = parse_cell(cell, "--cell")
    if rounds < 1 or paired_processes < 1:
        raise BisectError("--rounds and --paired-processes must be at least 1")
    line = commits_between(good, bad)
    try:
        discovery.check_cell(key, benchmarks if benchmarks is not None
                             else discovery.discover(mode), mode)  # fmt: skip
    except discovery.CellError as exc:
        raise BisectError(f"--cell {cell!r}: {exc}") from None
    policy = policies.for_metric(key[0], key[1])
    if policy.kind == "info":
        raise BisectError(f"{cell!r} is shown, not judged (policy info): no commit can change "
                          "its verdict")  # fmt: skip
    if policy.history_only:
        raise BisectError(f"{cell!r} is judged on main's history only (history_only), never "
                          "by a gate: a bisection step cannot judge it")  # fmt: skip
    g, b_ = resolve(good, "--good"), line[-1]
    b = CommitBisection(cell, g, b_, line)
    log(f"bisect: {len(line)} first-parent commit(s) after {g[:12]} up to {b_[:12]}")
    with tempfile.TemporaryDirectory(prefix="ragbench-bisect-", dir=work_dir) as tmp, \
            contextlib.ExitStack() as stack:  # fmt: skip
        work = Path(tmp)
        ruler = Ruler(
            key, policies, rounds=rounds, processes=paired_processes, log=log,
            run_asv=run_asv or asv_runner(store, key, work, mode=mode, machine=machine, log=log),
            run_paired=run_paired or paired_runner(stack, work, processes=paired_processes,
                                                   mode=mode, log=log),
        )  # fmt: skip
        locate(b, ruler, log)
    b.measured = ruler.measured
    b.seconds = time.perf_counter() - t0
    return b


def asv_runner(store, key: Key, work: Path, *, mode: str, machine: str,
               log: Callable[[str], None]) -> RunAsv:  # fmt: skip
    """One asv run of a commit on the cell's ``--bench`` alone, ingested into ``store`` (as a
    gate's run: no point of main's history) -> its cells."""
    from .result_files import ingest

    bench = discovery.bench_regex([key])
    count = itertools.count(1)
    stamp = int(time.time())

    def run(sha: str) -> dict[Key, Cell]:
        n = next(count)
        results = work / f"asv-{n}"
        try:
            asv_run.run([sha], mode=mode, results_dir=results, machine=machine, bench=bench,
                        log=log)  # fmt: skip
        except (asv_run.SuiteError, git.GitError) as exc:
            raise Unmeasurable(str(exc)[-300:]) from None
        label = f"gate:bisect-{sha[:8]}-{stamp}:{n}"
        report = ingest(store, [results], label=label, log=lambda m: None)
        if report.failed:
            raise Unmeasurable(f"could not ingest its run: {report.failed[0][1]}")
        return compare.cells(store, [r["run_id"] for r in store.runs(label=label)])

    return run


def paired_runner(stack: contextlib.ExitStack, work: Path, *, processes: int, mode: str,
                  log: Callable[[str], None]) -> RunPaired:  # fmt: skip
    """The paired runner on a base and a candidate, ``processes`` processes; each base's
    worktree is checked out once and kept for the bisection."""
    trees: dict[str, Path] = {}

    def run(base: str, sha: str, only: str) -> tuple[str, list[dict]]:
        if base not in trees:
            trees[base] = stack.enter_context(git.worktree(base, work, prefix="base"))
        with git.worktree(sha, work, prefix="head") as head:
            return paired.measure(trees[base], head, work, processes=processes, mode=mode,
                                  log=log, only=only)  # fmt: skip

    return run


# --- the report ------------------------------------------------------------------------------


def markdown(b: CommitBisection) -> str:
    """The commit bisection's report: each step, what it was measured against, the answer."""
    lines = [f"## ragbench bisect: `{b.cell}`", "",
             f"{len(b.line)} first-parent commit(s) after `{b.good[:12]}` up to "
             f"`{b.bad[:12]}`, each gated against `{b.good[:12]}`."]  # fmt: skip
    for br in b.branches:
        lines.append(f"The merge `{br.merge[:12]}` brings a branch of {len(br.candidates)} "
                     "commit(s), each gated against their merge-base "
                     f"`{br.base[:12]}`.")  # fmt: skip
    lines += ["A step measures this cell alone (the gate's rules), its base's samples once "
              "(asv) or beside it in the same processes (paired metrics).", "",
              "| commit | against | shows the step? | verdict, or why it was skipped |",
              "|---|---|---|---|"]  # fmt: skip
    for s in b.steps:
        word = "skipped" if s.shows is None else "yes" if s.shows else "no"
        note = s.note.replace("|", "\\|")
        lines.append(f"| `{s.spec[:12]}` {_subject(s.spec)} | `{s.base[:12]}` | {word} | "
                     f"{note} |")  # fmt: skip
    lines += ["", *b.notes] if b.notes else []
    lines.append("")
    cost = (f"{len(b.steps)} step(s), {len(b.measured)} measurement(s) in "
            f"{b.seconds / 60:.1f} min")  # fmt: skip
    if not b.possible:
        lines.append(f"`{b.bad[:12]}` does not show a step of this cell against "
                     f"`{b.good[:12]}`: nothing to bisect ({cost}).")  # fmt: skip
    elif b.first is None:
        why = "The notes above leave" if b.notes else "Skipped commits leave"
        lines.append(f"{why} the first bad commit open: it is one of "
                     f"{', '.join(f'`{c[:12]}`' for c in b.possible)} ({cost}).")  # fmt: skip
    else:
        lines.append(f"First bad commit: `{b.first}` {_subject(b.first)} ({cost}). See it: "
                     f"`git show {b.first[:12]}`.")  # fmt: skip
    return "\n".join(lines)


def _subject(sha: str) -> str:
    try:
        return f"({git.run('log', '-1', '--format=%s', sha)[:60]})"
    except git.GitError:
        return ""
