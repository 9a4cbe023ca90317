"""``ragbench gate``: base against head, measured in one job, alternating; flagged and
inconclusive cells re-measured once (``remeasure.remeasured``): a regression fails unless the
re-measurement shows, with power, that it is within its threshold. The metrics that include host
time (``paired = true`` in the policies) are judged from base and head timed in the same
processes instead (``ragbench.gate.paired``): across processes they are not comparable.

With ``measure=False`` the gate compares what the store already holds for the two commits
(``make demo``): no alternation and no re-measurement, and the report says so; the paired
comparison still runs unless ``paired=False``.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import stat
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import project
from .. import runner as suite
from ..discovery import bench_regex
from ..policies import Policies
from ..result_files import ingest
from ..store import Store, timing
from ..verdicts import comparison as compare
from ..verdicts.comparison import Comparison, Key, Verdict
from ..verdicts.status import GATE_FIELDS, Headline, Status, gate_document, verdict_words
from . import drift, paired, rerun
from .remeasure import recheck_keys, remeasured


class GateError(RuntimeError):
    """Unusable input: a bad revision, no data for head, a broken policies file."""


@dataclass
class GateResult:
    base: str
    head: str
    machine: str
    comparison: Comparison
    measured: bool
    rounds: int
    base_runs: list[dict] = field(default_factory=list)
    head_runs: list[dict] = field(default_factory=list)
    rechecked: int = 0
    seconds: float = 0.0
    paired_method: str | None = None  # paired.TOGETHER or ALONE where it ran
    paired_processes: int = 0
    paired_again: int = 0  # cells the paired comparison's second look measured again
    paired_seconds: float = 0.0
    drift: drift.DriftReport | None = None  # head's outputs against base's, where compared
    plan: rerun.Plan | None = None  # what settles the cells left without evidence or flagged
    mode: str = "quick"
    json_path: Path | None = None  # where the gate's JSON (and so its plan) was written
    rerun_of: str | None = None  # a settle run: the id of the recorded gate it completes
    basis: tuple[int, int] = (1, 0)  # the rounds and paired processes the plan was made for
    gate_id: str | None = None  # the id its store recorded it under (``rerun.record``)
    store: str | None = None  # that store, as ``--store`` names it
    # cells whose measurement settings moved between base and head (``settings_moved``)
    settings: dict[Key, str] = field(default_factory=dict)

    @property
    def exit_code(self) -> int:
        """0 pass; 1 fail, or inconclusive (a cell without evidence: ``compare.RULE``)."""
        return 0 if self.comparison.headline == Headline.PASS else 1


def to_json(res: GateResult) -> dict:
    """The gate's verdict for ``ragbench verdict`` (``--json``): ``verdicts.gate_document``
    with how it measured (the mode, and the rounds and processes its plan was made for), and
    what settles it (``rerun.Plan``). Its store records it (``rerun.record``): what
    ``rerun_gate`` reads."""
    rounds, processes = (min(n, hi) for n, (_, hi) in zip(res.basis, GATE_FIELDS.values(),
                                                           strict=True))  # fmt: skip
    doc = gate_document(res.base, res.head, res.machine, res.comparison, mode=res.mode,
                        rounds=rounds, processes=processes)  # fmt: skip
    if res.plan:
        doc["settle"] = res.plan.to_json()
    return doc


def rerun_command(res: GateResult) -> str | None:
    """The command that settles ``res`` (``rerun_gate``), where it left something to settle
    and its store recorded it: the recorded gate's id and that store."""
    if not res.plan or not res.gate_id or not res.store:
        return None
    return (f"ragbench gate --settle {res.gate_id} --store {shlex.quote(res.store)} "
            f"--machine {shlex.quote(res.machine)}")  # fmt: skip


def _plan(res: GateResult, rounds: int, processes: int, flagged: bool = True) -> None:
    """``res``'s plan (``rerun.plan``) for a gate of ``rounds`` rounds and ``processes``
    paired processes, which its JSON keeps (``basis``): what caps the plan where it is read."""
    res.plan = rerun.plan(res.comparison, rounds, processes, flagged)
    res.basis = (rounds, processes)


def private_dir() -> Path:
    """A directory of this user's alone for the gate's JSON: ``$XDG_RUNTIME_DIR/ragbench``,
    else ``ragbench-<uid>`` in the temp directory, made 0700, or taken where it is a directory
    (not a link) this user owns that no one else may use; else a new ``mkdtemp`` (another
    user who made that name first gets nothing from it)."""
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    where = (Path(runtime) / "ragbench" if runtime and Path(runtime).is_dir()
             else Path(tempfile.gettempdir()) / f"ragbench-{os.getuid()}")  # fmt: skip
    with contextlib.suppress(FileExistsError):
        where.mkdir(mode=0o700)
    try:
        info = os.lstat(where)
    except OSError:
        info = None
    if (info is None or not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid()
            or info.st_mode & 0o077):  # fmt: skip
        return Path(tempfile.mkdtemp(prefix="ragbench-gate-"))
    return where


def write_json(res: GateResult, path: Path | None) -> Path:
    """The gate's JSON (``to_json``) written to ``path``, or (None) to ``gate-<id>.json`` in
    ``private_dir``, 0600 and never through a link planted there; -> where."""
    text = json.dumps(to_json(res), indent=2)
    if path is not None:
        path.write_text(text)
        return path
    path = private_dir() / f"gate-{res.gate_id or res.head[:12]}.json"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as fh:
        fh.write(text)
    return path


# git's notations of a set of commits (A..B, A...B, ^A, A^@, A^!, A^-), where the gate and
# ``versions --commit`` take one: ``suite.resolve`` expands a range (``run`` measures each), so
# HEAD~2..HEAD became its oldest commit and HEAD..HEAD~3 an IndexError.
RANGE = re.compile(r"\.\.|^\^|\^[@!-]")


def resolve_ref(ref: str, store: Store | None = None, machine: str = "") -> str:
    """The full hash of ``ref``: git's, or (comparing stored runs) the one commit of the store
    that starts with it (results made in another checkout). GateError for a range."""
    if RANGE.search(ref):
        raise GateError(
            f"{ref!r} is a range of commits, where one commit is expected: pass one revision "
            "(to gate A..B, pass --base A --head B)"
        )
    try:
        return suite.resolve([ref])[0]
    except suite.SuiteError as exc:
        if store is None:
            raise GateError(str(exc)) from None
        runs = store.runs(machine=machine, commit=ref, any_branch=True)
        stored = {r["commit_hash"] for r in runs}
        if len(stored) == 1 and len(ref) >= 7:
            return stored.pop()
        raise GateError(_not_stored(store, ref, machine, stored)) from None


def _not_stored(store: Store, ref: str, machine: str, stored: set[str]) -> str:
    """Why ``ref`` names no one commit of the store's runs on ``machine`` (nor of this
    checkout), in one line: the machines whose runs have it, or the store's machines."""
    if len(stored) > 1 or (stored and len(ref) < 7):
        return (f"{ref!r} starts {len(stored)} stored commits of machine {machine!r}: pass at "
                "least 7 characters of the one meant")  # fmt: skip
    there = sorted({r["machine"] for r in store.runs(commit=ref, any_branch=True)})
    if there and len(ref) >= 7:
        return (f"the store has no run of {ref!r} on machine {machine!r}; it has runs of it on "
                f"{', '.join(there)}: pass --machine {shlex.quote(there[0])}")  # fmt: skip
    machines = store.machines()
    return (f"{ref!r} is no commit of this checkout, nor of a run on machine {machine!r} in "
            f"{store.name} (its machines: {', '.join(machines) or 'none'})")  # fmt: skip


def own_runs(runs: list[dict]) -> bool:
    """Whether stored runs are this suite's (their environment is their fingerprint's), whose
    outputs ``ragbench.gate.drift`` can compare; another project's results (asv's env_name) are
    not."""
    return not any(r.get("environment") for r in runs)


def settings_moved(store: Store, comparison: Comparison, base_ids: list[str],
                   head_ids: list[str]) -> dict[Key, str]:  # fmt: skip
    """The cells whose measurement settings moved between base's and head's runs (asv's
    ``number`` 86787 on base, 1 on head: ``ragbench.store.timing``): each judged inconclusive, its
    note saying which, never a regression or a pass of the code. -> key -> the settings."""

    def settings(ids: list[str]) -> dict[Key, dict]:
        out: dict[Key, list[dict]] = {}
        for r in store.measurements(ids):
            key = (r["benchmark"], r["metric"], r["param_key"])
            out.setdefault(key, []).append(
                timing.of(r["source"], r["stats_number"], r["stats_repeat"])
            )
        return {k: timing.typical(v) for k, v in out.items()}

    judged = (Status.REGRESSION, Status.IMPROVEMENT, Status.UNCHANGED, Status.INCONCLUSIVE)
    base, head = settings(base_ids), settings(head_ids)
    moved = {}
    for v in comparison.verdicts:
        if v.status not in judged or v.base is None or v.head is None:
            continue
        words = timing.changed(base.get(v.key), head.get(v.key), v.base, v.head)
        if words:
            moved[v.key] = words
            v.status = Status.INCONCLUSIVE
            v.note = (f"{timing.words(words)}: {verdict_words(v)} is not the code's change; "
                      "measure both with the same settings")  # fmt: skip
    return moved


def _two_commits(base: str, head: str, base_ref: str, head_ref: str) -> None:
    """GateError where base and head cannot be what was meant: one commit (against itself a gate
    judges noise, and passed "X against X"), or head a strict ancestor of base (older than it:
    swapped, or a base that already holds head). Commits this clone lacks (stored runs of
    another checkout) are only checked for equality."""
    if base == head:
        raise GateError(
            f"--base {base_ref} and --head {head_ref} are the same commit {base[:12]}: a gate "
            "compares two commits; pass the pull request's merge base as --base "
            "(git merge-base origin/main HEAD) and its head as --head"
        )
    try:
        suite.git("merge-base", "--is-ancestor", head, base)
    except suite.SuiteError:  # not an ancestor (exit 1), or not in this clone
        return
    raise GateError(
        f"--head {head_ref} ({head[:12]}) is older than --base {base_ref} ({base[:12]}), an "
        "ancestor of it: pass the older commit as --base and the newer as --head"
    )


def _judgeable(comparison: Comparison) -> Comparison:
    """GateError when nothing was compared: no cell has a value on both sides, and nothing
    failed (a pass would mean nothing)."""
    if not comparison.failed and not any(
        v.base is not None and v.head is not None for v in comparison.verdicts
    ):
        raise GateError("nothing to judge: no cell has a value on both base and head")
    return comparison


def environment_of(run: dict) -> str:
    """A stored run's environment as ``--environment`` names it: another harness's
    (``environment``: asv's env_name ...), else this suite's ``env_key``."""
    return run.get("environment") or run["env_key"]


def _described(runs: list[dict]) -> str:
    """The environments of ``runs`` in words: this suite's with what its key hashes."""
    words = set()
    for r in runs:
        fields = ", ".join(f"{k} {r[k]}" for k in ("gpu", "torch", "triton", "python") if r.get(k))
        own = r.get("environment") is None and fields
        words.add(f"{environment_of(r)} ({fields})" if own else environment_of(r))
    return ", ".join(sorted(words))


def _like_with_like(base_runs: list[dict], head_runs: list[dict], *, environment: str | None,
                    across: bool, command: str) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """Base's and head's stored runs of one environment: those of ``environment`` where it
    is given (an environment's name or an ``env_key``), else all of them where they share one.
    GateError, one line with the command that compares like with like, where they span
    several and ``across`` (``--across-environments``) is not given: a Python 3.8 run against a
    3.10 one, or two Pythons' samples pooled, reads as a change of the code."""
    if environment is not None:

        def chosen(runs):
            return [r for r in runs
                    if environment in (r.get("environment"), r["env_key"])]  # fmt: skip

        picked = chosen(base_runs), chosen(head_runs)
        for side, runs, kept in (("base", base_runs, picked[0]), ("head", head_runs, picked[1])):
            if not kept:
                raise GateError(f"{side} has no run in environment {environment!r} (its "
                                f"environments: {_described(runs)})")  # fmt: skip
        return picked
    envs = [sorted({environment_of(r) for r in runs}) for runs in (base_runs, head_runs)]
    keys = {r["env_key"] for r in base_runs + head_runs}
    if len(keys) <= 1 or across:
        return base_runs, head_runs
    common = [e for e in envs[1] if e in envs[0]]
    if common:
        fix = (f"compare one: {command} --environment {shlex.quote(common[-1])} (in common: "
               f"{', '.join(common)}), or pool them: --across-environments")  # fmt: skip
    else:
        fix = f"no environment in common; to compare them anyway: {command} --across-environments"
    raise GateError(f"base ran in {_described(base_runs)} and head in {_described(head_runs)}: "
                    f"different environments are not compared; {fix}")  # fmt: skip


def differences(base_runs: list[dict], head_runs: list[dict]) -> list[str]:
    """What differs between base's and head's runs besides the code, in words: the runners a
    ``[machines]`` mapping made one machine, the Pythons (``--across-environments``)."""
    lines = []
    for what, col in (("runner", "runner"), ("Python", "python"), ("environment", "environment")):
        b = sorted({str(r.get(col)) for r in base_runs if r.get(col)})
        h = sorted({str(r.get(col)) for r in head_runs if r.get(col)})
        if b and h and b != h:
            lines.append(f"Base ran on {what} {', '.join(b)}, head on {', '.join(h)}.")
    return lines


def _measure(store, sha, side, label, work, *, mode, machine, bench, log,
             environment=None) -> list[str]:  # fmt: skip
    results = work / label.replace(":", "-")
    summaries = suite.run([sha], mode=mode, results_dir=results, machine=machine, bench=bench,
                          log=log, environment=environment)  # fmt: skip
    report = ingest(store, [results], label=label, log=lambda m: None)
    if report.failed:
        raise GateError(f"could not ingest the {side} run: {report.failed[0][1]}")
    return [r["run_id"] for r in store.runs(label=label)] if summaries else []


def _measure_project(store, sha, side, label, work, other: Foreign, *, machine, bench,
                     log) -> list[str]:  # fmt: skip
    """``_measure`` of another asv project's commit: its asv, its config (``--config``)."""
    results = work / label.replace(":", "-")
    suite.run_project(other.config, sha, results_dir=results, machine=machine, work=work,
                      bench=bench, environment=other.asv_environment, log=log)  # fmt: skip
    report = ingest(store, [results], label=label, log=lambda m: None, config=other.config)
    if report.failed:
        raise GateError(f"could not ingest the {side} run: {report.failed[0][1]}")
    return [r["run_id"] for r in store.runs(label=label)]


@dataclass(frozen=True)
class Foreign:
    """Another asv project the gate measures (``--config``): its config, and asv's
    ``--environment`` spec of the environment to measure in (None: the config's own)."""

    config: Path
    asv_environment: str | None = None


def foreign(config: Path, environment: str | None) -> Foreign:
    """The project ``--config`` names, checked (GateError, one line, where it is no asv
    config); ``environment``: an environment as the store names it (asv's ``conda-py3.12``)
    or asv's own spec (``conda:3.12``)."""
    from ..follow_up import asv_environment

    try:
        project.read(config)
    except (OSError, ValueError) as exc:
        raise GateError(f"--config {config}: {exc}") from None
    spec = None
    if environment is not None:
        spec = environment if ":" in environment else asv_environment(environment)
        if spec is None:
            raise GateError(
                f"--environment {environment!r}: not an asv environment's name "
                "(TYPE-pyX.Y, as conda-py3.12) nor asv's spec (conda:3.12)"
            )
    return Foreign(Path(config).resolve(), spec)


def not_here(store: Store | None, machine: str, ref: str, exc: Exception) -> GateError:
    """The one line for a revision this checkout lacks: where the store holds another
    project's results of ``machine`` (``ragbench.project``), what to pass to measure them
    with that project's asv."""
    kept = project.load(store, machine) if store is not None else None
    if kept is None:
        return GateError(str(exc))
    name = kept.name or "another asv project"
    where = (
        f"pass --config {shlex.quote(kept.config)}" if Path(kept.config).is_file()
        else f"pass --config PATH, its asv.conf.json (ingest found it at {kept.config})"
    )  # fmt: skip
    return GateError(f"{ref} is not a commit of this checkout: machine {machine!r} holds "
                     f"{name}'s results ({kept.repo or kept.config}); {where} to measure them "
                     "with its asv, or --stored to compare the stored runs")  # fmt: skip


def _project_commit(ref: str, store: Store, machine: str) -> str:
    """Another project's revision: the one stored commit (of any machine) it abbreviates,
    else as given (asv resolves it in its clone of the project)."""
    if RANGE.search(ref):
        raise GateError(f"{ref!r} is a range of commits, where one commit is expected: pass "
                        "one revision (to gate A..B, pass --base A --head B)")  # fmt: skip
    stored = {r["commit_hash"] for r in store.runs(commit=ref, any_branch=True)}
    return stored.pop() if len(stored) == 1 and len(ref) >= 7 else ref


def _paired(result: GateResult, policies, *, processes, mode, work, log) -> None:
    """The paired verdicts in place of the cross-process ones, where a policy asks for them."""
    c = result.comparison
    if not any(v.policy.paired for v in c.verdicts):
        return  # no host-time cell measured here (the CPU subset)
    try:
        for sha in {result.base, result.head}:
            suite.git("cat-file", "-e", f"{sha}^{{commit}}")
    except suite.SuiteError:  # stored results of commits this clone lacks
        log("gate: base or head is not in this clone: no paired comparison, the host-time "
            "cells stay inconclusive")  # fmt: skip
        return
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(suite.checkout(result.base, work))
        head = base if result.head == result.base else stack.enter_context(
            suite.checkout(result.head, work)
        )  # fmt: skip
        method, docs = paired.measure(base, head, work, processes=processes, mode=mode, log=log)
        verdicts = {v.key: v for v in paired.judge(paired.collect(docs), policies, method,
                                                   processes)}  # fmt: skip
        again = [k for k, v in verdicts.items() if v.status == Status.INCONCLUSIVE]
        if method == paired.TOGETHER and again:
            log(f"paired: {len(again)} cell(s) without evidence: {processes} more process(es) "
                "of those cells alone")  # fmt: skip
            _, more = paired.measure(base, head, work, processes=processes, mode=mode, log=log,
                                     only=paired.only_of(again), first=processes)  # fmt: skip
            verdicts.update((v.key, v) for v in paired.second_look(docs, more, again, policies,
                                                                   processes))  # fmt: skip
            result.paired_again = len(again)
    for i, v in enumerate(c.verdicts):
        paired_v = verdicts.pop(v.key, None)
        if paired_v is not None and v.status not in (Status.FAILED, Status.MISSING):
            c.verdicts[i] = paired_v
    c.verdicts += verdicts.values()  # cells the asv runs did not have
    result.paired_method, result.paired_processes = method, processes
    result.paired_seconds = time.perf_counter() - t0


def _drift(result: GateResult, policies, *, mode, bench, work, log) -> None:
    """Head's outputs against base's (``ragbench.gate.drift``): each output a verdict, a drift
    finding failing like a regression."""
    try:
        result.drift = drift.against_base(result.base, result.head, work, mode=mode,
                                          margin=drift.margin_of(policies), bench=bench,
                                          log=log)  # fmt: skip
    except drift.DriftError as exc:
        raise GateError(f"the comparison of outputs against base could not run: {exc}") from None
    if result.drift.skipped:
        log(f"drift: not compared: {result.drift.skipped}")
    result.comparison.verdicts += result.drift.verdicts()


@dataclass
class GateOptions:
    """How a gate measures and what it compares besides base against head (``run_gate``):
    ``measure=False`` compares the stored runs (``environment``, ``across_environments``: which
    ones, ``_like_with_like``); ``paired_processes=0``: no paired comparison (the host-time
    cells are then inconclusive); ``environments``: the ``envs.Env`` each side (``"base"``,
    ``"head"``) is measured in (``ragbench versions``: one commit, two stacks); ``drift_check``:
    compare head's outputs with base's (``ragbench.gate.drift``; never across two environments,
    which cannot share a process: ``versions`` compares them itself). ``config``: another asv
    project's ``asv.conf.json``: base and head are that project's commits, each measured by its
    asv with that config (``suite.run_project``; ``environment`` then the one to measure in),
    and neither the paired nor the drift comparison (this suite's) runs. Without it, a revision
    this checkout lacks, on a machine whose stored results are another project's, is refused
    in one line naming the ``--config`` to pass."""

    measure: bool = True
    rounds: int | None = None
    mode: str = "quick"
    bench: Sequence[str] = ()
    paired_processes: int = paired.PROCESSES
    work_dir: Path | None = None
    environments: dict | None = None
    drift_check: bool = True
    environment: str | None = None
    across_environments: bool = False
    config: Path | None = None

    def __post_init__(self) -> None:
        self.environments = self.environments or {}


def alternate(store: Store, sides: dict[str, str], rounds: int, label: Callable[[str, int], str],
              work: Path, *, what: str, mode: str, machine: str, bench,
              log: Callable[[str], None], environments: dict | None = None,
              other: Foreign | None = None) -> dict[str, list[str]]:  # fmt: skip
    """``rounds`` rounds of each side's commit measured in turn (base, head, base, head: a
    drift of the machine hits both), each run labelled ``label(side, round)``; -> each side's
    run ids. ``environments``: the environment each side is measured in, where given;
    ``other``: another asv project's commits, measured by its asv (``_measure_project``)."""
    ids: dict[str, list[str]] = {side: [] for side in sides}
    for r in range(rounds):
        for side, sha in sides.items():
            log(f"{what}: round {r + 1}/{rounds}, {side} {sha[:12]}")
            ids[side] += _measure_side(store, sha, side, label(side, r), work, mode=mode,
                                       machine=machine, bench=bench, log=log,
                                       environments=environments, other=other)  # fmt: skip
    return ids


def _measure_side(store, sha, side, label, work, *, mode, machine, bench, log,
                  environments: dict | None, other: Foreign | None) -> list[str]:  # fmt: skip
    """One side's run: this suite's (``_measure``, in its environment where ``environments``
    name one) or, with ``other``, another project's by its asv (``_measure_project``)."""
    if other is not None:
        return _measure_project(store, sha, side, label, work, other, machine=machine,
                                bench=bench, log=log)  # fmt: skip
    where = {} if environments is None else {"environment": environments.get(side)}
    return _measure(store, sha, side, label, work, mode=mode, machine=machine, bench=bench,
                    log=log, **where)  # fmt: skip


def run_gate(
    store: Store,
    base_ref: str,
    head_ref: str,
    *,
    policies: Policies,
    machine: str,
    log: Callable[[str], None] = print,
    options: GateOptions | None = None,
    **settings,
) -> GateResult:
    """Base against head (see the module), as ``options`` say (``GateOptions``, or its fields
    given as keywords)."""
    if options is not None and settings:
        raise TypeError("run_gate: GateOptions or its fields as keywords, not both")
    o = options if options is not None else GateOptions(**settings)
    t0 = time.perf_counter()
    other = (foreign(o.config, o.environment if o.measure else None)
             if o.config is not None else None)  # fmt: skip
    if other is not None:
        base, head = (_project_commit(r, store, machine) for r in (base_ref, head_ref))
        o = replace(o, paired_processes=0, drift_check=False)  # this suite's comparisons
    else:
        shas = []
        for ref in (base_ref, head_ref):
            try:
                shas.append(resolve_ref(ref, None if o.measure else store, machine))
            except GateError as exc:
                raise not_here(store, machine, ref, exc) from None
        base, head = shas
    if not o.environments:  # ``versions``: one commit under two stacks
        _two_commits(base, head, base_ref, head_ref)
    rounds = int(o.rounds if o.rounds is not None else policies.gate.get("rounds", 2))
    if rounds < 1:
        raise GateError(f"--rounds must be at least 1, got {rounds}")
    result = GateResult(base, head, machine, Comparison(), o.measure, rounds, mode=o.mode)
    if o.measure:
        _measured(store, result, o, policies, log, other, (base_ref, head_ref))
    else:
        _stored(store, result, base_ref, head_ref, o, policies, log)
    result.seconds = time.perf_counter() - t0
    return result


def _stored(store: Store, result: GateResult, base_ref: str, head_ref: str, o: GateOptions,
            policies: Policies, log: Callable[[str], None]) -> None:  # fmt: skip
    """A commit's runs, on whatever branch they were ingested, compared as they are."""
    base, head, machine = result.base, result.head, result.machine
    base_runs = store.runs(machine=machine, commit=base, any_branch=True)
    head_runs = store.runs(machine=machine, commit=head, any_branch=True)
    for side, sha, found in (("head", head, head_runs), ("base", base, base_runs)):
        if not found:
            raise GateError(
                f"the store has no run of {side} {sha[:12]} on machine {machine!r}: run "
                "the suite first (ragbench run), or gate without --stored"
            )
    command = (f"ragbench gate --stored --store {shlex.quote(store.name)} --base "
               f"{shlex.quote(base_ref)} --head {shlex.quote(head_ref)} --machine "
               f"{shlex.quote(machine)}")  # fmt: skip
    base_runs, head_runs = _like_with_like(
        base_runs,
        head_runs,
        environment=o.environment,
        across=o.across_environments,
        command=command,
    )
    result.base_runs, result.head_runs = base_runs, head_runs
    ids = [[r["run_id"] for r in runs] for runs in (base_runs, head_runs)]
    result.comparison = _judgeable(compare.compare(
        compare.cells(store, ids[0]), compare.cells(store, ids[1]), policies,
    ))  # fmt: skip
    result.settings = settings_moved(store, result.comparison, *ids)

    def workdir(prefix: str):
        return tempfile.TemporaryDirectory(prefix=prefix, dir=o.work_dir)

    own = own_runs(base_runs + head_runs)  # else another project's commits: its own harness
    _beside(result, o, policies, workdir, log, outputs=own)
    if own:
        _plan(result, max(1, len(base_runs)), o.paired_processes)


def _measured(store: Store, result: GateResult, o: GateOptions, policies: Policies,
              log: Callable[[str], None], other: Foreign | None,
              refs: tuple[str, str]) -> None:  # fmt: skip
    """Base and head measured in alternating rounds, the flagged cells once more; ``other``:
    another asv project's commits (``refs``: as given, for the command its refusal names)."""
    base, head, machine, rounds = result.base, result.head, result.machine, result.rounds
    gate_id = f"gate:{head[:8]}-{base[:8]}-{int(time.time())}"
    with tempfile.TemporaryDirectory(prefix="ragbench-gate-", dir=o.work_dir) as tmp:
        work = Path(tmp)
        ids = alternate(store, {"base": base, "head": head}, rounds,
                        lambda side, r: f"{gate_id}:{side}:{r}", work, what="gate", mode=o.mode,
                        machine=machine, bench=o.bench, log=log,
                        environments=o.environments, other=other)  # fmt: skip
        if other is not None:  # the commits asv measured, one environment a side
            ids = _one_environment(store, ids, o.environment, o.across_environments, *refs,
                                   machine, other)  # fmt: skip
            base, head = (store.runs(label=f"{gate_id}:{side}:0")[0]["commit_hash"]
                          for side in ("base", "head"))  # fmt: skip
            result.base, result.head = base, head
        pooled = {side: compare.cells(store, ids[side]) for side in ids}
        comparison = _judgeable(compare.compare(pooled["base"], pooled["head"], policies))
        keys = recheck_keys(comparison)
        if keys:
            log(f"gate: {len(keys)} flagged or inconclusive cell(s); measuring them once more")
            runs = {}
            for side, sha in (("base", base), ("head", head)):
                runs[side] = _measure_side(store, sha, side, f"{gate_id}:recheck-{side}", work,
                                           mode=o.mode, machine=machine, bench=bench_regex(keys),
                                           log=log, environments=o.environments,
                                           other=other)  # fmt: skip
            if other is not None:
                runs = _one_environment(store, runs, o.environment, o.across_environments,
                                        *refs, machine, other)  # fmt: skip
            again = {side: compare.cells(store, runs[side]) for side in runs}
            result.rechecked = remeasured(comparison, pooled, again, policies)
        result.comparison = comparison
        result.settings = settings_moved(store, comparison, ids["base"], ids["head"])
        _beside(result, o, policies, lambda prefix: contextlib.nullcontext(tmp), log)
        result.base_runs = store.runs(label=f"{gate_id}:base:%")
        result.head_runs = store.runs(label=f"{gate_id}:head:%")
    _plan(result, rounds, o.paired_processes)


def _beside(result: GateResult, o: GateOptions, policies: Policies, workdir,
            log: Callable[[str], None], outputs: bool = True) -> None:  # fmt: skip
    """What a gate compares besides its asv cells, where asked: the paired comparison, and
    head's outputs against base's (``workdir(prefix)``: the directory each works in;
    ``outputs=False``: not compared, stored runs of another project's harness)."""
    if o.paired_processes:
        with workdir("ragbench-gate-") as tmp:
            _paired(result, policies, processes=o.paired_processes, mode=o.mode, work=Path(tmp),
                    log=log)  # fmt: skip
    if o.drift_check and not o.environments and outputs:
        with workdir("ragbench-drift-") as tmp:
            _drift(result, policies, mode=o.mode, bench=o.bench, work=Path(tmp), log=log)


def _one_environment(store: Store, ids: dict[str, list[str]], environment: str | None,
                     across: bool, base_ref: str, head_ref: str, machine: str,
                     other: Foreign) -> dict[str, list[str]]:  # fmt: skip
    """Another project's measured runs of each side in one environment (asv measures every
    environment of its config, unless ``environment`` named one): all where they share one,
    else (``across`` aside) GateError naming ``--environment`` (``_like_with_like``)."""
    labelled = {r["run_id"]: r for r in store.runs(label="gate:%", machine=machine)}
    runs = {side: [labelled[i] for i in ids[side] if i in labelled] for side in ids}
    command = (f"ragbench gate --config {shlex.quote(str(other.config))} --base "
               f"{shlex.quote(base_ref)} --head {shlex.quote(head_ref)} --machine "
               f"{shlex.quote(machine)}")  # fmt: skip
    base_runs, head_runs = _like_with_like(runs["base"], runs["head"], environment=None,
                                           across=across, command=command)  # fmt: skip
    return {"base": [r["run_id"] for r in base_runs], "head": [r["run_id"] for r in head_runs]}


def rerun_gate(store: Store, ref: str, *, policies: Policies, machine: str,
               mode: str | None = None, work_dir: Path | None = None,
               log: Callable[[str], None] = print) -> GateResult:  # fmt: skip
    """The cells the gate ``ref`` names (``rerun.recorded``: the id ``store`` recorded it
    under, or its very JSON) left without evidence or flagged, measured as its recorded plan
    says (``rerun.planned``: the asv cells in alternating rounds, the host-time cells in
    paired processes) and judged on these samples alone; merged into that gate's recorded
    verdict: its other cells passed there, its other failures stand. ``mode``: the gate's
    (refused where another is asked for)."""
    try:
        gate = rerun.recorded(store, str(ref))
        plan = rerun.planned(gate)
    except ValueError as exc:
        raise GateError(f"--settle {ref}: {exc}") from None
    if gate["machine"] != machine:
        raise GateError(f"--settle {ref}: that gate ran on {gate['machine']!r}, this is "
                        f"{machine!r}: settle it on its machine (--machine)")  # fmt: skip
    if mode is not None and mode != gate["mode"]:
        raise GateError(f"--settle {ref}: that gate measured in --mode {gate['mode']}, not "
                        f"{mode}: its plan is for its own mode")  # fmt: skip
    mode = gate["mode"]
    t0 = time.perf_counter()
    base, head = gate["base"], gate["head"]
    for sha in (base, head):
        resolve_ref(sha)  # both in this clone, before any work
    _two_commits(base, head, base, head)  # a gate of a commit against itself never passes
    result = GateResult(base, head, machine, Comparison(), True, plan.rounds, mode=mode,
                        rerun_of=gate["gate_id"])  # fmt: skip
    verdicts = []
    label = f"gate:{head[:8]}-{base[:8]}-{int(time.time())}:settle"
    with tempfile.TemporaryDirectory(prefix="ragbench-settle-", dir=work_dir) as tmp:
        if plan.cells:
            ids = alternate(store, {"base": base, "head": head}, plan.rounds,
                            lambda side, r: f"{label}-{side}:{r}", Path(tmp), what="settle",
                            mode=mode, machine=machine, bench=bench_regex(plan.cells),
                            log=log)  # fmt: skip
            wanted = set(plan.cells)
            pooled = [{k: c for k, c in compare.cells(store, ids[side]).items() if k in wanted}
                      for side in ("base", "head")]  # fmt: skip
            verdicts += compare.compare(*pooled, policies).verdicts
            verdicts += [_verdict(k, policies, Status.MISSING, "the settle run measured no "
                                  "value of it on either side")
                         for k in wanted - {v.key for v in verdicts}]  # fmt: skip
        if plan.paired:
            # the paired verdicts replace these (``_paired``), as they replace a gate's
            result.comparison = Comparison(
                [_verdict(k, policies, Status.INCONCLUSIVE) for k in plan.paired])  # fmt: skip
            _paired(result, policies, processes=plan.processes, mode=mode, work=Path(tmp),
                    log=log)  # fmt: skip
            wanted = set(plan.paired)
            verdicts += [v for v in result.comparison.verdicts if v.key in wanted]
    settled = {v.key for v in verdicts}
    stand = [_verdict(k, policies, Status(c["status"]), c["note"] or "", c["change"])
             for c in gate["cells"]
             if (k := (c["benchmark"], c["metric"], c["param_key"])) not in settled]  # fmt: skip
    result.comparison = Comparison(verdicts + stand, float(policies.gate.get("alpha", 0.01)))
    _plan(result, plan.rounds, plan.processes, flagged=False)
    result.base_runs = store.runs(label=f"{label}-base:%")
    result.head_runs = store.runs(label=f"{label}-head:%")
    result.seconds = time.perf_counter() - t0
    return result


def _verdict(key: Key, policies: Policies, status: Status, note: str = "",
             change: float | None = None) -> Verdict:  # fmt: skip
    """A verdict without samples: one a gate's JSON keeps (its status, note and change)."""
    params = dict(kv.split("=", 1) for kv in key[2].split(",") if "=" in kv)
    return Verdict(key, params, None, policies.for_metric(key[0], key[1]), status,
                   change=change, note=note)  # fmt: skip
