"""The results store: one DuckDB file, its schema, and the queries everything else uses.

No SQL lives outside this module: ingest, the gate, detection and the dashboard call the
functions below. Schema (``SCHEMA_VERSION``; docs/store.md describes every column):

    runs          one row per result file: commit, commit time, branch, machine, the
                  environment (fingerprint JSON and its main fields, ``env_key`` = a hash of
                  GPU, driver, CUDA, torch, triton, Python), harness version, mode, times, and a
                  ``label`` for runs a gate job made (``gate:<id>:base:0`` ...)
    measurements  one row per run x benchmark x parameter cell x metric: the parameters (JSON
                  and a canonical ``param_key``), unit, median, quartiles, raw samples
    acceptances   regressions a maintainer accepted (issue 7's PR label)
    views         ``series`` (measurements joined with their run), ``speedups`` (a candidate
                  backend against each other one in the same run and cell), ``dispatch_floors``,
                  ``drift``

DuckDB lets one process write a file at a time; ``Store`` waits for the lock (another ingest)
up to ``lock_timeout`` seconds instead of failing.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = Path("results/perf.duckdb")
ENV_VAR = "RAGBENCH_STORE"
SCHEMA_VERSION = 1
# The environment fields that move figures: a change of any is an environment change.
ENV_FIELDS = ("gpu", "driver", "cuda", "torch", "triton", "python")
# Parameters that name the thing being compared (a backend or a pipeline) in a cell.
VARIANT_PARAMS = ("backend", "pipeline")
# Units where a larger value is better; every other timed unit is a latency.
HIGHER_IS_BETTER = ("img/s", "rows/s", "ops/s")

_TABLES = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);
CREATE TABLE IF NOT EXISTS runs (
    run_id VARCHAR PRIMARY KEY,
    source VARCHAR NOT NULL,
    commit_hash VARCHAR NOT NULL,
    commit_time TIMESTAMP,
    branch VARCHAR,
    machine VARCHAR NOT NULL,
    env_name VARCHAR,
    env_key VARCHAR,
    gpu VARCHAR, driver VARCHAR, cuda VARCHAR, torch VARCHAR, triton VARCHAR,
    timm VARCHAR, python VARCHAR,
    harness_version INTEGER,
    mode VARCHAR,
    fingerprint JSON,
    started_at TIMESTAMP,
    ended_at TIMESTAMP,
    ingested_at TIMESTAMP DEFAULT current_timestamp,
    label VARCHAR,
    source_file VARCHAR
);
CREATE TABLE IF NOT EXISTS measurements (
    run_id VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    params JSON NOT NULL,
    param_key VARCHAR NOT NULL,
    variant VARCHAR,
    group_key VARCHAR NOT NULL,
    unit VARCHAR,
    version VARCHAR,
    median DOUBLE,
    q25 DOUBLE,
    q75 DOUBLE,
    n INTEGER,
    samples DOUBLE[],
    PRIMARY KEY (run_id, benchmark, metric, param_key)
);
CREATE TABLE IF NOT EXISTS acceptances (
    commit_hash VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    param_key VARCHAR NOT NULL,
    reason VARCHAR,
    accepted_by VARCHAR,
    accepted_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (commit_hash, benchmark, metric, param_key)
);
"""

_VIEWS = f"""
CREATE OR REPLACE VIEW series AS
SELECT m.*, r.commit_hash, r.commit_time, r.branch, r.machine, r.env_key, r.gpu, r.driver,
       r.cuda, r.torch, r.triton, r.python, r.harness_version, r.mode, r.label, r.started_at,
       r.source
FROM measurements m JOIN runs r USING (run_id);

CREATE OR REPLACE VIEW speedups AS
SELECT c.run_id, c.commit_hash, c.commit_time, c.machine, c.env_key, c.gpu, c.torch, c.triton,
       c.label, c.benchmark, c.metric, c.group_key, c.unit,
       c.variant AS candidate, b.variant AS baseline,
       c.median AS candidate_value, b.median AS baseline_value,
       CASE WHEN c.unit IN {HIGHER_IS_BETTER!r} THEN c.median / b.median
            ELSE b.median / c.median END AS speedup
FROM series c JOIN measurements b
  ON b.run_id = c.run_id AND b.benchmark = c.benchmark AND b.metric = c.metric
 AND b.group_key = c.group_key AND b.variant <> c.variant
WHERE c.variant IS NOT NULL AND c.median > 0 AND b.median > 0;

CREATE OR REPLACE VIEW dispatch_floors AS
SELECT run_id, commit_hash, commit_time, machine, env_key, gpu, torch, triton, label,
       json_extract_string(params, '$.backend') AS backend,
       json_extract_string(params, '$.geometry') AS geometry,
       max(median) FILTER (WHERE metric = 'floor_us') AS call_us,
       -- dispatch_us samples are call_us samples less the median gpu_us: medians subtract
       max(median) FILTER (WHERE metric = 'floor_us')
         - max(median) FILTER (WHERE metric = 'dispatch_us') AS gpu_us,
       max(median) FILTER (WHERE metric = 'dispatch_us') AS dispatch_us
FROM series WHERE benchmark = 'kernel.DispatchFloor'
GROUP BY ALL;

CREATE OR REPLACE VIEW drift AS
SELECT run_id, commit_hash, commit_time, machine, env_key, gpu, torch, triton, label,
       benchmark, group_key, variant AS backend,
       json_extract_string(params, '$.model') AS model,
       json_extract_string(params, '$.method') AS method,
       max(median) FILTER (WHERE metric = 'max_abs_diff') AS max_abs_diff,
       max(median) FILTER (WHERE metric = 'mean_abs_diff') AS mean_abs_diff,
       max(median) FILTER (WHERE metric = 'top1_agreement') AS top1_agreement,
       max(median) FILTER (WHERE metric = 'output_hash') AS output_hash
FROM series WHERE benchmark LIKE '%.Drift'
GROUP BY ALL;
"""


# measurements' columns, in order, as the types of unnest()'s list parameters
_COLUMN_TYPES = (
    *["VARCHAR"] * 3, "JSON", *["VARCHAR"] * 5, *["DOUBLE"] * 3, "INTEGER", "DOUBLE[]"
)  # fmt: skip
_INSERT_COLUMNS = "INSERT INTO measurements SELECT " + ", ".join(
    f"unnest(?::{t}[])" for t in _COLUMN_TYPES
)


def default_path() -> Path:
    """``$RAGBENCH_STORE`` or ``results/perf.duckdb``."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def param_key(params: dict) -> str:
    """Canonical text of a parameter cell: ``batch=1,backend=triton`` (sorted names)."""
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def env_key(fields: dict) -> str:
    """A short hash of the fields in ``ENV_FIELDS``: equal keys, same environment."""
    text = json.dumps({k: fields.get(k) for k in ENV_FIELDS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def lower_is_better(unit: str | None) -> bool:
    return unit not in HIGHER_IS_BETTER


@dataclass
class Run:
    """One result file's run. ``run_id`` is derived from what identifies the run (source,
    machine, commit, environment name, start time), so the same file always maps to it."""

    source: str
    commit_hash: str
    machine: str
    started_at: float | None  # seconds since the epoch
    commit_time: float | None = None
    ended_at: float | None = None
    branch: str | None = None
    env_name: str | None = None
    fingerprint: dict = field(default_factory=dict)
    harness_version: int | None = None
    mode: str | None = None
    label: str | None = None
    source_file: str | None = None

    @property
    def run_id(self) -> str:
        ident = f"{self.source}|{self.machine}|{self.commit_hash}|{self.env_name}|{self.started_at}"
        return hashlib.sha256(ident.encode()).hexdigest()[:20]


@dataclass
class Measurement:
    """One benchmark cell's metric in one run; ``samples`` None where only a value exists."""

    benchmark: str
    metric: str
    params: dict
    unit: str | None
    median: float | None
    q25: float | None = None
    q75: float | None = None
    samples: list[float] | None = None
    version: str | None = None

    def row(self, run_id: str) -> tuple:
        variant = next((str(self.params[p]) for p in VARIANT_PARAMS if p in self.params), None)
        group = {k: v for k, v in self.params.items() if k not in VARIANT_PARAMS}
        n = len(self.samples) if self.samples else (1 if self.median is not None else 0)
        return (
            run_id, self.benchmark, self.metric, json.dumps(self.params, sort_keys=True),
            param_key(self.params), variant, param_key(group), self.unit, self.version,
            self.median, self.q25, self.q75, n, self.samples,
        )  # fmt: skip


def _filters(equal: dict, gate_runs: bool = False) -> tuple[list[str], list]:
    """WHERE terms and their arguments: ``column = value`` for each value given, and no gate
    runs unless asked (they are a gate job's, not the history's)."""
    where = ["TRUE"] if gate_runs else ["(label IS NULL OR label NOT LIKE 'gate:%')"]
    args = []
    for col, val in equal.items():
        if val is not None:
            where.append(f"{col} = ?")
            args.append(val)
    return where, args


class StoreLocked(RuntimeError):
    """Another process held the store's write lock for longer than the timeout."""


def _ts(seconds: float | None):
    from datetime import UTC, datetime

    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


class Store:
    """A DuckDB results file. ``Store(path)`` creates it (and its schema) if needed.

    ``read_only=True`` opens an existing file for queries; it raises FileNotFoundError when
    there is none (the dashboard says how to fill it).
    """

    def __init__(self, path: Path | str | None = None, *, read_only: bool = False,
                 lock_timeout: float = 600.0, on_wait=None):  # fmt: skip
        import duckdb

        self.path = Path(path) if path is not None else default_path()
        if read_only and not self.path.exists():
            raise FileNotFoundError(f"no results store at {self.path}")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        deadline = time.monotonic() + lock_timeout
        waited = False
        while True:
            try:
                self.con = duckdb.connect(str(self.path), read_only=read_only)
                break
            except duckdb.IOException as exc:
                if "lock" not in str(exc).lower() or time.monotonic() > deadline:
                    if "lock" in str(exc).lower():
                        raise StoreLocked(f"{self.path} is locked by another process") from exc
                    raise
                if not waited and on_wait is not None:
                    on_wait(f"waiting for the lock on {self.path} (another ingest?)")
                waited = True
                time.sleep(0.2)
        if not read_only:
            self._create()

    def _create(self) -> None:
        self.con.execute(_TABLES)
        self.con.execute(_VIEWS)
        self.con.execute(
            "INSERT INTO meta VALUES ('schema_version', ?) ON CONFLICT DO NOTHING",
            [str(SCHEMA_VERSION)],
        )

    def close(self) -> None:
        self.con.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing --------------------------------------------------------------------------

    def has_run(self, run_id: str) -> bool:
        found = self.con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchone()
        return found is not None

    def add_run(self, run: Run, measurements: Iterable[Measurement]) -> int | None:
        """Store a run and its measurements in one transaction; -> rows added, or None when
        the run was already stored (nothing changes). On any error nothing of it is stored."""
        run_id = run.run_id
        rows = [m.row(run_id) for m in measurements]
        fp = run.fingerprint or {}
        self.con.execute("BEGIN TRANSACTION")
        try:
            if self.has_run(run_id):
                self.con.execute("ROLLBACK")
                return None
            self.con.execute(
                "INSERT INTO runs (run_id, source, commit_hash, commit_time, branch, machine, "
                "env_name, env_key, gpu, driver, cuda, torch, triton, timm, python, "
                "harness_version, mode, fingerprint, started_at, ended_at, label, source_file) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [run_id, run.source, run.commit_hash, _ts(run.commit_time), run.branch,
                 run.machine, run.env_name, env_key(fp), *(fp.get(k) for k in
                 ("gpu", "driver", "cuda", "torch", "triton", "timm", "python")),
                 run.harness_version, run.mode, json.dumps(fp, sort_keys=True),
                 _ts(run.started_at), _ts(run.ended_at), run.label, run.source_file],
            )  # fmt: skip
            if rows:  # one statement of column lists: 40x faster than executemany
                self.con.execute(_INSERT_COLUMNS, [list(col) for col in zip(*rows, strict=True)])
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise
        return len(rows)

    def accept(self, commit_hash: str, benchmark: str, metric: str, param_key: str,
               reason: str, accepted_by: str) -> None:  # fmt: skip
        """Record that a maintainer accepted a regression of this cell at ``commit_hash``."""
        self.con.execute(
            "INSERT OR REPLACE INTO acceptances (commit_hash, benchmark, metric, param_key, "
            "reason, accepted_by) VALUES (?, ?, ?, ?, ?, ?)",
            [commit_hash, benchmark, metric, param_key, reason, accepted_by],
        )

    def export_parquet(self, out_dir: Path) -> list[Path]:
        """Every table and view as ``<name>.parquet`` under ``out_dir``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        for name in ("runs", "measurements", "acceptances", "speedups", "dispatch_floors",
                     "drift"):  # fmt: skip
            path = out_dir / f"{name}.parquet"
            self.con.execute(f"COPY (SELECT * FROM {name}) TO '{path}' (FORMAT parquet)")
            paths.append(path)
        return paths

    # --- queries ---------------------------------------------------------------------------

    def _rows(self, sql: str, args: list | None = None, frame: bool = False):
        cur = self.con.execute(sql, args or [])
        if frame:
            return cur.df()
        cols = [d[0] for d in cur.description]
        return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def counts(self) -> dict[str, int]:
        return {
            t: self.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
            for t in ("runs", "measurements", "acceptances")
        }

    @property
    def mtime(self) -> float:
        """When the file last changed: a cache key for readers (the dashboard)."""
        return self.path.stat().st_mtime

    def machines(self) -> list[str]:
        rows = self.con.execute("SELECT DISTINCT machine FROM runs ORDER BY 1").fetchall()
        return [r[0] for r in rows]

    def runs(self, *, machine: str | None = None, commit: str | None = None,
             label: str | None = None, gate_runs: bool = False, frame: bool = False):  # fmt: skip
        """Runs, newest commit first. ``commit`` matches a prefix; ``label`` a LIKE pattern;
        gate runs (labelled ``gate:%``) only when ``gate_runs`` or a ``label`` is given."""
        where, args = _filters({"machine": machine}, gate_runs or bool(label))
        if commit:
            where.append("starts_with(commit_hash, ?)")
            args.append(commit)
        if label:
            where.append("label LIKE ?")
            args.append(label)
        return self._select("* EXCLUDE (fingerprint)", "runs", where, args,
                            "commit_time DESC NULLS LAST, started_at DESC", frame)  # fmt: skip

    def measurements(self, run_ids: list[str]) -> list[dict]:
        """Every measurement of these runs, samples included."""
        if not run_ids:
            return []
        return self._rows("SELECT * FROM series WHERE list_contains(?, run_id)", [list(run_ids)])

    def series(self, *, benchmark: str | None = None, metric: str | None = None,
               machine: str | None = None, params: dict | None = None,
               since=None, until=None, gate_runs: bool = False, samples: bool = False,
               frame: bool = False):  # fmt: skip
        """One row per run and cell, oldest commit first: the history the dashboard plots and
        detection reads. ``params`` filters on parameter values; ``since``/``until`` on the
        commit time."""
        where, args = _filters(
            {"benchmark": benchmark, "metric": metric, "machine": machine}, gate_runs
        )
        for k, v in (params or {}).items():
            where.append("json_extract_string(params, ?) = ?")
            args += [f"$.{k}", str(v)]
        for op, t in ((">=", since), ("<=", until)):
            if t is not None:
                where.append(f"commit_time {op} ?")
                args.append(t)
        cols = "*" if samples else "* EXCLUDE (samples)"
        return self._select(cols, "series", where, args, "commit_time NULLS FIRST, started_at",
                            frame)  # fmt: skip

    def speedups(self, *, candidate: str = "triton", machine: str | None = None,
                 benchmark: str | None = None, frame: bool = False):  # fmt: skip
        """``candidate`` against every other backend/pipeline in the same run and cell."""
        where, args = _filters({"candidate": candidate, "machine": machine, "benchmark": benchmark})
        return self._select("*", "speedups", where, args, "commit_time", frame)

    def dispatch_floors(self, *, machine: str | None = None, frame: bool = False):
        where, args = _filters({"machine": machine})
        return self._select("*", "dispatch_floors", where, args, "commit_time", frame)

    def drift(self, *, machine: str | None = None, frame: bool = False):
        where, args = _filters({"machine": machine})
        return self._select("*", "drift", where, args, "commit_time", frame)

    def _select(self, cols, source, where, args, order, frame):
        sql = f"SELECT {cols} FROM {source} WHERE {' AND '.join(where)} ORDER BY {order}"
        return self._rows(sql, args, frame)

    def acceptances(self, commit_hash: str | None = None) -> list[dict]:
        if commit_hash:
            return self._rows(
                "SELECT * FROM acceptances WHERE starts_with(commit_hash, ?)", [commit_hash]
            )
        return self._rows("SELECT * FROM acceptances ORDER BY accepted_at")
