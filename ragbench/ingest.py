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

import json
import math
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import asv_results, changepoints, fingerprint, jsonfile
from .store import FAILED, OK, Columns, Measurement, Run, Store, param_key

# asv writes these beside its result files; they are not results.
NOT_RESULTS = {"benchmarks.json", "machine.json"}
COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # SHA-1, or SHA-256 repositories
# Plausible dates: after git existed, and not in the future (a day's clock skew allowed).
EARLIEST = datetime(2005, 4, 1).timestamp()
SKEW = 86400.0
# Rows read and checked before they are written with one connection (170 synthetic files of 59
# rows), so that opening the file (~15 ms) is paid about once per ``WRITE_SLICE``, not per file.
BATCH_ROWS = 10_000


@dataclass
class Report:
    """What an ingest did: files stored, already there, and refused (with the reason)."""

    stored: list[Path] = field(default_factory=list)
    duplicate: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    rows: int = 0
    seconds: float = 0.0
    series: int = 0  # series whose stored change points were brought up to date
    series_seconds: float = 0.0  # ... in this time (after ``seconds``, not in the rows/s)

    def summary(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        updated = (f"; change points of {self.series} series updated in "
                   f"{self.series_seconds:.1f} s" if self.series else "")  # fmt: skip
        return (
            f"{len(self.stored)} file(s) stored ({self.rows} rows, {rate:.0f} rows/s), "
            f"{len(self.duplicate)} already stored, {len(self.failed)} refused{updated}"
        )


def discover(paths: Iterable[Path]) -> list[Path]:
    """Result files under ``paths`` (files, or directories searched recursively)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.json") if p.name not in NOT_RESULTS)
        else:
            found.append(path)
    return list(dict.fromkeys(found))


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
    """``kernel.KernelLatency.track_call_us`` -> (``kernel.KernelLatency``, ``call_us``)."""
    bench, _, method = asv_name.rpartition(".")
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
    if date is not None and not _is_number(date):
        raise ValueError(f"date {str(date)[:40]!r} is not a number of milliseconds")
    machine = (data.get("params") or {}).get("machine") or fp.get("machine") or path.parent.name
    run = Run(
        source="asv", commit_hash=data["commit_hash"], machine=machine, started_at=started,
        ended_at=ended, commit_time=date / 1e3 if date else None,
        env_name=data.get("env_name"), fingerprint=fp,
        harness_version=fp.get("harness_version"), mode=fp.get("mode"),
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
        ))  # fmt: skip
    return run, rows


def _unit_of(key: str) -> str | None:
    """extra_info ``rows_per_s`` -> ``rows/s``."""
    return f"{key.removesuffix('_per_s')}/s" if key.endswith("_per_s") else None


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
    )  # fmt: skip
    rows = []
    for b in data["benchmarks"]:
        stats = b["stats"]
        name = b.get("fullname") or b["name"]
        bench = name.split("[", 1)[0]
        params = dict(b.get("params") or {})
        rows.append(Measurement(
            benchmark=bench, metric="time", params=params, unit="s", median=stats["median"],
            q25=stats.get("q1"), q75=stats.get("q3"), samples=stats.get("data"),
        ))  # fmt: skip
        for key, value in (b.get("extra_info") or {}).items():
            if _is_number(value):
                rows.append(Measurement(bench, key, params, _unit_of(key), value))
    return run, rows


def _is_number(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_value(x, what: str) -> None:
    try:
        ok = _is_number(x) and math.isfinite(x) and x >= 0
    except OverflowError:  # an int beyond any float
        ok = False
    if not ok:
        raise ValueError(f"{what} is {str(x)[:40]!r}, not a finite non-negative number")


def _check_date(seconds: float | None, what: str) -> None:
    if seconds is not None and not EARLIEST <= seconds <= time.time() + SKEW:
        raise ValueError(f"{what} {seconds:.4g} s since 1970 is not a plausible date")


def _text(x, what: str, empty: bool = True) -> None:
    """A text DuckDB can store: str, UTF-8 encodable (no lone surrogates), or None."""
    if x is None:
        return
    if not isinstance(x, str) or (not empty and not x):
        raise ValueError(f"{what} {str(x)[:40]!r} is not a text")
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {x[:40]!r} is not valid UTF-8 text") from None


def _json(x, what: str) -> None:
    try:
        json.dumps(x, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what} cannot be stored as JSON ({exc})") from None


def validate(run: Run, rows: list[Measurement]) -> None:
    """ValueError naming the first thing in the file that is not as it must be."""
    if not isinstance(run.commit_hash, str) or not COMMIT.fullmatch(run.commit_hash):
        raise ValueError(f"commit hash {str(run.commit_hash)[:50]!r} is not a git commit hash")
    _text(run.machine, "machine", empty=False)
    _text(run.env_name, "env_name")
    _text(run.branch, "branch")
    for what in ("commit_time", "started_at", "ended_at"):
        _check_date(getattr(run, what), what)
    fp = run.fingerprint
    for k in ("gpu", "driver", "cuda", "torch", "triton", "timm", "python", "mode"):
        _text(fp.get(k), f"the fingerprint's {k}")
    hv = fp.get("harness_version")
    if hv is not None and not (isinstance(hv, int) and 0 <= hv < 2**31):
        raise ValueError(f"harness_version {str(hv)[:40]!r} is not a small integer")
    _json(fp, "its fingerprint")
    if not rows:
        raise ValueError("no measurements (every cell skipped, or no result column)")
    seen = set()
    for m in rows:
        where = f"{m.benchmark}.{m.metric} {str(m.params)[:200]}"
        _text(m.benchmark, "a benchmark name", empty=False)
        _text(m.metric, "a metric name", empty=False)
        _text(m.unit, f"{where}: the unit")
        _text(m.version, f"{where}: the version")
        if not isinstance(m.params, dict) or not all(
            isinstance(k, str) and k and (isinstance(v, (str, int, float, bool)) or v is None)
            for k, v in m.params.items()
        ):
            raise ValueError(f"{where}: parameters are not a flat object of named values")
        _json(m.params, f"{where}: the parameters")
        for k, v in m.params.items():
            _text(k, "a parameter name")
            _text(v if isinstance(v, str) else None, f"{where}: a parameter")
        key = (m.benchmark, m.metric, param_key(m.params))
        if key in seen:
            raise ValueError(f"{where}: the same cell twice (names or parameters collide)")
        seen.add(key)
        if m.status == FAILED:
            continue
        _check_value(m.median, f"{where}: the value")
        for q, name in ((m.q25, "q25"), (m.q75, "q75")):
            if q is not None:
                _check_value(q, f"{where}: {name}")
        if m.samples is not None:
            if not isinstance(m.samples, list):
                raise ValueError(f"{where}: samples are {type(m.samples).__name__}, not a list")
            for x in m.samples:
                _check_value(x, f"{where}: a sample")
            _check_median(m, where)


def _check_median(m: Measurement, where: str) -> None:
    """The value must be the median of the samples (asv's: either middle one for an even
    count): the gate reads the samples, history the value, and both must tell one story."""
    if not m.samples:
        return
    xs = sorted(m.samples)
    lo, hi = xs[(len(xs) - 1) // 2], xs[len(xs) // 2]
    if not lo * (1 - 1e-9) <= m.median <= hi * (1 + 1e-9):
        raise ValueError(f"{where}: the value {m.median:.6g} is not the median of its samples")


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


def ingest(
    store: Store,
    paths: Iterable[Path],
    *,
    label: str | None = None,
    branch: str | None = None,
    log: Callable[[str], None] = lambda msg: None,
) -> Report:
    """Store every result file under ``paths``; -> what happened to each."""
    files = discover(paths)
    report = Report()
    t0 = time.perf_counter()
    every = max(1, len(files) // 20)  # progress: each file for small ingests, ~5% steps else
    batch: list[tuple[int, Path, Run, Columns]] = []
    new_runs: list[str] = []

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
                    new_runs.append(run.run_id)
                if i % every == 0 or i == len(files):
                    what = "already stored" if added is None else f"{added} rows"
                    rate = report.rows / (time.perf_counter() - t0)
                    log(f"[{i}/{len(files)}] {path.name}: {what} ({report.rows} in all, "
                        f"{rate:.0f} rows/s)")  # fmt: skip
        batch.clear()

    for i, path in enumerate(files, 1):
        try:
            run, rows = parse(path)
            run.label = label if label is not None else run.label
            run.branch = branch if branch is not None else run.branch
            batch.append((i, path, run, Columns(run.run_id, rows)))
        except ValueError as exc:
            refuse(path, str(exc))
        if batch and (i == len(files) or sum(len(b[3]) for b in batch) >= BATCH_ROWS):
            write()
    report.seconds = time.perf_counter() - t0
    if new_runs:  # the series that got a point: their stored change points brought up to date
        report.series = changepoints.update(store, new_runs)
        report.series_seconds = time.perf_counter() - t0 - report.seconds
    return report
