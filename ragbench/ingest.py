"""Result files into the store: asv result files (with the fingerprint beside them) and
pytest-benchmark JSON (``pytest --benchmark-json``).

Each file is parsed completely before anything is written, then stored in one transaction, so
a corrupt or truncated file is reported and skipped and the store keeps everything it had. A
run already stored (same source, machine, commit, environment and start time) is skipped:
ingesting twice changes nothing.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from . import asv_results, fingerprint
from .store import Measurement, Run, Store

# asv writes these beside its result files; they are not results.
NOT_RESULTS = {"benchmarks.json", "machine.json"}


@dataclass
class Report:
    """What an ingest did: files stored, already there, and refused (with the reason)."""

    stored: list[Path] = field(default_factory=list)
    duplicate: list[Path] = field(default_factory=list)
    failed: list[tuple[Path, str]] = field(default_factory=list)
    rows: int = 0
    seconds: float = 0.0

    def summary(self) -> str:
        rate = self.rows / self.seconds if self.seconds else 0.0
        return (
            f"{len(self.stored)} file(s) stored ({self.rows} rows, {rate:.0f} rows/s), "
            f"{len(self.duplicate)} already stored, {len(self.failed)} refused"
        )


def discover(paths: Iterable[Path]) -> list[Path]:
    """Result files under ``paths`` (files, or directories searched recursively)."""
    found: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found += sorted(
                p for p in path.rglob("*.json") if p.name not in NOT_RESULTS and p.is_file()
            )
        else:
            found.append(path)
    return list(dict.fromkeys(found))


def _iso(text: str | None) -> float | None:
    if not text:
        return None
    return datetime.fromisoformat(str(text).replace("Z", "+00:00")).timestamp()


def _metric(asv_name: str) -> tuple[str, str]:
    """``kernel.KernelLatency.track_call_us`` -> (``kernel.KernelLatency``, ``call_us``)."""
    bench, _, method = asv_name.rpartition(".")
    for prefix in ("track_", "time_", "peakmem_", "mem_"):
        if method.startswith(prefix):
            return bench, method.removeprefix("track_")
    return bench, method


def parse_asv(path: Path, data: dict) -> tuple[Run, list[Measurement]]:
    results_dir = path.parent.parent
    names, units = asv_results.param_names(results_dir), asv_results.units(results_dir)
    fp = fingerprint.read(path) or {}
    started, ended = asv_results.run_times(data)
    machine = (data.get("params") or {}).get("machine") or fp.get("machine") or path.parent.name
    run = Run(
        source="asv", commit_hash=data["commit_hash"], machine=machine, started_at=started,
        ended_at=ended, commit_time=data["date"] / 1e3 if data.get("date") else None,
        env_name=data.get("env_name"), fingerprint=fp,
        harness_version=fp.get("harness_version"), mode=fp.get("mode"), source_file=str(path),
    )  # fmt: skip
    rows = []
    for cell in asv_results.cells(data, names):
        if cell.value is None:  # skipped or failed: not a measurement
            continue
        bench, metric = _metric(cell.benchmark)
        rows.append(Measurement(
            benchmark=bench, metric=metric, params=cell.params, unit=units.get(cell.benchmark),
            median=cell.value, q25=cell.q25, q75=cell.q75, samples=cell.samples,
            version=cell.version,
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
        source_file=str(path),
    )  # fmt: skip
    rows = []
    for b in data["benchmarks"]:
        stats = b["stats"]
        name = b.get("fullname") or b["name"]
        bench = name.split("[", 1)[0]
        params = {k: v for k, v in (b.get("params") or {}).items()}
        rows.append(Measurement(
            benchmark=bench, metric="time", params=params, unit="s", median=stats["median"],
            q25=stats.get("q1"), q75=stats.get("q3"), samples=stats.get("data"),
        ))  # fmt: skip
        for key, value in (b.get("extra_info") or {}).items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                rows.append(Measurement(bench, key, params, _unit_of(key), float(value)))
    return run, rows


def parse(path: Path) -> tuple[Run, list[Measurement]]:
    """A result file's run and measurements; ValueError (with the reason) when it is not a
    complete asv or pytest-benchmark result file."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not readable as JSON ({exc})") from None
    try:
        if isinstance(data, dict) and "result_columns" in data:
            return parse_asv(Path(path), asv_results.load(path))
        if isinstance(data, dict) and "benchmarks" in data and "machine_info" in data:
            return parse_pytest_benchmark(Path(path), data)
    except (KeyError, TypeError, IndexError, AttributeError) as exc:
        raise ValueError(f"incomplete result file ({type(exc).__name__}: {exc})") from None
    raise ValueError("neither an asv result file nor pytest-benchmark JSON")


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
    for i, path in enumerate(files, 1):
        try:
            run, rows = parse(path)
        except ValueError as exc:
            report.failed.append((path, str(exc)))
            log(f"ragbench ingest: skipped {path}: {exc}")
            continue
        run.label = label if label is not None else run.label
        run.branch = branch if branch is not None else run.branch
        added = store.add_run(run, rows)
        if added is None:
            report.duplicate.append(path)
        else:
            report.stored.append(path)
            report.rows += added
        if i % every == 0 or i == len(files):
            rate = report.rows / (time.perf_counter() - t0)
            log(f"[{i}/{len(files)}] {path.name}: {report.rows} rows ({rate:.0f} rows/s)")
    report.seconds = time.perf_counter() - t0
    return report
