"""The results store: one DuckDB file, its schema, and the queries everything else uses.

No SQL lives outside this module: ingest, the gate, detection and the dashboard call the
functions below. Schema (``SCHEMA_VERSION``; docs/store.md describes every column):

    runs          one row per result file: commit, commit time, branch, machine, the
                  environment (fingerprint JSON and its main fields, ``env_key`` = a hash of
                  GPU, driver, CUDA, torch, triton, Python), harness version, mode, times, and a
                  ``label`` for runs a gate job made (``gate:<id>:base:0`` ...)
    measurements  one row per run x benchmark x parameter cell x metric: the parameters (JSON
                  and a canonical ``param_key``), unit, median, quartiles, raw samples, and a
                  ``status``: ``ok``, or ``failed`` where the benchmark raised (no value)
    acceptances   failures a maintainer accepted on a pull request (the label), per cell and
                  commit; carried to the main commit that merged them
    gates         the verdict of each pull-request gate the trusted workflow read
    views         ``series`` (measurements joined with their run), ``speedups`` (a candidate
                  backend against each other one in the same run and cell), ``dispatch_floors``,
                  ``drift``

History is main's: the history queries (``series``, ``runs``, the views' readers) return runs
of one branch, ``main`` unless ``$RAGBENCH_BRANCH`` or ``branch=`` says otherwise, and never a
gate job's runs. ``any_branch=True`` lifts the branch filter (the gate's stored comparison).

Connections are short: a reader opens the file read-only for one query, a writer read-write for
one transaction (ingest keeps its connection for a slice of files, at most ``WRITE_SLICE``
seconds). DuckDB lets one process write a file, or many read it, at a time; whoever finds it
locked waits (``lock_timeout``), so a reader waits at most one writer's slice.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_PATH = Path("results/perf.duckdb")
ENV_VAR = "RAGBENCH_STORE"
BRANCH_VAR = "RAGBENCH_BRANCH"
HISTORY_BRANCH = "main"
SCHEMA_VERSION = 2  # a new table, column or view needs a new version: that is what migrates
# The environment fields that move figures: a change of any is an environment change.
ENV_FIELDS = ("gpu", "driver", "cuda", "torch", "triton", "python")
# Parameters that name the thing being compared (a backend or a pipeline) in a cell.
VARIANT_PARAMS = ("backend", "pipeline")
# Units where a larger value is better; every other timed unit is a latency.
HIGHER_IS_BETTER = ("img/s", "rows/s", "ops/s")
# Units a speedup is taken of: times and throughputs (a ratio of hashes, drift or clocks is
# no speedup).
SPEED_UNITS = ("us", "ms", "s", "seconds", *HIGHER_IS_BETTER)
# A measurement's status: a value, or a benchmark that raised (asv records it as null).
OK, FAILED = "ok", "failed"
# How long a writer may keep the file between transactions before it lets readers in: opening
# the file costs ~15 ms, so one connection per file would make a 1,000-file ingest 3x slower.
WRITE_SLICE = 0.25
LOCK_POLL = 0.02  # seconds between tries for a locked file

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
CREATE TABLE IF NOT EXISTS gates (
    pr INTEGER NOT NULL,
    head VARCHAR NOT NULL,
    base VARCHAR,
    machine VARCHAR,
    failures JSON NOT NULL,
    report VARCHAR,
    recorded_at TIMESTAMP DEFAULT current_timestamp,
    PRIMARY KEY (pr, head)
);
"""
# Schema 1 -> 2: a status per measurement; acceptances name their pull request and the commit
# they were given on (a main commit's carried copy names the PR head).
_MIGRATIONS = """
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS status VARCHAR DEFAULT 'ok';
ALTER TABLE acceptances ADD COLUMN IF NOT EXISTS pr INTEGER;
ALTER TABLE acceptances ADD COLUMN IF NOT EXISTS given_on VARCHAR;
"""

_VIEWS = f"""
CREATE OR REPLACE VIEW series AS
SELECT m.*, r.commit_hash, r.commit_time, r.branch, r.machine, r.env_key, r.gpu, r.driver,
       r.cuda, r.torch, r.triton, r.python, r.harness_version, r.mode, r.label, r.started_at,
       r.source
FROM measurements m JOIN runs r USING (run_id);

CREATE OR REPLACE VIEW speedups AS
SELECT c.run_id, c.commit_hash, c.commit_time, c.branch, c.machine, c.env_key, c.gpu, c.torch,
       c.triton, c.label, c.benchmark, c.metric, c.group_key, c.unit,
       c.variant AS candidate, b.variant AS baseline,
       c.median AS candidate_value, b.median AS baseline_value,
       CASE WHEN c.unit IN {HIGHER_IS_BETTER!r} THEN c.median / b.median
            ELSE b.median / c.median END AS speedup
FROM series c JOIN measurements b
  ON b.run_id = c.run_id AND b.benchmark = c.benchmark AND b.metric = c.metric
 AND b.group_key = c.group_key AND b.variant <> c.variant
WHERE c.variant IS NOT NULL AND c.median > 0 AND b.median > 0 AND c.unit IN {SPEED_UNITS!r};

CREATE OR REPLACE VIEW dispatch_floors AS
SELECT run_id, commit_hash, commit_time, branch, machine, env_key, gpu, torch, triton, label,
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
SELECT run_id, commit_hash, commit_time, branch, machine, env_key, gpu, torch, triton, label,
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

# Every table and view of a ragbench store: a file holding anything else is not one.
_OURS = {"meta", "runs", "measurements", "acceptances", "gates", "series", "speedups",
         "dispatch_floors", "drift"}  # fmt: skip

_MEASUREMENT_COLUMNS = (
    "run_id", "benchmark", "metric", "params", "param_key", "variant", "group_key", "unit",
    "version", "median", "q25", "q75", "n", "samples", "status",
)  # fmt: skip
_COLUMN_TYPES = (*["VARCHAR"] * 3, "JSON", *["VARCHAR"] * 5, *["DOUBLE"] * 3, "INTEGER",
                 "DOUBLE[]", "VARCHAR")  # fmt: skip
_INSERT_COLUMNS = (
    f"INSERT INTO measurements ({', '.join(_MEASUREMENT_COLUMNS)}) SELECT "
    + ", ".join(f"unnest(?::{t}[])" for t in _COLUMN_TYPES)
)


def default_path() -> Path:
    """``$RAGBENCH_STORE`` or ``results/perf.duckdb``."""
    return Path(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def history_branch() -> str:
    """The branch whose runs are the history: ``$RAGBENCH_BRANCH``, else ``main``."""
    return os.environ.get(BRANCH_VAR) or HISTORY_BRANCH


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
        """The same for the same file on main (or on the branch it names); a file ingested
        for another branch too is another run, so a pull request's ingest can never make
        main's ingest of the same file read as 'already stored'."""
        ident = f"{self.source}|{self.machine}|{self.commit_hash}|{self.env_name}|{self.started_at}"
        if self.branch != HISTORY_BRANCH:
            ident += f"|branch={self.branch}"
        return hashlib.sha256(ident.encode()).hexdigest()[:20]


@dataclass
class Measurement:
    """One benchmark cell's metric in one run; ``samples`` None where only a value exists;
    ``status`` ``failed`` (and no value) where the benchmark raised."""

    benchmark: str
    metric: str
    params: dict
    unit: str | None
    median: float | None
    q25: float | None = None
    q75: float | None = None
    samples: list[float] | None = None
    version: str | None = None
    status: str = OK

    def row(self, run_id: str) -> tuple:
        variant = next((str(self.params[p]) for p in VARIANT_PARAMS if p in self.params), None)
        group = {k: v for k, v in self.params.items() if k not in VARIANT_PARAMS}
        n = len(self.samples) if self.samples else (1 if self.median is not None else 0)
        return (
            run_id, self.benchmark, self.metric, json.dumps(self.params, sort_keys=True),
            param_key(self.params), variant, param_key(group), self.unit, self.version,
            self.median, self.q25, self.q75, n, self.samples, self.status,
        )  # fmt: skip


class StoreError(RuntimeError):
    """The store cannot be used: not a DuckDB file, not a ragbench store, a newer schema."""


class StoreLocked(StoreError):
    """Another process held the store for longer than the timeout."""


def _ts(seconds: float | None):
    from datetime import UTC, datetime

    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


class Store:
    """A DuckDB results file. ``Store(path)`` creates it (and its schema) if needed, or brings
    an older schema up to date; it holds no connection between calls.

    ``read_only=True`` opens an existing file for queries; it raises FileNotFoundError when
    there is none (the dashboard says how to fill it). ``branch`` names the history's branch
    (default ``history_branch()``).
    """

    def __init__(self, path: Path | str | None = None, *, read_only: bool = False,
                 lock_timeout: float | None = None, on_wait=None,
                 branch: str | None = None):  # fmt: skip
        self.path = Path(path) if path is not None else default_path()
        self.read_only = read_only
        self.lock_timeout = (60.0 if read_only else 600.0) if lock_timeout is None else lock_timeout
        self.on_wait = on_wait
        self.branch = branch or history_branch()
        self._writer = None  # the connection of an open write slice (``writing``)
        self._checked = False  # the schema, checked on the first connection
        if read_only:
            if not self.path.exists():
                raise FileNotFoundError(f"no results store at {self.path}")
        else:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect(write=True) as con:
                self._create(con)
            self._checked = True

    # --- connections ----------------------------------------------------------------------

    def _open(self, write: bool):
        import duckdb

        if self.path.exists() and not self.path.is_file():  # a FIFO would hang DuckDB
            raise StoreError(f"{self.path} is not a regular file")
        deadline = time.monotonic() + self.lock_timeout
        waited = False
        while True:
            try:
                # no extension is ever loaded on its own: a SQLite or Parquet file must not
                # make DuckDB download one and open it
                return duckdb.connect(str(self.path), read_only=not write, config={
                    "autoload_known_extensions": False, "autoinstall_known_extensions": False,
                })  # fmt: skip
            except duckdb.Error as exc:
                if "lock" not in str(exc).lower():
                    raise StoreError(f"{self.path} is not a usable DuckDB store: {exc}") from None
                if time.monotonic() > deadline:
                    raise StoreLocked(
                        f"{self.path} stayed locked by another process for "
                        f"{self.lock_timeout:.0f} s"
                    ) from None
                if not waited and self.on_wait is not None:
                    self.on_wait(f"waiting for the lock on {self.path} (another writer?)")
                waited = True
                time.sleep(LOCK_POLL)

    @contextlib.contextmanager
    def _connect(self, write: bool = False) -> Iterator:
        """A connection for one query (read-only) or one transaction (read-write); inside
        ``writing()`` the write slice's own connection. DuckDB's errors become StoreError."""
        import duckdb

        own = self._writer is None
        if own and write and self.read_only:
            raise StoreError(f"{self.path} was opened read-only")
        con = self._open(write) if own else self._writer
        try:
            if not self._checked and not write:
                self._check_schema(con)
                self._checked = True
            yield con
        except duckdb.Error as exc:
            raise StoreError(
                f"{self.path} cannot be used as a ragbench store (DuckDB {type(exc).__name__}: "
                f"{exc})"
            ) from None
        finally:
            if own:
                con.close()

    @contextlib.contextmanager
    def writing(self) -> Iterator[Store]:
        """Keep one write connection for a series of transactions (an ingest of many files),
        handing the file to waiting readers every ``WRITE_SLICE`` seconds (``yield_slice``)."""
        self._writer = self._open(write=True)
        self._slice_started = time.monotonic()
        try:
            yield self
        finally:
            self._writer.close()
            self._writer = None

    def yield_slice(self) -> None:
        """Between two transactions of ``writing()``: close and reopen the connection once the
        slice is used up, so that readers get the file in between."""
        if self._writer is not None and time.monotonic() - self._slice_started > WRITE_SLICE:
            self._writer.close()
            time.sleep(LOCK_POLL * 2)  # long enough for a waiting reader's next try
            self._writer = self._open(write=True)
            self._slice_started = time.monotonic()

    def _schema(self, con) -> int | None:
        """The file's schema version, None when it has no ``meta`` table; StoreError when it
        is newer than this ragbench's."""
        import duckdb

        try:
            rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except duckdb.CatalogException:
            return None
        version = int(rows[0][0]) if rows else None
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has store schema {version}, newer than this ragbench's "
                f"({SCHEMA_VERSION}): update ragbench"
            )
        return version

    def _check_schema(self, con) -> None:
        """For readers: a ragbench store of this schema, or StoreError saying what it is."""
        version = self._schema(con)
        if version is None or self._foreign(con):
            raise StoreError(f"{self.path} is a DuckDB file but not a ragbench store")
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"{self.path} has store schema {version}: open it once for writing (any "
                f"ragbench ingest) to bring it to schema {SCHEMA_VERSION}"
            )

    @staticmethod
    def _foreign(con) -> bool:
        """Whether the file holds anything that is not ragbench's (or lacks its runs)."""
        names = {r[0] for r in con.execute(
            "SELECT table_name FROM duckdb_tables() UNION ALL "
            "SELECT view_name FROM duckdb_views() WHERE NOT internal UNION ALL "
            "SELECT sequence_name FROM duckdb_sequences() UNION ALL "
            "SELECT function_name FROM duckdb_functions() WHERE NOT internal UNION ALL "
            "SELECT schema_name FROM duckdb_schemas() WHERE NOT internal AND schema_name <> "
            "'main'"
        ).fetchall()}  # fmt: skip
        return bool(names) and (not names <= _OURS or "runs" not in names)

    def _create(self, con) -> None:
        """The schema, created in an empty file or migrated from an older one; a store
        already at this version is not written, and a file of anything else is refused."""
        if self._foreign(con):
            raise StoreError(f"{self.path} is a DuckDB file of other things, not a ragbench store")
        if self._schema(con) == SCHEMA_VERSION:
            return
        con.execute("BEGIN TRANSACTION")
        con.execute(_TABLES)
        con.execute(_MIGRATIONS)
        con.execute(_VIEWS)
        con.execute(
            "INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)]
        )
        con.execute("COMMIT")

    def close(self) -> None:
        """Nothing to close between calls; kept so that ``with Store(...)`` reads as before."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing --------------------------------------------------------------------------

    def add_run(self, run: Run, measurements: Iterable[Measurement]) -> int | None:
        """Store a run and its measurements in one transaction; -> rows added, or None when
        the run was already stored (nothing changes). On any error nothing of it is stored."""
        import duckdb

        run_id = run.run_id
        rows = [m.row(run_id) for m in measurements]
        fp = run.fingerprint or {}
        with self._connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            try:
                if con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchall():
                    con.execute("ROLLBACK")
                    return None
                con.execute(
                    "INSERT INTO runs (run_id, source, commit_hash, commit_time, branch, "
                    "machine, env_name, env_key, gpu, driver, cuda, torch, triton, timm, python, "
                    "harness_version, mode, fingerprint, started_at, ended_at, label, "
                    "source_file) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
                    "?, ?, ?, ?)",
                    [run_id, run.source, run.commit_hash, _ts(run.commit_time), run.branch,
                     run.machine, run.env_name, env_key(fp), *(fp.get(k) for k in
                     ("gpu", "driver", "cuda", "torch", "triton", "timm", "python")),
                     run.harness_version, run.mode, json.dumps(fp, sort_keys=True),
                     _ts(run.started_at), _ts(run.ended_at), run.label, run.source_file],
                )  # fmt: skip
                if rows:  # one statement of column lists: 40x faster than executemany
                    con.execute(_INSERT_COLUMNS, [list(col) for col in zip(*rows, strict=True)])
                con.execute("COMMIT")
            except (duckdb.ConstraintException, duckdb.ConversionException,
                    duckdb.InvalidInputException) as exc:  # fmt: skip
                con.execute("ROLLBACK")  # the file's data: it is refused, the store goes on
                raise ValueError(
                    f"the store refused its data ({type(exc).__name__}: {exc})"
                ) from None
            except BaseException:
                con.execute("ROLLBACK")
                raise
        return len(rows)

    def accept(self, commit_hash: str, benchmark: str, metric: str, param_key: str,
               reason: str, accepted_by: str, pr: int | None = None,
               given_on: str | None = None) -> None:  # fmt: skip
        """Record that a maintainer accepted a failure of this cell at ``commit_hash``."""
        self.accept_cells(commit_hash, [(benchmark, metric, param_key)], reason, accepted_by,
                          pr=pr, given_on=given_on)  # fmt: skip

    def accept_cells(self, commit_hash: str, cells: list[tuple[str, str, str]], reason: str,
                     accepted_by: str, *, pr: int | None = None,
                     given_on: str | None = None) -> None:  # fmt: skip
        """``accept`` for many cells (benchmark, metric, param_key) in one transaction."""
        with self._connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            for bench, metric, key in cells:
                con.execute(
                    "INSERT OR REPLACE INTO acceptances (commit_hash, benchmark, metric, "
                    "param_key, reason, accepted_by, pr, given_on) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    [commit_hash, bench, metric, key, reason, accepted_by, pr,
                     given_on or commit_hash],
                )  # fmt: skip
            con.execute("COMMIT")

    def withdraw(self, commit_hash: str, pr: int) -> int:
        """Delete the acceptances given on pull request ``pr`` at ``commit_hash`` (the label
        was removed); -> how many."""
        where = "WHERE commit_hash = ? AND pr = ?"
        with self._connect(write=True) as con:
            ((n,),) = con.execute(
                f"SELECT count(*) FROM acceptances {where}", [commit_hash, pr]
            ).fetchall()
            con.execute(f"DELETE FROM acceptances {where}", [commit_hash, pr])
        return n

    def carry_acceptances(self, main_commit: str, merged: list[str], prs: list[int]) -> int:
        """Copy to ``main_commit`` the acceptances given on the commits it merged, or on the
        pull requests it names (a squash merge's ``(#12)``): the lookback then sees the change
        as accepted there. -> how many cells."""
        with self._connect(write=True) as con:
            con.execute("BEGIN TRANSACTION")
            ((n,),) = con.execute(
                "SELECT count(*) FROM acceptances WHERE commit_hash <> ? AND "
                "(list_contains(?::VARCHAR[], commit_hash) OR list_contains(?::INTEGER[], pr))",
                [main_commit, merged, prs],
            ).fetchall()
            con.execute(
                "INSERT OR REPLACE INTO acceptances (commit_hash, benchmark, metric, param_key, "
                "reason, accepted_by, accepted_at, pr, given_on) "
                "SELECT ?, benchmark, metric, param_key, reason, accepted_by, accepted_at, pr, "
                "given_on FROM acceptances WHERE commit_hash <> ? AND "
                "(list_contains(?::VARCHAR[], commit_hash) OR list_contains(?::INTEGER[], pr))",
                [main_commit, main_commit, merged, prs],
            )
            con.execute("COMMIT")
        return n

    def record_gate(self, pr: int, head: str, base: str | None, machine: str | None,
                    failures: list[dict], report: str = "") -> None:  # fmt: skip
        """The verdict of a pull request's gate (its failing cells and its markdown report),
        as the trusted workflow read it."""
        with self._connect(write=True) as con:
            con.execute(
                "INSERT OR REPLACE INTO gates (pr, head, base, machine, failures, report) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                [pr, head, base, machine, json.dumps(failures, sort_keys=True), report],
            )

    def export_parquet(self, out_dir: Path) -> list[Path]:
        """Every table and view as ``<name>.parquet`` under ``out_dir``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        with self._connect() as con:
            for name in ("meta", "runs", "measurements", "acceptances", "gates", "series",
                         "speedups", "dispatch_floors", "drift"):  # fmt: skip
                path = out_dir / f"{name}.parquet"
                con.table(name).write_parquet(str(path))  # the path never enters SQL
                paths.append(path)
        return paths

    # --- queries ---------------------------------------------------------------------------

    def _rows(self, sql: str, args: list | None = None, frame: bool = False):
        with self._connect() as con:
            cur = con.execute(sql, args or [])
            if frame:
                return cur.df()
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]

    def _filters(self, equal: dict, gate_runs: bool = False,
                 any_branch: bool = False) -> tuple[list[str], list]:  # fmt: skip
        """WHERE terms and their arguments: ``column = value`` for each value given, the
        history's branch unless ``any_branch``, and no gate runs unless asked (they are a gate
        job's, not the history's)."""
        where = ["TRUE"] if gate_runs else ["(label IS NULL OR label NOT LIKE 'gate:%')"]
        args = []
        if not any_branch:
            where.append("branch = ?")
            args.append(self.branch)
        for col, val in equal.items():
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        return where, args

    def counts(self) -> dict[str, int]:
        with self._connect() as con:
            return {
                t: con.execute(f"SELECT count(*) FROM {t}").fetchall()[0][0]
                for t in ("runs", "measurements", "acceptances", "gates")
            }

    @property
    def mtime(self) -> float:
        """When the file last changed: a cache key for readers (the dashboard)."""
        return self.path.stat().st_mtime

    def machines(self) -> list[str]:
        return [r["machine"] for r in self._rows("SELECT DISTINCT machine FROM runs ORDER BY 1")]

    def branches(self) -> dict[str, int]:
        """Each branch with its number of runs (``None``: runs ingested without one)."""
        rows = self._rows("SELECT branch, count(*) AS n FROM runs GROUP BY 1 ORDER BY 2 DESC, 1")
        return {r["branch"]: r["n"] for r in rows}

    def runs(self, *, machine: str | None = None, commit: str | None = None,
             label: str | None = None, gate_runs: bool = False, any_branch: bool = False,
             frame: bool = False):  # fmt: skip
        """Runs of the history's branch, newest commit first. ``commit`` matches a prefix;
        ``label`` a LIKE pattern; gate runs (labelled ``gate:%``) only when ``gate_runs`` or a
        ``label`` is given, and then of any branch."""
        where, args = self._filters({"machine": machine}, gate_runs or bool(label),
                                    any_branch or bool(label))  # fmt: skip
        if commit:
            where.append("starts_with(commit_hash, ?)")
            args.append(commit)
        if label:
            where.append("label LIKE ?")
            args.append(label)
        return self._select("* EXCLUDE (fingerprint)", "runs", where, args,
                            "commit_time DESC NULLS LAST, started_at DESC", frame)  # fmt: skip

    def measurements(self, run_ids: list[str]) -> list[dict]:
        """Every measurement of these runs (any branch), samples included."""
        if not run_ids:
            return []
        return self._rows("SELECT * FROM series WHERE list_contains(?, run_id)", [list(run_ids)])

    def series(self, *, benchmark: str | None = None, metric: str | None = None,
               machine: str | None = None, params: dict | None = None,
               since=None, until=None, gate_runs: bool = False, samples: bool = False,
               status: str | None = OK, frame: bool = False):  # fmt: skip
        """One row per run and cell of the history's branch, oldest commit first: what the
        dashboard plots and detection reads. ``params`` filters on parameter values;
        ``since``/``until`` on the commit time; ``status`` ``ok`` (values, the default),
        ``failed``, or None for both."""
        where, args = self._filters(
            {"benchmark": benchmark, "metric": metric, "machine": machine, "status": status},
            gate_runs,
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
        where, args = self._filters(
            {"candidate": candidate, "machine": machine, "benchmark": benchmark}
        )
        return self._select("*", "speedups", where, args, "commit_time", frame)

    def dispatch_floors(self, *, machine: str | None = None, frame: bool = False):
        where, args = self._filters({"machine": machine})
        return self._select("*", "dispatch_floors", where, args, "commit_time", frame)

    def drift(self, *, machine: str | None = None, frame: bool = False):
        where, args = self._filters({"machine": machine})
        return self._select("*", "drift", where, args, "commit_time", frame)

    def _select(self, cols, source, where, args, order, frame):
        sql = f"SELECT {cols} FROM {source} WHERE {' AND '.join(where)} ORDER BY {order}"
        return self._rows(sql, args, frame)

    def acceptances(self, commit_hash: str | None = None, *, frame: bool = False):
        """Accepted cells, of one commit (a prefix) or all, oldest first."""
        if commit_hash:
            return self._rows(
                "SELECT * FROM acceptances WHERE starts_with(commit_hash, ?) ORDER BY accepted_at",
                [commit_hash], frame,
            )  # fmt: skip
        return self._rows("SELECT * FROM acceptances ORDER BY accepted_at", frame=frame)

    def gate(self, pr: int, head: str) -> dict | None:
        """The recorded verdict of ``pr``'s gate at ``head`` (``failures`` parsed), or None."""
        rows = self._rows("SELECT * FROM gates WHERE pr = ? AND head = ?", [pr, head])
        if not rows:
            return None
        return {**rows[0], "failures": json.loads(rows[0]["failures"])}
