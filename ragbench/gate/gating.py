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
import shlex
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from .. import asv_run, git
from ..discovery import bench_regex, selects
from ..policies import Policies
from ..result_files import ingest
from ..store import Store
from ..verdicts import comparison as compare
from ..verdicts.comparison import Comparison, Key, Verdict
from ..verdicts.status import Headline, Status
from . import drift, paired, rerun
from .errors import GateError
from .foreign import Foreign, foreign, not_here, not_here_to_settle, project_commit
from .remeasure import recheck_keys, remeasured
from .revisions import resolve_ref, two_commits
from .runs import like_with_like, own_runs, settings_moved


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
    # another asv project's gate (``--config``): its config, and ``--environment`` as given
    config: str | None = None
    environment: str | None = None

    @property
    def exit_code(self) -> int:
        """0 pass; 1 fail, or inconclusive (a cell without evidence: ``evidence.RULE``)."""
        return 0 if self.comparison.headline == Headline.PASS else 1


def rerun_command(res: GateResult) -> str | None:
    """The command that settles ``res`` (``rerun_gate``), where it left something to settle
    and its store recorded it: the recorded gate's id and that store; of another project's
    commits, its ``--config`` (and ``--environment``) too."""
    if not res.plan or not res.gate_id or not res.store:
        return None
    config = "".join(f" {opt} {shlex.quote(value)}" for opt, value in
                     (("--config", res.config), ("--environment", res.environment))
                     if res.config and value)  # fmt: skip
    return (f"ragbench gate --settle {res.gate_id} --store {shlex.quote(res.store)} "
            f"--machine {shlex.quote(res.machine)}{config}")  # fmt: skip


def _plan(res: GateResult, rounds: int, processes: int, flagged: bool = True) -> None:
    """``res``'s plan (``rerun.plan``) for a gate of ``rounds`` rounds and ``processes``
    paired processes, which its JSON keeps (``basis``): what caps the plan where it is read."""
    res.plan = rerun.plan(res.comparison, rounds, processes, flagged)
    res.basis = (rounds, processes)


def _judgeable(comparison: Comparison) -> Comparison:
    """GateError when nothing was compared: no cell has a value on both sides, and nothing
    failed (a pass would mean nothing)."""
    if not comparison.failed and not any(
        v.base is not None and v.head is not None for v in comparison.verdicts
    ):
        raise GateError("nothing to judge: no cell has a value on both base and head")
    return comparison


def _measure(store, sha, side, label, work, *, mode, machine, bench, log,
             environment=None) -> list[str]:  # fmt: skip
    results = work / label.replace(":", "-")
    summaries = asv_run.run([sha], mode=mode, results_dir=results, machine=machine, bench=bench,
                            log=log, environment=environment)  # fmt: skip
    report = ingest(store, [results], label=label, log=lambda m: None)
    if report.failed:
        raise GateError(f"could not ingest the {side} run: {report.failed[0][1]}")
    return [r["run_id"] for r in store.runs(label=label)] if summaries else []


def _measure_project(store, sha, side, label, work, other: Foreign, *, machine, bench,
                     log) -> list[str]:  # fmt: skip
    """``_measure`` of another asv project's commit: its asv, its config (``--config``)."""
    results = work / label.replace(":", "-")
    asv_run.run_project(other.config, sha, results_dir=results, machine=machine, work=work,
                        bench=bench, environment=other.asv_environment, log=log)  # fmt: skip
    report = ingest(store, [results], label=label, log=lambda m: None, config=other.config)
    if report.failed:
        raise GateError(f"could not ingest the {side} run: {report.failed[0][1]}")
    return [r["run_id"] for r in store.runs(label=label)]


def _paired(result: GateResult, policies, *, processes, mode, work, log, bench=()) -> None:
    """The paired verdicts in place of the cross-process ones, where a policy asks for them
    (of the cells ``bench``, the gate's ``--bench``, selects)."""
    c = result.comparison
    if not any(v.policy.paired for v in c.verdicts):
        return  # no host-time cell measured here (the CPU subset)
    try:
        for sha in {result.base, result.head}:
            git.run("cat-file", "-e", f"{sha}^{{commit}}")
    except git.GitError:  # stored results of commits this clone lacks
        log("gate: base or head is not in this clone: no paired comparison, the host-time "
            "cells stay inconclusive")  # fmt: skip
        return
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        base = stack.enter_context(git.worktree(result.base, work))
        head = base if result.head == result.base else stack.enter_context(
            git.worktree(result.head, work)
        )  # fmt: skip
        method, docs = paired.measure(base, head, work, processes=processes, mode=mode, log=log)
        verdicts = {v.key: v for v in paired.judge(paired.collect(docs), policies, method,
                                                   processes) if selects(bench, v.key)}  # fmt: skip
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
    ones, ``like_with_like``); ``paired_processes=0``: no paired comparison (the host-time
    cells are then inconclusive); ``environments``: the ``envs.Env`` each side (``"base"``,
    ``"head"``) is measured in (``ragbench versions``: one commit, two stacks); ``drift_check``:
    compare head's outputs with base's (``ragbench.gate.drift``; never across two environments,
    which cannot share a process: ``versions`` compares them itself). ``config``: another asv
    project's ``asv.conf.json``: base and head are that project's commits, each measured by its
    asv with that config (``asv_run.run_project``; ``environment`` then the one to measure in),
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
        base, head = (project_commit(r, store, machine) for r in (base_ref, head_ref))
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
        two_commits(base, head, base_ref, head_ref)
    rounds = int(o.rounds if o.rounds is not None else policies.gate.get("rounds", 2))
    if rounds < 1:
        raise GateError(f"--rounds must be at least 1, got {rounds}")
    result = GateResult(base, head, machine, Comparison(), o.measure, rounds, mode=o.mode)
    if other is not None:
        result.config, result.environment = str(other.config), o.environment
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
    base_runs, head_runs = like_with_like(
        base_runs,
        head_runs,
        environment=o.environment,
        across=o.across_environments,
        command=command,
    )
    result.base_runs, result.head_runs = base_runs, head_runs
    ids = [[r["run_id"] for r in runs] for runs in (base_runs, head_runs)]
    # --bench: the cells it selects, as asv's --bench selects what a measured gate runs
    base_cells, head_cells = ({k: c for k, c in compare.cells(store, i).items()
                               if selects(o.bench, k)} for i in ids)  # fmt: skip
    if not base_cells and not head_cells:
        raise GateError(f"--bench {' '.join(map(shlex.quote, o.bench))} selects no cell of "
                        f"base {base[:12]} or head {head[:12]}")  # fmt: skip
    result.comparison = _judgeable(compare.compare(base_cells, head_cells, policies))

    def workdir(prefix: str):
        return tempfile.TemporaryDirectory(prefix=prefix, dir=o.work_dir)

    _finish(store, result, ids, o, policies, workdir, log, rounds=max(1, len(base_runs)),
            own=own_runs(base_runs + head_runs))  # fmt: skip


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
            ids = _one_environment(store, ids, o.across_environments, *refs, machine, other)
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
                runs = _one_environment(store, runs, o.across_environments, *refs, machine,
                                        other)  # fmt: skip
            again = {side: compare.cells(store, runs[side]) for side in runs}
            result.rechecked = remeasured(comparison, pooled, again, policies)
        result.comparison = comparison
        _finish(store, result, [ids["base"], ids["head"]], o, policies,
                lambda prefix: contextlib.nullcontext(tmp), log, rounds=rounds)  # fmt: skip
        result.base_runs, result.head_runs = side_runs(
            store, lambda side: f"{gate_id}:{side}:%", other, ids["base"] + ids["head"]
        )


def side_runs(store: Store, label: Callable[[str], str], other: Foreign | None,
              judged) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """The runs of the base and the head side (``label(side)``: their label pattern); of
    another project (``other``), only those ``judged`` (run ids: its one environment's)."""
    judged = set(judged)
    return tuple([r for r in store.runs(label=label(side))
                  if other is None or r["run_id"] in judged]
                 for side in ("base", "head"))  # fmt: skip


def _finish(store: Store, result: GateResult, ids: list[list[str]], o: GateOptions,
            policies: Policies, workdir, log: Callable[[str], None], *, rounds: int,
            own: bool = True) -> None:  # fmt: skip
    """What a gate does after judging its asv cells, stored or measured (``ids``: base's and
    head's run ids): the cells whose measurement settings moved (``settings_moved``), the
    comparisons beside (``_beside``), and the plan for what is left to settle, made for
    ``rounds`` rounds. ``own=False``: stored runs of another project's harness, whose outputs
    are not compared and which this suite cannot measure again (no plan)."""
    result.settings = settings_moved(store, result.comparison, *ids)
    _beside(result, o, policies, workdir, log, outputs=own)
    if own:
        _plan(result, rounds, o.paired_processes)


def _beside(result: GateResult, o: GateOptions, policies: Policies, workdir,
            log: Callable[[str], None], outputs: bool = True) -> None:  # fmt: skip
    """What a gate compares besides its asv cells, where asked: the paired comparison, and
    head's outputs against base's (``workdir(prefix)``: the directory each works in;
    ``outputs=False``: not compared, stored runs of another project's harness)."""
    if o.paired_processes:
        with workdir("ragbench-gate-") as tmp:
            _paired(result, policies, processes=o.paired_processes, mode=o.mode, work=Path(tmp),
                    log=log, bench=o.bench)  # fmt: skip
    if o.drift_check and not o.environments and outputs:
        with workdir("ragbench-drift-") as tmp:
            _drift(result, policies, mode=o.mode, bench=o.bench, work=Path(tmp), log=log)


def _one_environment(store: Store, ids: dict[str, list[str]], across: bool, base_ref: str,
                     head_ref: str, machine: str,
                     other: Foreign) -> dict[str, list[str]]:  # fmt: skip
    """Another project's measured runs of each side in one environment: those of the one
    ``--environment`` names (``of_environment``), else all where they share one (asv measures
    every environment of its config), else (``across`` aside) GateError naming
    ``--environment`` (``like_with_like``)."""
    runs = of_environment(store, ids, machine, other)
    command = (f"ragbench gate --config {shlex.quote(str(other.config))} --base "
               f"{shlex.quote(base_ref)} --head {shlex.quote(head_ref)} --machine "
               f"{shlex.quote(machine)}")  # fmt: skip
    base_runs, head_runs = like_with_like(runs["base"], runs["head"], environment=None,
                                           across=across, command=command)  # fmt: skip
    return {"base": [r["run_id"] for r in base_runs], "head": [r["run_id"] for r in head_runs]}


def of_environment(store: Store, ids: dict[str, list[str]], machine: str,
                   other: Foreign) -> dict[str, list[dict]]:  # fmt: skip
    """Another project's measured runs of each side (``ids``), those of ``other.environment``
    alone where it names one: asv's spec measures every environment of that type and Python
    that the config's matrix has (``ragbench.asv_environments``). GateError, one line naming
    the environments asv measured, where a side has none of that name."""
    from ..asv_environments import is_measured_as

    labelled = {r["run_id"]: r for r in store.runs(label="gate:%", machine=machine)}
    runs = {side: [labelled[i] for i in ids[side] if i in labelled] for side in ids}
    name, spec = other.environment, other.asv_environment
    if name is None or spec is None:
        return runs
    for side in runs:
        kept = [r for r in runs[side] if is_measured_as(r.get("environment"), name, spec)]
        if runs[side] and not kept:
            measured = sorted({str(r.get("environment")) for r in runs[side]})
            raise GateError(f"--environment {name!r}: asv (-E {spec}, {other.config}) measured "
                            f"{side} in {', '.join(measured)}, none of that name: pass one of "
                            "those as --environment, or a config whose matrix has it")  # fmt: skip
        runs[side] = kept
    return runs


def rerun_gate(store: Store, ref: str, *, policies: Policies, machine: str,
               mode: str | None = None, work_dir: Path | None = None,
               log: Callable[[str], None] = print, config: Path | None = None,
               environment: str | None = None) -> GateResult:  # fmt: skip
    """The cells the gate ``ref`` names (``rerun.recorded``: the id ``store`` recorded it
    under, or its very JSON) left without evidence or flagged, measured as its recorded plan
    says (``rerun.planned``: the asv cells in alternating rounds, the host-time cells in
    paired processes) and judged on these samples alone; merged into that gate's recorded
    verdict: its other cells passed there, its other failures stand. ``mode``: the gate's
    (refused where another is asked for). ``config``, ``environment``: a gate of another asv
    project's commits (``GateOptions.config``), measured again by its asv."""
    other = foreign(config, environment) if config is not None else None
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
    for sha in (base, head) if other is None else ():
        try:
            resolve_ref(sha)  # both in this clone, before any work
        except GateError:
            raise not_here_to_settle(store, machine, ref, sha) from None
    two_commits(base, head, base, head)  # a gate of a commit against itself never passes
    result = GateResult(base, head, machine, Comparison(), True, plan.rounds, mode=mode,
                        rerun_of=gate["gate_id"])  # fmt: skip
    if other is not None:
        result.config, result.environment = str(other.config), environment
    verdicts, judged = [], set()  # judged: the runs of the settle's cells kept
    label = f"gate:{head[:8]}-{base[:8]}-{int(time.time())}:settle"
    with tempfile.TemporaryDirectory(prefix="ragbench-settle-", dir=work_dir) as tmp:
        if plan.cells:
            ids = alternate(store, {"base": base, "head": head}, plan.rounds,
                            lambda side, r: f"{label}-{side}:{r}", Path(tmp), what="settle",
                            mode=mode, machine=machine, bench=bench_regex(plan.cells),
                            log=log, other=other)  # fmt: skip
            if other is not None:  # the environment the gate judged, as it kept it
                ids = {side: [r["run_id"] for r in runs] for side, runs in
                       of_environment(store, ids, machine, other).items()}  # fmt: skip
            judged = set(ids["base"] + ids["head"])
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
    result.base_runs, result.head_runs = side_runs(
        store, lambda side: f"{label}-{side}:%", other, judged
    )
    result.seconds = time.perf_counter() - t0
    return result


def _verdict(key: Key, policies: Policies, status: Status, note: str = "",
             change: float | None = None) -> Verdict:  # fmt: skip
    """A verdict without samples: one a gate's JSON keeps (its status, note and change)."""
    params = dict(kv.split("=", 1) for kv in key[2].split(",") if "=" in kv)
    return Verdict(key, params, None, policies.for_metric(key[0], key[1]), status,
                   change=change, note=note)  # fmt: skip
