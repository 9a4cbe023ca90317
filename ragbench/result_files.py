"""Result files into the store: asv result files (with the fingerprint beside them) and
pytest-benchmark JSON (``pytest --benchmark-json``).

Each file is read, parsed and checked completely, alone, before the store is opened for
writing, then stored (``Store.add_run``: one transaction, or slices of one that show together):
a bad file is reported with the reason and skipped without ever taking the store's lock, and
every good file of the same call is still stored. Files are read in batches of about
``BATCH_ROWS`` rows, each batch written with one connection, which is never held while a file
is read. What a file must hold (``validate``): a git commit hash, plausible dates, at least one
measurement, and finite non-negative numbers wherever numbers belong (medians, quartiles,
samples: lists of them). A cell asv recorded as null (the benchmark or its setup raised) is
stored as ``failed``; one it recorded as NaN (skipped, or no value) is not stored. A run
already stored (same source, machine, commit, environment and start time) is skipped: ingesting
twice changes nothing.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import asv_results, jsonfile, project
from . import provenance as fingerprint
from .project import asv_config
from .result_checks import is_number, validate
from .store import FAILED, OK, Columns, Measurement, Run, Store

# asv writes these beside its result files, and a project's root holds its config: not results.
NOT_RESULTS = {"asv.conf.json", "benchmarks.json", "machine.json"}
ASV_CONFIG = "asv.conf.json"
# The directories of an asv project that hold no results but JSON of their own (the published
# site's graphs, the environments' installed packages), as its config names them, else asv's
# defaults (asv 0.6's template: .asv/...; older projects: html/, env/).
ASV_OTHER_DIRS = {"html_dir": ("html", ".asv/html"), "env_dir": ("env", ".asv/env")}
ASV_RESULTS_DIRS = ("results", ".asv/results")
OLD_ASV = (
    "an asv result file from before asv 0.5 (no result_columns): run `asv update` in the asv "
    "project (it rewrites its results in the current format), then ingest it again"
)
# Rows read and checked before they are written with one connection (170 synthetic files of 59
# rows), so that opening the file (~15 ms) is paid about once per ``WRITE_SLICE``, not per file.
BATCH_ROWS = 10_000


@dataclass
class Report:
    """What an ingest did: files stored, already there, and refused (with the reason), and the
    ids of the runs it stored (``new_runs``: what ``ragbench.history.detection.update`` takes)."""

    stored: list[Path] = field(default_factory=list)
    duplicate: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    rows: int = 0
    seconds: float = 0.0
    new_runs: list[str] = field(default_factory=list)
    dirty: list[Path] = field(default_factory=list)  # skipped: of a checkout with changes

    def summary(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        dirty = (f", {len(self.dirty)} skipped as dirty (uncommitted changes; --dirty stores "
                 "them)" if self.dirty else "")  # fmt: skip
        return (
            f"{len(self.stored)} file(s) stored ({self.rows} rows, {rate:.0f} rows/s), "
            f"{len(self.duplicate)} already stored, {len(self.failed)} refused{dirty}"
        )


def discover(paths: Iterable[Path]) -> list[Path]:
    """Result files under ``paths`` (files, or directories searched recursively; in an asv
    project, its config, ``benchmarks.json``, ``machine.json`` and the html and env
    directories are left out)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            skip = {d for conf in path.rglob(ASV_CONFIG) for d in _asv_other_dirs(conf)}
            found += sorted(
                p for p in path.rglob("*.json")
                if p.name not in NOT_RESULTS and not skip.intersection(p.parents)
            )  # fmt: skip
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def _asv_dirs(conf: Path, config: dict, key: str, defaults: tuple[str, ...]) -> set[Path]:
    named = config.get(key)
    return {conf.parent / d for d in ((named,) if isinstance(named, str) else defaults)}


def _asv_other_dirs(conf: Path) -> set[Path]:
    try:
        config = asv_config(conf)
    except ValueError:
        config = {}
    return {d for key, defaults in ASV_OTHER_DIRS.items()
            for d in _asv_dirs(conf, config, key, defaults)}  # fmt: skip


def config_of(start: Path) -> Path | None:
    """The ``asv.conf.json`` of the asv project whose results directory holds the directory
    ``start`` (at most 3 levels up: ROOT/.asv/results/<machine>/), or None."""
    start = Path(start)
    for root in [start, *start.parents][:4]:
        conf = root / ASV_CONFIG
        if not conf.is_file():
            continue
        try:
            config = asv_config(conf)
        except ValueError:
            return None
        if _asv_dirs(conf, config, "results_dir", ASV_RESULTS_DIRS) & {start, *start.parents}:
            return conf
        return None
    return None


def asv_project(files: Iterable[Path]) -> dict[str, str]:
    """``project`` and ``project_url`` of the asv project whose results ``files`` are (the
    config above them whose results directory holds them); {} when none, or when the files are
    of projects with other names."""
    found = {}
    for conf in {config_of(d) for d in {Path(f).parent for f in files}} - {None}:
        config = asv_config(conf)
        described = {k: config[k] for k in ("project", "project_url")
                     if isinstance(config.get(k), str) and config[k]}  # fmt: skip
        found[described.get("project")] = described
    return next(iter(found.values())) if len(found) == 1 else {}


def this_suite() -> str | None:
    """The ``project`` of this suite's own ``asv.conf.json``: results of a config of that name
    (in this checkout or any clone of it) are of no other project."""
    try:
        name = asv_config(Path(__file__).resolve().parent.parent / ASV_CONFIG).get("project")
    except (OSError, ValueError):
        return None
    return name if isinstance(name, str) else None


def _iso(text) -> float | None:
    if text is None:
        return None
    if not isinstance(text, str):
        raise ValueError(f"date {str(text)[:40]!r} is not an ISO 8601 text")
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        raise ValueError(f"date {text[:40]!r} is not an ISO 8601 text") from None


def _metric(asv_name: str) -> tuple[str, str]:
    """``kernel.KernelLatency.track_call_us`` -> (``kernel.KernelLatency``, ``call_us``); a
    benchmark at the top of asv's benchmark directory (``time_import``) is its own benchmark."""
    bench, _, method = asv_name.rpartition(".")
    bench = bench or method
    for prefix in ("track_", "time_", "peakmem_", "mem_"):
        if method.startswith(prefix):
            return bench, method.removeprefix("track_")
    return bench, method


def _fingerprint(path: Path) -> dict:
    fp_path = fingerprint.path_for(path)
    if not fp_path.exists():
        return {}
    try:
        fp = jsonfile.read(fp_path)
    except ValueError as exc:
        raise ValueError(f"its fingerprint {fp_path.name}: {exc}") from None
    if not isinstance(fp, dict):
        raise ValueError(f"its fingerprint {fp_path.name} is not a JSON object")
    return fp


def parse_asv(path: Path, data: dict) -> tuple[Run, list[Measurement]]:
    results_dir = path.parent.parent
    names, units = asv_results.param_names(results_dir), asv_results.units(results_dir)
    fp = _fingerprint(path)
    started, ended = asv_results.run_times(data)
    date = data.get("date")
    if date is not None and not is_number(date):
        raise ValueError(f"date {str(date)[:40]!r} is not a number of milliseconds")
    machine = (data.get("params") or {}).get("machine") or fp.get("machine") or path.parent.name
    if (path.parent / "machine.json").is_file() and machine != path.parent.name:
        raise ValueError(
            f"its machine {str(machine)[:40]!r} is not its results directory's "
            f"{path.parent.name[:40]!r}, so asv ignores it"
        )
    env_name, python = data.get("env_name"), data.get("python")
    run = Run(
        source="asv", commit_hash=data["commit_hash"], machine=machine, started_at=started,
        ended_at=ended, commit_time=date / 1e3 if date else None,
        env_name=env_name, fingerprint=fp,
        harness_version=fp.get("harness_version"), mode=fp.get("mode"),
        # asv's environment is its env_name (python and requirements); this suite's own runs
        # are defined by their fingerprint (a torch upgrade moves them, not a new series)
        environment=None if fp else env_name, python=python if isinstance(python, str) else None,
    )  # fmt: skip
    rows = []
    for cell in asv_results.cells(data, names):
        if cell.value is None and not cell.failed:  # NaN: skipped, or no value to store
            continue
        bench, metric = _metric(cell.benchmark)
        rows.append(Measurement(
            benchmark=bench, metric=metric, params=cell.params, unit=units.get(cell.benchmark),
            median=cell.value, q25=cell.q25, q75=cell.q75, samples=cell.samples or None,
            version=cell.version, status=FAILED if cell.failed else OK,
            stats_number=cell.stats_number, stats_repeat=cell.stats_repeat,
            ci_99_a=cell.ci_99_a, ci_99_b=cell.ci_99_b,
        ))  # fmt: skip
    return run, rows


def _unit_of(key: str) -> str | None:
    """extra_info ``rows_per_s`` -> ``rows/s``."""
    return f"{key.removesuffix('_per_s')}/s" if key.endswith("_per_s") else None


def pytest_environment(python, cpu) -> str | None:
    """pytest-benchmark's environment, from its ``machine_info``: ``python 3.12, <CPU>``
    (Python's minor version: a patch release of a CI image is no new series). The store's
    migration computes the same from a run's ``python`` and fingerprint's ``cpu`` (schema.py)."""
    minor = re.match(r"\d+\.\d+", python) if isinstance(python, str) else None
    parts = [f"python {minor.group(0)}" if minor else None, cpu if isinstance(cpu, str) else None]
    return ", ".join(p for p in parts if p) or None


def _param_id(bench: dict, name: str) -> str | None:
    """pytest's id of a benchmark's parameters (``param``: ``obj0-3``), else the bracket of its
    name; None where it has none. The ``params`` values are no identity: pytest-benchmark
    writes objects as their repr, which holds a memory address that every run changes."""
    param = bench.get("param")
    if param is None and name.endswith("]") and "[" in name:
        param = name.split("[", 1)[1][:-1]
    return None if param is None else str(param)


def parse_pytest_benchmark(path: Path, data: dict) -> tuple[Run, list[Measurement]]:
    commit = data.get("commit_info") or {}
    if not commit.get("id"):
        raise ValueError(f"{path}: no commit_info.id (run pytest-benchmark in a git checkout)")
    machine_info = data.get("machine_info") or {}
    fp = {
        "python": machine_info.get("python_version"),
        "cpu": (machine_info.get("cpu") or {}).get("brand_raw") or machine_info.get("processor"),
        "hostname": machine_info.get("node"),
        "pytest_benchmark": data.get("version"),
    }
    run = Run(
        source="pytest-benchmark", commit_hash=commit["id"],
        machine=machine_info.get("node") or "unknown", started_at=_iso(data.get("datetime")),
        commit_time=_iso(commit.get("time")), branch=commit.get("branch"), fingerprint=fp,
        environment=pytest_environment(fp["python"], fp["cpu"]), dirty=commit.get("dirty") is True,
    )  # fmt: skip
    rows = []
    for b in data["benchmarks"]:
        stats = b["stats"]
        name = b.get("fullname") or b["name"]
        bench = name.split("[", 1)[0]
        param = _param_id(b, name)
        params = {} if param is None else {"param": param}
        rows.append(Measurement(
            benchmark=bench, metric="time", params=params, unit="s", median=stats["median"],
            q25=stats.get("q1"), q75=stats.get("q3"), samples=stats.get("data"),
            # pytest-benchmark's settings and summary: calls a round, rounds, and the rounds'
            # mean and standard deviation (what judges a run saved without its rounds' data)
            stats_number=stats.get("iterations"), stats_repeat=stats.get("rounds"),
            mean=stats.get("mean"), stddev=stats.get("stddev"),
        ))  # fmt: skip
        for key, value in (b.get("extra_info") or {}).items():
            if is_number(value):
                rows.append(Measurement(bench, key, params, _unit_of(key), value))
    return run, rows


def parse(path: Path) -> tuple[Run, list[Measurement]]:
    """A result file's run and measurements, checked (``validate``); ValueError with the reason
    when it is not a complete, valid asv or pytest-benchmark result file. Reading a file is
    a function of that file alone, so whatever goes wrong in it (a value no float holds, JSON
    nested past Python's recursion limit) refuses that file and nothing else."""
    try:
        data = jsonfile.read(path)
        if isinstance(data, dict) and "result_columns" in data:
            run, rows = parse_asv(Path(path), asv_results.check(data))
        elif isinstance(data, dict) and "benchmarks" in data and "machine_info" in data:
            run, rows = parse_pytest_benchmark(Path(path), data)
        elif isinstance(data, dict) and {"commit_hash", "results"} <= set(data):
            raise ValueError(OLD_ASV)
        else:
            raise ValueError("neither an asv result file nor pytest-benchmark JSON")
        validate(run, rows)
    except ValueError:
        raise
    except Exception as exc:
        raise ValueError(f"unreadable result file ({type(exc).__name__}: {exc})") from None
    run.source_file = _printable(path)
    return run, rows


def _printable(path: Path) -> str:
    """The path as text DuckDB stores (a file name of non-UTF-8 bytes is escaped)."""
    return str(path).encode("utf-8", "backslashreplace").decode("utf-8")


def _name(run: Run, label: str | None, branch: str | None, machines) -> None:
    """The run's label, branch and machine as the call names them."""
    run.label = label if label is not None else run.label
    run.branch = branch if branch is not None else run.branch
    named = machines(run.machine) if machines else run.machine
    if named != run.machine:
        run.runner, run.machine = run.machine, named


def ingest(
    store: Store,
    paths: Iterable[Path],
    *,
    label: str | None = None,
    branch: str | None = None,
    machines: Callable[[str], str] | None = None,
    log: Callable[[str], None] = lambda msg: None,
    config: Path | None = None,
    dirty: bool = False,
) -> Report:
    """Store every result file under ``paths``; -> what happened to each, and the runs stored
    (it detects nothing: a command that ingests main's history then calls
    ``ragbench.history.detection.update`` with its policies). ``machines`` names
    the machine of a runner (``Policies.machine``: the policies' ``[machines]``); the runner's
    own name is kept (``runner``), and the run is the same run whatever it is called.

    ``config``: the ``asv.conf.json`` of the project whose asv results these are, where it is
    not above their results directory (``config_of`` finds it there); the store keeps it per
    machine (``ragbench.project``) for the alerts' follow-ups. ``dirty``: store runs measured in
    a checkout with uncommitted changes (pytest-benchmark's ``commit_info.dirty``), which are
    otherwise skipped, and said so: their figures are of no commit."""
    files = discover(paths)
    if config is not None:
        project.read(config)  # ValueError, before anything is read, where it is no asv config
    report = Report()
    t0 = time.perf_counter()
    every = max(1, len(files) // 20)  # progress: each file for small ingests, ~5% steps else
    batch: list[tuple[int, Path, Run, Columns]] = []
    projects: dict[str, project.Project | None] = {}  # machine -> the asv project of its results
    configs: dict[Path, Path | None] = {}  # a results directory -> its asv config
    read: dict[Path, project.Project] = {}  # an asv config -> its project

    def refuse(path: Path, why: str) -> None:
        report.failed.append((path, why))
        log(f"ragbench ingest: refused {path}: {why}")

    def write() -> None:
        with store.writing():
            for i, path, run, cols in batch:
                try:
                    added = store.add_run(run, cols)
                except ValueError as exc:  # what DuckDB refused of this file's data
                    refuse(path, str(exc))
                    continue
                store.yield_slice()
                if added is None:
                    report.duplicate.append(path)
                else:
                    report.stored.append(path)
                    report.rows += added
                    report.new_runs.append(run.run_id)
                if i % every == 0 or i == len(files):
                    what = "already stored" if added is None else f"{added} rows"
                    rate = report.rows / (time.perf_counter() - t0)
                    log(f"[{i}/{len(files)}] {path.name}: {what} ({report.rows} in all, "
                        f"{rate:.0f} rows/s)")  # fmt: skip
        batch.clear()

    for i, path in enumerate(files, 1):
        try:
            run, rows = parse(path)
            if run.dirty and not dirty:
                report.dirty.append(path)
                log(f"ragbench ingest: skipped {path}: measured in a checkout with uncommitted "
                    "changes (commit_info.dirty), of no commit; --dirty stores it")  # fmt: skip
            else:
                _name(run, label, branch, machines)
                if run.source == "asv" and not run.fingerprint:  # not this suite's own run
                    if path.parent not in configs:
                        configs[path.parent] = config_of(path.parent)
                    conf = config or configs[path.parent]
                    if conf is not None:
                        if conf not in read:
                            read[conf] = project.read(conf)
                        if run.machine not in projects:  # what the store holds, once
                            projects[run.machine] = project.load(store, run.machine)
                        _same_project(run.machine, projects[run.machine], read[conf])
                        projects[run.machine] = read[conf]
                batch.append((i, path, run, Columns(run.run_id, rows)))
        except ValueError as exc:
            refuse(path, str(exc))
        if batch and (i == len(files) or sum(len(b[3]) for b in batch) >= BATCH_ROWS):
            write()
    report.seconds = time.perf_counter() - t0
    # the dashboard's title: the asv project whose results these are
    described = asv_project(report.stored + report.duplicate)
    if described:
        store.describe(**described)
    for machine, kept in projects.items():  # the project each machine's asv results are of
        if kept is not None and kept.name != this_suite():  # this suite's follow this checkout
            project.save(store, machine, kept)
    return report


def _same_project(machine: str, held: project.Project | None, new: project.Project) -> None:
    """ValueError where ``machine``'s results (the store's, or this ingest's) are of another
    asv project than ``new``: one machine's alerts link and re-measure one project (asv
    names every GitHub runner ``ubuntu-latest``; before, the last one ingested took the
    machine's links and commands over)."""
    # a clone's path is no identity (asv's "repo": "." names wherever the clone is): the name,
    # and the web address where both configs give one
    if held is None or new.name == this_suite() or (held.name == new.name and (
            held.web is None or new.web is None or held.web == new.web)):  # fmt: skip
        return
    raise ValueError(
        f"machine {machine!r} holds results of {held.name or held.config} ({held.repo}), and "
        f"these are of {new.name or new.config} ({new.repo}): name this runner's machine apart "
        "([machines] in the policies) or ingest them into another store"
    )
