"""The results store: one DuckDB file or a DuckLake (``ragbench/lake.py``), its schema, and
the queries everything else uses.

No SQL lives outside this module, its schema (``schema.py``) and the lake's calls (``lake.py``):
ingest, the gate, detection and the dashboard call the functions below. Schema
(``SCHEMA_VERSION``; docs/store.md describes every column):

    runs          one row per result file: commit, commit time, branch, machine (and the
                  ``runner`` the file names, where ``[machines]`` maps it), the environment
                  (fingerprint JSON and its main fields; ``environment``, the one another
                  harness defines; ``env_key``, see ``Run.env_key``), harness version, mode,
                  times, and a ``label`` for runs a gate job made (``gate:<id>:base:0`` ...)
    measurements  one row per run x benchmark x parameter cell x metric: the parameters (JSON
                  and a canonical ``param_key``), unit, median, quartiles, raw samples, asv's
                  ``stats_number``/``stats_repeat`` and its 99% confidence interval of the value
                  (``ci_99_a``, ``ci_99_b``), and a ``status``: ``ok``, or ``failed`` where the
                  benchmark raised (no value)
    acceptances   failures a maintainer accepted on a pull request (the label), per cell and
                  commit; carried to the main commit that merged them
    gates         the verdict of each pull-request gate the trusted workflow read
    views         ``series`` (measurements joined with their run), ``speedups`` (a candidate
                  backend against each other one in the same run and cell), ``dispatch_floors``,
                  ``drift``

History is main's: the history queries (``series``, ``runs``, the views' readers) return runs
of one branch, ``main`` unless ``$RAGBENCH_BRANCH`` or ``branch=`` says otherwise, and never a
gate job's runs. ``any_branch=True`` lifts the branch filter (the gate's stored comparison).

File connections are short: a reader opens the file read-only for one query, a writer
read-write for one transaction of at most ``SLICE_ROWS`` measurements (ingest keeps its
connection for a slice of transactions, at most ``WRITE_SLICE`` seconds, and never while it
reads a file). DuckDB lets one process write a file, or many read it, at a time; whoever finds
it locked waits (``lock_timeout``), so a reader waits at most one writer's slice. A run of more
rows than a transaction takes is written in slices under a claim in ``meta`` and shows when
its ``runs`` row, written last, does (``_add_in_slices``); until then no query sees its rows.

A lake has no lock: readers read a snapshot, and writers of many processes and machines commit
optimistically. DuckLake has no primary keys, so every write transaction also rewrites one row
of ``meta`` (``_guard``): two writers that overlap conflict there, and the loser retries its
transaction from the start, where it sees what the winner stored (a run is never stored twice).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .lake import (
    ALIAS,
    CONFLICT,
    DUCKDB_CONFIG,
    Lake,
    is_lake,
    is_unanswered,
    one_line,
    quiet,
    redact,
)
from .lake import files as lake_files
from .lake import maintain as lake_maintain
from .lake import snapshot as lake_snapshot
from .schema import (
    ACCEPTANCE_KEY,
    DROP_CHANGE_POINTS,
    HIGHER_IS_BETTER,
    INSERT_COLUMNS,
    MIGRATIONS,
    OURS,
    TABLES,
    VIEWS,
    lake_ddl,
)

DEFAULT_PATH = Path("results/perf.duckdb")
ENV_VAR = "RAGBENCH_STORE"
BRANCH_VAR = "RAGBENCH_BRANCH"
HISTORY_BRANCH = "main"
SCHEMA_VERSION = 4  # a new table, column or view needs a new version: that is what migrates
# The environment fields that move figures: a change of any is an environment change.
ENV_FIELDS = ("gpu", "driver", "cuda", "torch", "triton", "python")
# Parameters that name the thing being compared (a backend or a pipeline) in a cell.
VARIANT_PARAMS = ("backend", "pipeline")
# A measurement's status: a value, or a benchmark that raised (asv records it as null).
OK, FAILED = "ok", "failed"
# How long a writer may keep the file between transactions before it lets a waiting reader in:
# opening the file costs ~15 ms, so one connection per file would make a 1,000-file ingest 3x
# slower. A process waiting for the lock says so (``waiting_marker``); with nobody waiting the
# writer keeps the file for ``WRITE_HOLD``: each close checkpoints the file (0.3 s a close into a
# 1,000-commit store at a load of 8), and releasing it every WRITE_SLICE spent 51 s of a 175 s
# ingest of 1,000 result files closing it. WRITE_HOLD bounds the wait of a reader that cannot
# leave the marker (a read-only directory).
WRITE_SLICE = 0.25
WRITE_HOLD = 2.0
# The most measurements one insert statement takes, and one write transaction of a file
# unless it is a slice of a larger run (``WRITE_SLICE`` seconds of such statements): 100,000
# took 1.2 s to insert and 0.16 s to commit here idle, and 10 s to insert with the machine's
# two cores shared by five other jobs; 2,000 take 1/50 of that. A full run is 750 at most.
SLICE_ROWS = 2_000
CLAIM = "ingest:"  # ``meta`` key of a run being written in slices: CLAIM + run_id
# A claim whose writer has not written a slice for this long is taken over (a writer on
# another host, or one whose process id was reused); a dead local process's at once.
CLAIM_STALE = 300.0
LOCK_POLL = 0.02  # seconds between tries for a locked file
# DuckDB creates a new file empty and then writes its header (3 blocks of 4 KiB); another
# process opening it in between gets "not a valid DuckDB database file" (found by four
# concurrent ingests into a new store on CI), and one that opens it to create it too truncates
# it under the first (four ingests then all failed: "not a valid DuckDB database file", CI,
# 2026-11-25). So a new store is made aside and linked into place (``_make_file``); a file
# shorter than a header (made by other means) is taken as one being created, for up to
# CREATING_WAIT seconds; then, and for any longer file, it is unusable.
HEADER_BYTES = 3 * 4096
CREATING_WAIT = 10.0
GUARD_KEY = "writer"  # the row of ``meta`` that every write transaction rewrites
# DuckDB 1.4's words, attaching read-only a lake that is not there: its catalog file, or
# DuckLake's tables in a catalog database (anything else, a role say, stays its own error)
NO_LAKE = ("read-only mode: database does not exist", "creating a new DuckLake is explicitly")


def store_spec(text: str | Path) -> str | Path:
    """A store as given on a command line: a lake string as it is, anything else a path."""
    return text if is_lake(text) else Path(text)


def default_path() -> str | Path:
    """``$RAGBENCH_STORE`` (a file or a lake) or ``results/perf.duckdb``."""
    return store_spec(os.environ.get(ENV_VAR) or DEFAULT_PATH)


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


def environment_key(environment: str) -> str:
    """The ``env_key`` of a run whose environment another harness defines: a short hash of
    ``environment`` (the same as the store's ``left(sha256(environment), 12)``, which migrates
    an older store's runs)."""
    return hashlib.sha256(environment.encode()).hexdigest()[:12]


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
    # The environment as another harness defines it (asv's ``env_name``; pytest-benchmark's
    # Python and CPU); None for this suite's runs, whose fingerprint defines theirs.
    environment: str | None = None
    python: str | None = None  # where no fingerprint says (asv's ``python``)
    runner: str | None = None  # the machine the file names, where ``[machines]`` renamed it

    @property
    def env_key(self) -> str:
        """Equal keys, same environment: the hash of the fingerprint's ``ENV_FIELDS`` for this
        suite's runs (unchanged since schema 1), of ``environment`` for another harness's."""
        if self.environment is not None:
            return environment_key(self.environment)
        return env_key(self.fingerprint or {})

    @property
    def run_id(self) -> str:
        """The same for the same file on main (or on the branch it names); a file ingested
        for another branch too is another run, so a pull request's ingest can never make
        main's ingest of the same file read as 'already stored'."""
        machine = self.runner or self.machine  # a file is one run whatever its machine is called
        ident = f"{self.source}|{machine}|{self.commit_hash}|{self.env_name}|{self.started_at}"
        if self.branch != HISTORY_BRANCH:
            ident += f"|branch={self.branch}"
        return hashlib.sha256(ident.encode()).hexdigest()[:20]


@dataclass
class Measurement:
    """One benchmark cell's metric in one run; ``samples`` None where only a value exists;
    ``status`` ``failed`` (and no value) where the benchmark raised; ``ci_99_a``/``ci_99_b``
    asv's 99% confidence interval of the value, where it gives one."""

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
    stats_number: int | None = None  # asv's ``number``: calls per sample
    stats_repeat: int | None = None  # asv's ``repeat``: samples
    ci_99_a: float | None = None
    ci_99_b: float | None = None

    def row(self, run_id: str) -> tuple:
        variant = next((str(self.params[p]) for p in VARIANT_PARAMS if p in self.params), None)
        group = {k: v for k, v in self.params.items() if k not in VARIANT_PARAMS}
        n = len(self.samples) if self.samples else (1 if self.median is not None else 0)
        return (
            run_id, self.benchmark, self.metric, json.dumps(self.params, sort_keys=True),
            param_key(self.params), variant, param_key(group), self.unit, self.version,
            self.median, self.q25, self.q75, n, self.samples, self.status, self.stats_number,
            self.stats_repeat, self.ci_99_a, self.ci_99_b,
        )  # fmt: skip


class Columns:
    """A run's measurements as the store's columns (``schema.MEASUREMENT_COLUMNS``), built
    before the store is opened: 0.7 s for 100,000 rows here, which no writer should hold the
    file for."""

    def __init__(self, run_id: str, measurements: Iterable[Measurement]):
        rows = [m.row(run_id) for m in measurements]
        self.n = len(rows)
        self.data = [list(c) for c in zip(*rows, strict=True)] if rows else []

    def __len__(self) -> int:
        return self.n

    def slice(self, start: int, stop: int) -> list[list]:
        return [c[start:stop] for c in self.data]


# DuckDB's memory for the lookback's query over a file: it caches what it scans. On the
# 10,000-run store (22.5M rows), `detect --last 200` peaked at 810 MB of RSS without a limit,
# 852 MB with this one; at 400 MB `--last 2000` ran out of memory (its window functions hold
# 1.5M points), at 600 MB it peaked at 964 MB: a reader stays within 1 GB.
LOOKBACK_MEMORY = "600MB"
# A run of the history (``r``: runs, its branch the argument) and a measurement (``m``) with a
# value: what a point of a series is made of.
HISTORY_RUN = "r.branch = ? AND (r.label IS NULL OR r.label NOT LIKE 'gate:%')"
POINT = "m.status = 'ok' AND m.median IS NOT NULL"
# The columns of the stored change points' tables, as the inserts cast them.
CHANGE_POINT_TYPES = {
    "branch": "VARCHAR", "machine": "VARCHAR", "environment": "VARCHAR", "benchmark": "VARCHAR",
    "metric": "VARCHAR", "param_key": "VARCHAR", "points": "INTEGER", "last_commit": "VARCHAR",
    "last_env_key": "VARCHAR", "window_start": "INTEGER", "window_commit": "VARCHAR",
    "window_env_key": "VARCHAR", "window_time": "TIMESTAMP", "settings": "VARCHAR",
    "computed_at": "TIMESTAMP", "window_end": "INTEGER", "position": "INTEGER",
    "commit_hash": "VARCHAR", "commit_time": "TIMESTAMP", "env_key": "VARCHAR", "env": "JSON",
    "value": "DOUBLE", "prev_commit_hash": "VARCHAR", "prev_commit_time": "TIMESTAMP",
    "prev_env_key": "VARCHAR", "prev_env": "JSON", "prev_value": "DOUBLE", "before": "DOUBLE",
    "after": "DOUBLE",
}  # fmt: skip

# The rows no query sees until their run is stored: a run being written in slices, or one whose
# writer died mid-way (``Store._add_in_slices``).
STORED = "run_id IN (SELECT run_id FROM runs)"


class StoreError(RuntimeError):
    """The store cannot be used: not a DuckDB file, not a ragbench store, a newer schema."""


class StoreLocked(StoreError):
    """Another process held the store for longer than the timeout."""


class StoreMissing(StoreError):
    """No store where one must already be: a reader (or ``create=False``) never makes one."""


def _sql_text(text) -> str:
    """``text`` as the inside of a SQL string literal."""
    return str(text).replace("'", "''")


def _ts(seconds: float | None):
    from datetime import UTC, datetime

    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


# Lake connections, one per lake and process: attaching costs a Postgres round trip and the
# extensions' load (~0.1 s), a cursor of it nothing. Each query or transaction takes a cursor.
_LAKES: dict[tuple[Lake, bool], object] = {}  # (lake, read-only) -> connection
_LAKES_LOCK = threading.Lock()


# The claims this process's sliced writes hold (``Store._add_in_slices``): any other claim of
# this process is one a failed write left.
_CLAIMS: set[str] = set()


def _stale(claim: str) -> bool:
    """Whether a claim (``host pid token time``) is no longer its writer's: not renewed for
    ``CLAIM_STALE`` seconds, or made by a process of this host that is gone."""
    try:
        host, pid, token, beat = claim.split()
        if time.time() - float(beat) > CLAIM_STALE:
            return True
    except ValueError:  # not a claim this code wrote
        return True
    if host != socket.gethostname():
        return False
    if int(pid) == os.getpid():
        return f"{host} {pid} {token}" not in _CLAIMS
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:  # another user's live process
        return False
    return False


@contextlib.contextmanager
def _refused():
    """What DuckDB refuses of a file's data (a key twice, a value no column takes) as a
    ValueError: the file is refused, the store goes on."""
    import duckdb

    try:
        yield
    except (duckdb.ConstraintException, duckdb.ConversionException,
            duckdb.InvalidInputException) as exc:  # fmt: skip
        raise ValueError(f"the store refused its data ({type(exc).__name__}: {exc})") from None


class _Rollback(Exception):
    """Raised by a write's work to end its transaction with nothing written: -> ``value``."""

    def __init__(self, value):
        self.value = value


class Store:
    """A results store: a DuckDB file, or a DuckLake given as ``ducklake:...`` (lake.py).
    ``Store(spec)`` creates it (and its schema) if needed, or brings an older schema up to
    date; a file store holds no connection between calls.

    ``read_only=True`` opens an existing store for queries, and ``create=False`` an existing
    one for writing: neither ever makes a store (a mistyped ``--store`` once left an 800 kB
    file behind), and a missing one (a file, or a lake a read-only attach cannot find) raises
    StoreMissing here, a line saying what makes one. ``branch`` names the history's branch
    (default ``history_branch()``). ``name`` is what messages call it (a lake's password
    hidden).
    """

    def __init__(self, path: Path | str | None = None, *, read_only: bool = False,
                 lock_timeout: float | None = None, on_wait=None,
                 branch: str | None = None, create: bool = True):  # fmt: skip
        spec = store_spec(path) if path is not None else default_path()
        self.lake = Lake.parse(spec) if is_lake(spec) else None
        self.path = None if self.lake else Path(spec)
        self.name = self.lake.name if self.lake else str(self.path)
        self.read_only = read_only
        self.lock_timeout = (60.0 if read_only else 600.0) if lock_timeout is None else lock_timeout
        self.on_wait = on_wait
        self.branch = branch or history_branch()
        self._writing = False  # inside ``writing()``
        self._writer = None  # the connection of an open write slice (``writing``)
        self._checked = False  # the schema, checked on the first connection
        self.create = create and not read_only
        if read_only or not create:  # StoreMissing where there is none
            if self.lake is not None:
                with self._watched():
                    self._lake_cursor(read_only=True).close()
            elif not self.path.exists():
                raise StoreMissing(self._missing())
        if not read_only:
            if self.path is not None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            self._create()
            self._checked = True

    @property
    def kind(self) -> str:
        return "DuckLake" if self.lake else "DuckDB file"

    # --- connections ----------------------------------------------------------------------

    def _open(self, write: bool):
        if self.lake is not None:
            return self._lake_cursor()
        import duckdb

        if self.path.exists() and not self.path.is_file():  # a FIFO would hang DuckDB
            raise StoreError(f"{self.path} is not a regular file")
        if write and not self.path.exists():
            self._make_file()
        start = time.monotonic()
        deadline = start + self.lock_timeout
        waited = False
        while True:
            try:
                return quiet(
                    duckdb.connect(str(self.path), read_only=not write, config=DUCKDB_CONFIG)
                )
            except duckdb.Error as exc:
                if self._being_created(exc) and time.monotonic() < start + CREATING_WAIT:
                    time.sleep(LOCK_POLL)
                    continue
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
                with contextlib.suppress(OSError):  # a read-only directory: WRITE_HOLD
                    self.waiting_marker.touch()
                time.sleep(LOCK_POLL)

    @property
    def waiting_marker(self) -> Path:
        """The file a process waiting for a file store's lock touches, so that the writer
        lets it in after ``WRITE_SLICE`` instead of ``WRITE_HOLD``."""
        return self.path.with_name(f".{self.path.name}.waiting")

    def _make_file(self) -> None:
        """A new, empty DuckDB file at ``path``, whole from the first moment: made under a name
        of this process's and linked into place (``link`` fails where another process's came
        first: that one is used). DuckDB never opens ``path`` to create it (see HEADER_BYTES)."""
        import duckdb

        aside = self.path.with_name(f".{self.path.name}.{os.getpid()}.new")
        try:
            duckdb.connect(str(aside)).close()
            os.link(aside, self.path)
        except FileExistsError:
            pass
        except (duckdb.Error, OSError) as exc:
            raise StoreError(f"cannot make a store at {self.path}: {exc}") from None
        finally:
            aside.unlink(missing_ok=True)

    def _being_created(self, exc: Exception) -> bool:
        """Whether DuckDB refused the file as one shorter than its header (see HEADER_BYTES)."""
        if "not a valid duckdb database file" not in str(exc).lower():
            return False
        try:
            return self.path.stat().st_size < HEADER_BYTES
        except OSError:  # gone again: let the next try say
            return True

    def _missing(self) -> str:
        """What a missing store's error says: where, and the commands that make one."""
        where = f"'{self.name}'" if self.lake else str(self.path)
        return (f"no results store at {where}: check --store (or ${ENV_VAR}), or make one "
                f"with `ragbench ingest --store {where} <asv results dir>` (or `make demo`)"
                )  # fmt: skip

    def _lake_cursor(self, read_only: bool | None = None):
        """A cursor of this process's connection to the lake (made on first use; made again
        after an error, a dropped catalog connection say). Read-only, a lake that does not exist
        (no catalog file, or a catalog database without DuckLake's tables) is StoreMissing."""
        import duckdb

        read_only = self.read_only if read_only is None else read_only
        key = (self.lake, read_only)
        with _LAKES_LOCK:
            try:
                con = _LAKES.get(key)
                if con is None:
                    con = _LAKES[key] = self.lake.connect(read_only=read_only)
                cur = con.cursor()
                cur.execute(f"USE {ALIAS}")
                return cur
            except (duckdb.Error, RuntimeError) as exc:
                _LAKES.pop(key, None)
                if read_only and any(w in str(exc) for w in NO_LAKE):
                    raise StoreMissing(self._missing()) from None
                raise StoreError(f"cannot attach the lake {self.name}: "
                                 f"{redact(one_line(str(exc)))}") from None  # fmt: skip

    @contextlib.contextmanager
    def _watched(self) -> Iterator[None]:
        """Around one operation: on a lake, ``Lake.watch``, and a catalog that did not answer
        (the watch cut it off, or libpq's connect_timeout) is a StoreError that says so, and
        this process's connection to the lake is made again next time."""
        if self.lake is None:
            yield
            return
        with self.lake.watch() as fired:
            try:
                yield
            except Exception as exc:
                if fired or is_unanswered(exc):
                    raise StoreError(self.lake.unanswered()) from None
                raise
            finally:
                if fired:
                    with _LAKES_LOCK:
                        _LAKES.pop((self.lake, self.read_only), None)

    @contextlib.contextmanager
    def _connect(self, write: bool = False) -> Iterator:
        """A connection for one query (read-only) or one transaction (read-write); inside
        ``writing()`` the write slice's own connection. DuckDB's errors become StoreError."""
        import duckdb

        if write and self.read_only:
            raise StoreError(f"{self.name} was opened read-only")
        with self._watched():
            if write and self._writing:
                self._held()
            own = self._writer is None
            con = self._open(write) if own else self._writer
            try:
                if not self._checked and not write:
                    self._check_schema(con)
                    self._checked = True
                yield con
            except duckdb.Error as exc:
                raise StoreError(
                    f"{self.name} cannot be used as a ragbench store (DuckDB "
                    f"{type(exc).__name__}: {redact(one_line(str(exc)))})"
                ) from None
            finally:
                if own:
                    con.close()

    def _write(self, work):
        """``work(con)`` in one write transaction -> its value; ``_Rollback(value)`` from it
        ends the transaction with nothing written. The transaction first rewrites the guard
        row, so that on a lake two overlapping writers conflict: the one whose commit fails
        runs ``work`` again (after a random pause), up to ``lock_timeout`` seconds."""
        import duckdb

        deadline = time.monotonic() + self.lock_timeout
        with self._connect(write=True) as con:
            while True:
                con.execute("BEGIN TRANSACTION")
                try:
                    con.execute("UPDATE meta SET value = ? WHERE key = ?",
                                [f"{os.getpid()}@{time.time()}", GUARD_KEY])  # fmt: skip
                    value = work(con)
                    con.execute("COMMIT")
                    return value
                except _Rollback as done:
                    con.execute("ROLLBACK")
                    return done.value
                except duckdb.Error as exc:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    if not self._lost_race(exc, deadline):
                        raise
                except BaseException:
                    with contextlib.suppress(duckdb.Error):  # the error that matters is this
                        con.execute("ROLLBACK")
                    raise

    @contextlib.contextmanager
    def writing(self) -> Iterator[Store]:
        """Share one write connection among a series of transactions (an ingest's files),
        opened by the first of them and handed to waiting readers every ``WRITE_SLICE`` seconds
        (``yield_slice``); closed at the end."""
        self._writing = True
        try:
            yield self
        finally:
            self._writing = False
            self._release()

    def _held(self):
        """Inside ``writing()``: its connection, opened now if it is not open."""
        if self._writer is None:
            self._writer = self._open(write=True)
            self._slice_started = time.monotonic()
        return self._writer

    def _release(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None
            if self.lake is None:  # let in: a process still waiting touches it again
                with contextlib.suppress(OSError):
                    self.waiting_marker.unlink(missing_ok=True)

    def yield_slice(self) -> None:
        """Between two transactions of ``writing()``: close a file's connection once the slice
        is used up and another process waits for it (``waiting_marker``), or once it was held
        for ``WRITE_HOLD``, so that readers get the file before the next transaction opens it
        again (a lake has no lock)."""
        if self._writer is None or self.lake is not None:
            return
        held = time.monotonic() - self._slice_started
        if held > WRITE_HOLD or (held > WRITE_SLICE and self.waiting_marker.exists()):
            self._release()
            time.sleep(LOCK_POLL * 2)  # long enough for a waiting reader's next try

    def _schema(self, con) -> int | None:
        """The store's schema version, None when it has no ``meta`` table; StoreError when it
        is newer than this ragbench's."""
        import duckdb

        try:
            rows = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchall()
        except duckdb.CatalogException:
            return None
        version = int(rows[0][0]) if rows else None
        if version is not None and version > SCHEMA_VERSION:
            raise StoreError(
                f"{self.name} has store schema {version}, newer than this ragbench's "
                f"({SCHEMA_VERSION}): update ragbench"
            )
        return version

    def _check_schema(self, con) -> None:
        """For readers: a ragbench store of this schema, or StoreError saying what it is."""
        version = self._schema(con)
        if version is None or self._foreign(con):
            raise StoreError(f"{self.name} is a {self.kind} but not a ragbench store")
        if version < SCHEMA_VERSION:
            raise StoreError(
                f"{self.name} has store schema {version}: open it once for writing (any "
                f"ragbench ingest) to bring it to schema {SCHEMA_VERSION}"
            )

    @staticmethod
    def _foreign(con) -> bool:
        """Whether the store holds anything that is not ragbench's (or lacks its runs)."""
        mine = "database_name = current_database()"
        names = {r[0] for r in con.execute(
            f"SELECT table_name FROM duckdb_tables() WHERE {mine} UNION ALL "
            f"SELECT view_name FROM duckdb_views() WHERE NOT internal AND {mine} UNION ALL "
            f"SELECT sequence_name FROM duckdb_sequences() WHERE {mine} UNION ALL "
            f"SELECT function_name FROM duckdb_functions() WHERE NOT internal AND {mine} "
            "UNION ALL SELECT schema_name FROM duckdb_schemas() WHERE NOT internal AND "
            f"schema_name <> 'main' AND {mine}"
        ).fetchall()}  # fmt: skip
        return bool(names) and (not names <= OURS or "runs" not in names)

    def _create(self) -> None:
        """The schema, created in an empty store or migrated from an older one; a store
        already at this version is not written, and a store of anything else is refused. On a
        lake, writers that create it at once conflict, and the losers find it made."""
        import duckdb

        deadline = time.monotonic() + self.lock_timeout
        with self._connect(write=True) as con:
            while True:
                if self._foreign(con):
                    raise StoreError(f"{self.name} is a {self.kind} of other things, not a "
                                     "ragbench store")  # fmt: skip
                version = self._schema(con)
                if version == SCHEMA_VERSION:
                    return
                if version is None and not self.create:  # an empty file or lake: not a store
                    raise StoreMissing(self._missing())
                con.execute("BEGIN TRANSACTION")
                try:
                    if version is not None and version < 4:
                        con.execute(DROP_CHANGE_POINTS)
                    con.execute(lake_ddl(TABLES) if self.lake else TABLES)
                    con.execute(MIGRATIONS)
                    con.execute(VIEWS)
                    con.execute("DELETE FROM meta WHERE key IN ('schema_version', ?)", [GUARD_KEY])
                    con.execute("INSERT INTO meta VALUES ('schema_version', ?), (?, '')",
                                [str(SCHEMA_VERSION), GUARD_KEY])  # fmt: skip
                    con.execute("COMMIT")
                    return
                except duckdb.Error as exc:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    # another writer made it at once: look again
                    if not self._lost_race(exc, deadline, ("already exists", "duplicate")):
                        raise

    def _lost_race(self, exc, deadline: float, also: tuple[str, ...] = ()) -> bool:
        """After a lake transaction failed: whether another writer's commit beat it (a
        conflict, or one of ``also`` in the message) with time left to try again, after a
        random pause. Anything else (a data path that cannot be written, say) is no race."""
        text = str(exc).lower()
        if (self.lake is None or time.monotonic() > deadline
                or not any(w in text for w in (CONFLICT, *also))):  # fmt: skip
            return False
        time.sleep(random.uniform(0.005, 0.05))
        return True

    def close(self) -> None:
        """Nothing to close between calls; kept so that ``with Store(...)`` reads as before."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- writing --------------------------------------------------------------------------

    def add_run(self, run: Run, measurements: Iterable[Measurement] | Columns) -> int | None:
        """Store a run and its measurements; -> rows added, or None when the run was already
        stored (nothing changes). What the store refuses of its data is a ValueError, and
        nothing of it is stored then. One transaction, or on a file, for more than
        ``SLICE_ROWS`` rows, one per slice of them (``_add_in_slices``)."""
        cols = (
            measurements if isinstance(measurements, Columns) else Columns(run.run_id, measurements)
        )
        if self.lake is None and len(cols) > SLICE_ROWS:
            return self._add_in_slices(run, cols)

        def work(con):
            if self._stored(con, run.run_id):
                raise _Rollback(None)
            with _refused():
                self._insert_run(con, run)
                self._insert_rows(con, cols, 0, len(cols))
            return len(cols)

        return self._write(work)

    @staticmethod
    def _stored(con, run_id: str) -> bool:
        return bool(con.execute("SELECT 1 FROM runs WHERE run_id = ?", [run_id]).fetchall())

    @staticmethod
    def _insert_run(con, run: Run) -> None:
        fp = run.fingerprint or {}
        con.execute(
            "INSERT INTO runs (run_id, source, commit_hash, commit_time, branch, "
            "machine, env_name, env_key, gpu, driver, cuda, torch, triton, timm, python, "
            "harness_version, mode, fingerprint, started_at, ended_at, ingested_at, "
            "label, source_file, environment, runner) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, "
            "?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run.run_id, run.source, run.commit_hash, _ts(run.commit_time), run.branch,
             run.machine, run.env_name, run.env_key, *(fp.get(k) for k in
             ("gpu", "driver", "cuda", "torch", "triton", "timm")),
             fp.get("python") or run.python, run.harness_version, run.mode,
             json.dumps(fp, sort_keys=True), _ts(run.started_at), _ts(run.ended_at),
             _ts(time.time()), run.label, run.source_file, run.environment,
             run.runner or run.machine],
        )  # fmt: skip

    @staticmethod
    def _insert_rows(con, cols: Columns, start: int, stop: int) -> None:
        if stop > start:  # one statement of column lists: 40x faster than executemany
            con.execute(INSERT_COLUMNS, cols.slice(start, stop))

    def _add_in_slices(self, run: Run, cols: Columns) -> int | None:
        """``add_run`` of a large run into a file: its rows in transactions of ``WRITE_SLICE``
        seconds (statements of ``SLICE_ROWS`` rows until the time is used), readers let in
        between (``yield_slice``), and its ``runs`` row with the last slice, so that no query
        sees the run before it is whole. The first slice claims the run in
        ``meta`` (``CLAIM``); another writer of the same run waits for the claim to go (the
        run is then stored: a duplicate), or takes it over when its writer is dead
        (``_stale``), deleting the rows that writer left. A slice that finds the claim gone
        (taken over, or a ``store copy`` stored the run) ends the run as a duplicate if it is
        stored, else starts it again. On an error the rows written so far are deleted."""
        run_id, key = run.run_id, CLAIM + run.run_id
        mine = f"{socket.gethostname()} {os.getpid()} {uuid.uuid4().hex[:12]}"
        deadline = time.monotonic() + self.lock_timeout

        def holder(con) -> str | None:
            rows = con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchall()
            return rows[0][0] if rows else None

        def write(con, start):
            began = time.monotonic()
            if start == 0:
                if self._stored(con, run_id):
                    raise _Rollback(None)
                other = holder(con)
                if other is not None and not _stale(other):
                    raise _Rollback(other)  # another writer's: wait for it
                con.execute("DELETE FROM measurements WHERE run_id = ?", [run_id])  # its leftovers
            elif not (holder(con) or "").startswith(mine):
                raise _Rollback(self._stored(con, run_id) or "lost")
            con.execute("DELETE FROM meta WHERE key = ?", [key])
            stop = start
            with _refused():
                while stop < len(cols) and (stop == start
                                            or time.monotonic() - began < WRITE_SLICE):  # fmt: skip
                    self._insert_rows(con, cols, stop, min(stop + SLICE_ROWS, len(cols)))
                    stop = min(stop + SLICE_ROWS, len(cols))
                if stop == len(cols):
                    self._insert_run(con, run)
                    return stop
            con.execute("INSERT INTO meta VALUES (?, ?)", [key, f"{mine} {time.time():.0f}"])
            return stop

        _CLAIMS.add(mine)
        start = 0
        try:
            while start < len(cols):
                done = self._write(lambda con, start=start: write(con, start))
                if done is None or done is True:
                    return None  # stored by another writer
                if isinstance(done, str):  # claimed by another writer, or lost to one
                    start = 0
                    self._release()
                    if time.monotonic() > deadline:
                        raise StoreLocked(
                            f"run {run_id} stayed claimed by another writer of "
                            f"{self.name} ({done}) for {self.lock_timeout:.0f} s"
                        )
                    time.sleep(random.uniform(0.05, 0.2))
                    continue
                start = done
                self.yield_slice()
            return len(cols)
        except BaseException:
            with contextlib.suppress(Exception):  # else the next claimer deletes them
                self._write(lambda con: self._drop_claim(con, run_id, mine))
            raise
        finally:
            _CLAIMS.discard(mine)

    def _drop_claim(self, con, run_id: str, mine: str) -> None:
        """After a sliced write failed: the rows it wrote and its claim, while still its."""
        rows = con.execute("SELECT value FROM meta WHERE key = ?", [CLAIM + run_id]).fetchall()
        if rows and rows[0][0].startswith(mine) and not self._stored(con, run_id):
            con.execute("DELETE FROM measurements WHERE run_id = ?", [run_id])
            con.execute("DELETE FROM meta WHERE key = ?", [CLAIM + run_id])

    def accept(self, commit_hash: str, benchmark: str, metric: str, param_key: str,
               reason: str, accepted_by: str, pr: int | None = None,
               given_on: str | None = None) -> None:  # fmt: skip
        """Record that a maintainer accepted a failure of this cell at ``commit_hash``."""
        self.accept_cells(commit_hash, [(benchmark, metric, param_key)], reason, accepted_by,
                          pr=pr, given_on=given_on)  # fmt: skip

    def accept_cells(self, commit_hash: str, cells: list[tuple[str, str, str]], reason: str,
                     accepted_by: str, *, pr: int | None = None, given_on: str | None = None,
                     replace: bool = False) -> None:  # fmt: skip
        """``accept`` for many cells (benchmark, metric, param_key) in one transaction; a
        cell accepted before at this commit is replaced. ``replace``: every acceptance given
        on ``pr`` at this commit goes first (one label accepts one verdict's failures, so
        acceptances of successive verdicts never add up beyond ``[gate] max_accepted``)."""

        def work(con):
            if replace:
                con.execute("DELETE FROM acceptances WHERE commit_hash = ? AND pr = ?",
                            [commit_hash, pr])  # fmt: skip
            for bench, metric, key in cells:
                con.execute(
                    f"DELETE FROM acceptances WHERE {ACCEPTANCE_KEY}", [commit_hash, bench,
                    metric, key]
                )  # fmt: skip
                con.execute(
                    "INSERT INTO acceptances (commit_hash, benchmark, metric, param_key, reason, "
                    "accepted_by, accepted_at, pr, given_on) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    [commit_hash, bench, metric, key, reason, accepted_by, _ts(time.time()), pr,
                     given_on or commit_hash],
                )  # fmt: skip

        self._write(work)

    def withdraw(self, commit_hash: str, pr: int) -> int:
        """Delete the acceptances given on pull request ``pr`` at ``commit_hash`` (the label
        was removed); -> how many."""
        where = "WHERE commit_hash = ? AND pr = ?"

        def work(con):
            ((n,),) = con.execute(
                f"SELECT count(*) FROM acceptances {where}", [commit_hash, pr]
            ).fetchall()
            con.execute(f"DELETE FROM acceptances {where}", [commit_hash, pr])
            return n

        return self._write(work)

    def carry_acceptances(self, main_commit: str, merged: list[tuple[int, str]]) -> int:
        """Copy to ``main_commit`` the acceptances given on the pull requests that merged it,
        ``merged`` as GitHub's commit -> pull request association names them (number, head
        commit; ragbench.pr.merged_pulls), never as a commit's subject does. Only the cells
        that the trusted verdict recorded failing at that head are carried (an acceptance of
        a cell a later verdict of the same head no longer lists stays behind); the lookback
        then sees the change as accepted there (a cell accepted twice: the newer). -> how many
        cells."""
        cols = "benchmark, metric, param_key, reason, accepted_by, accepted_at, pr, given_on"

        def work(con):
            newest: dict[tuple, tuple] = {}
            for pr, head in merged:
                gate = con.execute(
                    "SELECT failures FROM gates WHERE pr = ? AND head = ?", [pr, head]
                ).fetchall()
                if not gate:
                    continue
                failing = {(f["benchmark"], f["metric"], f["param_key"])
                           for f in json.loads(gate[0][0])}  # fmt: skip
                rows = con.execute(
                    f"SELECT {cols} FROM acceptances WHERE pr = ? AND commit_hash = ?", [pr, head]
                ).fetchall()
                for row in rows:
                    old = newest.get(row[:3])
                    if row[:3] in failing and (old is None or row[5] > old[5]):
                        newest[row[:3]] = row
            for row in newest.values():
                con.execute(f"DELETE FROM acceptances WHERE {ACCEPTANCE_KEY}",
                            [main_commit, *row[:3]])  # fmt: skip
                con.execute(f"INSERT INTO acceptances (commit_hash, {cols}) VALUES "
                            "(?, ?, ?, ?, ?, ?, ?, ?, ?)", [main_commit, *row])  # fmt: skip
            return len(newest)

        return self._write(work)

    def record_gate(self, pr: int, head: str, base: str | None, machine: str | None,
                    failures: list[dict], report: str = "") -> None:  # fmt: skip
        """The verdict of a pull request's gate (its failing cells and its markdown report),
        as the trusted workflow read it; a verdict recorded before for this head is replaced."""

        def work(con):
            con.execute("DELETE FROM gates WHERE pr = ? AND head = ?", [pr, head])
            con.execute(
                "INSERT INTO gates (pr, head, base, machine, failures, report, recorded_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [pr, head, base, machine, json.dumps(failures, sort_keys=True), report,
                 _ts(time.time())],
            )  # fmt: skip

        self._write(work)

    def describe(self, **values: str) -> None:
        """Keep facts about the results in ``meta`` (ingest: asv's ``project`` and
        ``project_url``), each replacing the value stored before under its key."""

        def work(con):
            for key, value in values.items():
                con.execute("DELETE FROM meta WHERE key = ?", [key])
                con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])

        self._write(work)

    def export_parquet(self, out_dir: Path) -> list[Path]:
        """Every table and view as ``<name>.parquet`` under ``out_dir``."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        with self._connect() as con:
            for name in ("meta", "runs", "measurements", "acceptances", "gates", "series",
                         "speedups", "dispatch_floors", "drift", "change_point_series",
                         "change_points"):  # fmt: skip
                path = out_dir / f"{name}.parquet"
                table = (con.sql(f"SELECT * FROM measurements WHERE {STORED}")
                         if name == "measurements" else con.table(name))  # fmt: skip
                table.write_parquet(str(path))  # the path never enters SQL
                paths.append(path)
        return paths

    def copy_from(self, source: Store) -> tuple[dict[str, int], list[str]]:
        """Every run (its measurements, raw samples and label with it), acceptance and gate
        verdict of ``source`` that this store lacks, in one transaction, run ids kept, and the
        stored change points of each branch and machine this store had no run of (its series
        are then the source's, point for point); -> rows added per table (a second copy adds
        none), and the runs added to a branch and machine this store had runs of: their
        change points are to be brought up to date (``changepoints.update``)."""
        import duckdb

        source.counts()  # a readable ragbench store of this schema, or StoreError
        alias = f"source_{os.getpid()}_{threading.get_ident()}"
        new_runs = (f"SELECT * FROM {alias}.{{t}} WHERE run_id NOT IN (SELECT run_id FROM runs) "
                    f"AND run_id IN (SELECT run_id FROM {alias}.runs)")  # fmt: skip
        missing = ("SELECT * FROM {a}.{t} s WHERE NOT EXISTS (SELECT 1 FROM {t} d WHERE "
                   "{on})")  # fmt: skip

        def key(cols):
            return " AND ".join(f"d.{c} = s.{c}" for c in cols)

        def work(con):
            # what a sliced write of a copied run left here, or is writing: the copy stores it
            # (that write then finds its claim gone and the run stored)
            con.execute(f"DELETE FROM measurements WHERE NOT {STORED} AND run_id IN "
                        f"(SELECT run_id FROM {alias}.runs)")  # fmt: skip
            con.execute(f"DELETE FROM meta WHERE key IN (SELECT '{CLAIM}' || run_id FROM "
                        f"{alias}.runs)")  # fmt: skip
            had = set(con.execute("SELECT DISTINCT branch, machine FROM runs").fetchall())
            runs = con.execute(f"SELECT run_id, branch, machine FROM {alias}.runs WHERE run_id "
                               "NOT IN (SELECT run_id FROM runs)").fetchall()  # fmt: skip
            fresh = sorted({(b, m) for _, b, m in runs if b is not None and (b, m) not in had})
            behind[:] = [r for r, b, m in runs if (b, m) in had]
            added = {}
            for table, select in (
                ("measurements", new_runs.format(t="measurements")),  # before their runs
                ("runs", new_runs.format(t="runs")),
                ("acceptances", missing.format(a=alias, t="acceptances", on=key(
                    ("commit_hash", "benchmark", "metric", "param_key")))),
                ("gates", missing.format(a=alias, t="gates", on=key(("pr", "head")))),
            ):  # fmt: skip
                ((added[table],),) = con.execute(f"INSERT INTO {table} BY NAME {select}").fetchall()
            series = ("branch", "machine", "environment", "benchmark", "metric", "param_key")
            for table in ("change_point_series", "change_points"):
                added[table] = 0
                for branch, machine in fresh:
                    ((n,),) = con.execute(
                        f"INSERT INTO {table} BY NAME SELECT * FROM {alias}.{table} s WHERE "
                        f"s.branch = ? AND s.machine = ? AND NOT EXISTS (SELECT 1 FROM {table} "
                        f"d WHERE {key(series)})", [branch, machine]).fetchall()  # fmt: skip
                    added[table] += n
            return added

        behind: list[str] = []
        with self.writing():
            con = self._held()
            try:
                if source.lake is not None:
                    source.lake.attach(con, alias, read_only=True)
                else:
                    con.execute(f"ATTACH '{_sql_text(source.path)}' AS {alias} (READ_ONLY)")
                return self._write(work), behind
            except duckdb.Error as exc:
                raise StoreError(f"copying {source.name} into {self.name}: "
                                 f"{redact(one_line(str(exc)))}") from None  # fmt: skip
            finally:
                with contextlib.suppress(duckdb.Error):
                    con.execute(f"DETACH {alias}")

    def maintain(self, keep_days: float = 30) -> dict:
        """Keep the store small: on a lake, DuckLake's maintenance (small files merged,
        snapshots older than ``keep_days`` expired, unread files deleted); on a file, the rows
        a sliced write left when its process died deleted, and a checkpoint. Raw samples stay.
        -> files and bytes before and after."""
        if not 1 <= keep_days <= 36500:
            raise ValueError("keep between a day and a century of snapshots (a reader may be "
                             f"on one), not {keep_days}")  # fmt: skip
        before = self.size()
        if self.lake is None:
            self._write(self._drop_leftovers)
        with self._connect(write=True) as con:
            if self.lake is not None:
                lake_maintain(con, keep_days)
            else:
                con.execute("CHECKPOINT")
        after = self.size()
        return {"files_before": before[0], "bytes_before": before[1],
                "files_after": after[0], "bytes_after": after[1]}  # fmt: skip

    @staticmethod
    def _drop_leftovers(con) -> None:
        """The rows and claims of sliced writes whose writer died (``_stale``)."""
        claims = con.execute("SELECT key, value FROM meta WHERE starts_with(key, ?)",
                             [CLAIM]).fetchall()  # fmt: skip
        live = [k.removeprefix(CLAIM) for k, v in claims if not _stale(v)]
        con.execute(f"DELETE FROM measurements WHERE NOT {STORED} AND NOT list_contains(?, "
                    "run_id)", [live])  # fmt: skip
        con.execute("DELETE FROM meta WHERE starts_with(key, ?) AND NOT list_contains(?, key)",
                    [CLAIM, [CLAIM + r for r in live]])  # fmt: skip

    # --- queries ---------------------------------------------------------------------------

    def _rows(self, sql: str, args: list | None = None, frame: bool = False,
              memory: str | None = None):  # fmt: skip
        """Rows of one query (dicts, or a DataFrame); ``memory``: DuckDB's memory limit for it
        on a file (a lake's connection is the process's: left as it is)."""
        with self._connect() as con:
            if memory and self.lake is None and self._writer is None:
                con.execute(f"SET memory_limit = '{memory}'")
                con.execute("SET preserve_insertion_order = false")  # the query orders its rows
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
        """Rows per table, in one statement: one snapshot of a lake that writers change."""
        tables = ("runs", "measurements", "acceptances", "gates")
        where = {"measurements": f" WHERE {STORED}"}
        counts = [f"(SELECT count(*) FROM {t}{where.get(t, '')})" for t in tables]
        with self._connect() as con:
            (row,) = con.execute("SELECT " + ", ".join(counts)).fetchall()
        return dict(zip(tables, row, strict=True))

    @property
    def mtime(self) -> float:
        """A cache key for readers (the dashboard) that changes with every write: when the
        file last changed, or the lake's newest snapshot."""
        if self.lake is None:
            return self.path.stat().st_mtime
        with self._connect() as con:
            return float(lake_snapshot(con))

    def size(self) -> tuple[int, int]:
        """(files, bytes) the store's data takes: the DuckDB file, or the Parquet data and
        delete files that the lake's newest snapshot reads."""
        if self.lake is None:
            return 1, self.path.stat().st_size
        with self._connect() as con:
            return lake_files(con)

    def meta(self, key: str) -> str | None:
        """The store's ``meta`` value of ``key`` (e.g. ``project``, asv's project name that
        ingest keeps), or None."""
        rows = self._rows("SELECT value FROM meta WHERE key = ?", [key])
        return rows[0]["value"] if rows else None

    def metrics(self, *, frame: bool = False):
        """Each benchmark and metric the store holds, with its unit and whether any of its
        cells names a variant (a backend or pipeline: what a speedup compares)."""
        return self._rows("SELECT benchmark, metric, any_value(unit) AS unit, "
                          "bool_or(variant IS NOT NULL) AS variants FROM measurements "
                          f"WHERE {STORED} GROUP BY ALL ORDER BY 1, 2", frame=frame)  # fmt: skip

    def cells(self, *, machine: str | None = None, frame: bool = False):
        """Each benchmark, metric and cell (``param_key``) of the history's branch with a
        value, with its variant and group (what a speedup pairs) and unit: what a page's
        pickers offer."""
        where, args = self._filters({"machine": machine, "status": OK})
        return self._rows(
            "SELECT DISTINCT benchmark, metric, param_key, variant, group_key, unit FROM series "
            f"WHERE {' AND '.join(where)} ORDER BY 1, 2, 3", args, frame,
        )  # fmt: skip

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
               status: str | None = OK, cell: str | None = None,
               frame: bool = False):  # fmt: skip
        """One row per run and cell of the history's branch, oldest commit first: what the
        dashboard plots and detection reads. ``params`` filters on parameter values, ``cell``
        on the ``param_key``; ``since``/``until`` on the commit time; ``status`` ``ok``
        (values, the default), ``failed``, or None for both."""
        where, args = self._filters(
            {"benchmark": benchmark, "metric": metric, "machine": machine, "status": status,
             "param_key": cell},
            gate_runs,
        )  # fmt: skip
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
                 benchmark: str | None = None, metric: str | None = None,
                 group_key: str | None = None, frame: bool = False):  # fmt: skip
        """``candidate`` against every other backend/pipeline in the same run and cell."""
        where, args = self._filters(
            {"candidate": candidate, "machine": machine, "benchmark": benchmark,
             "metric": metric, "group_key": group_key}
        )  # fmt: skip
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

    # --- stored change points (ragbench/changepoints.py computes them) -----------------------

    def series_points(self, machine: str, environment: str, *, since=None,
                      keys: Iterable[tuple] | None = None) -> list[tuple]:  # fmt: skip
        """The points of the machine's series in one environment (``environment``; '' for runs
        without one) on the history's branch: one per series, commit and ``env_key``, the
        median of its runs' medians, values only (no failed cell). Rows ``(benchmark, metric,
        param_key, commit_hash, env_key, commit_time, started_at, value, *ENV_FIELDS)``,
        ordered by series, then commit time and start. ``since``: commits from that time on;
        ``keys``: these series (benchmark, metric, param_key) only."""
        where = [HISTORY_RUN, "r.machine = ?", "coalesce(r.environment, '') = ?", POINT]
        args = [self.branch, machine, environment]
        if since is not None:
            where.append("r.commit_time >= ?")
            args.append(since)
        if keys is not None:
            keys = list(keys)
            for i, col in enumerate(("benchmark", "metric", "param_key")):
                where.append(f"list_contains(?, m.{col})")
                args.append(sorted({k[i] for k in keys}))
        env = ", ".join(f"any_value(r.{k})" for k in ENV_FIELDS)
        sql = (f"SELECT m.benchmark, m.metric, m.param_key, r.commit_hash, r.env_key, "
               f"min(r.commit_time) AS t, min(r.started_at) AS s, median(m.median), {env} "
               f"FROM measurements m JOIN runs r USING (run_id) WHERE {' AND '.join(where)} "
               "GROUP BY 1, 2, 3, 4, 5 ORDER BY 1, 2, 3, t NULLS FIRST, s, 4, 5")  # fmt: skip
        with self._connect() as con:
            rows = con.execute(sql, args).fetchall()
        if keys is not None:
            wanted = set(keys)
            rows = [r for r in rows if r[:3] in wanted]
        return rows

    def run_series(self, run_ids: list[str]) -> list[tuple]:
        """The series (machine, environment, and each cell's benchmark, metric, param_key) that
        these runs gave a point, with the oldest commit time of those runs: runs of the
        history's branch with a value, not a gate's."""
        sql = ("SELECT r.machine, coalesce(r.environment, ''), m.benchmark, m.metric, "
               "m.param_key, min(r.commit_time) FROM measurements m JOIN runs r USING (run_id) "
               f"WHERE list_contains(?, run_id) AND {HISTORY_RUN} AND {POINT} "
               "GROUP BY ALL ORDER BY ALL")  # fmt: skip
        with self._connect() as con:
            return con.execute(sql, [list(run_ids), self.branch]).fetchall()

    def environments(self, machine: str) -> list[str]:
        """The environments (``environment``; '' for runs without one) of the machine's history."""
        sql = (f"SELECT DISTINCT coalesce(environment, '') FROM runs r WHERE {HISTORY_RUN} AND "
               "machine = ? ORDER BY 1")  # fmt: skip
        with self._connect() as con:
            return [r[0] for r in con.execute(sql, [self.branch, machine]).fetchall()]

    def series_keys(self, machine: str, environment: str) -> list[tuple[str, str, str]]:
        """The series (benchmark, metric, param_key) of the machine's history in ``environment``
        that have a value."""
        sql = ("SELECT DISTINCT m.benchmark, m.metric, m.param_key FROM measurements m JOIN "
               f"runs r USING (run_id) WHERE {HISTORY_RUN} AND r.machine = ? AND "
               f"coalesce(r.environment, '') = ? AND {POINT} ORDER BY ALL")  # fmt: skip
        with self._connect() as con:
            return con.execute(sql, [self.branch, machine, environment]).fetchall()

    def change_point_state(self, machine: str, environment: str | None = None) -> list[dict]:
        """What the stored change points of the machine's series (in one environment, or all)
        were computed from (table ``change_point_series``)."""
        sql = "SELECT * FROM change_point_series WHERE branch = ? AND machine = ?"
        args = [self.branch, machine]
        if environment is not None:
            sql += " AND environment = ?"
            args.append(environment)
        return self._rows(sql, args)

    def change_points(self, machine: str, *, benchmark: str | None = None,
                      metric: str | None = None) -> list[dict]:  # fmt: skip
        """The change points stored for the machine's series (table ``change_points``: what
        each window found; ``ragbench.changepoints.merged`` makes one list of them)."""
        where = ["branch = ?", "machine = ?"]
        args = [self.branch, machine]
        for col, val in (("benchmark", benchmark), ("metric", metric)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        return self._rows(
            f"SELECT * FROM change_points WHERE {' AND '.join(where)} "
            "ORDER BY environment, benchmark, metric, param_key, position",
            args,
        )

    def save_change_points(self, states: list[dict], found: list[dict]) -> None:
        """Replace, in one transaction, each series' state (``states``: rows of
        ``change_point_series``) and its change points of windows from ``window_from`` on (a
        key of each state, not a column) with ``found`` (rows of ``change_points``)."""
        if not states:
            return
        key = ("branch", "machine", "environment", "benchmark", "metric", "param_key")
        cols = [c for c in states[0] if c != "window_from"]
        on = " AND ".join(f"t.{k} = d.{k}" for k in key)

        def unnest(rows, names, types):
            return ", ".join(f"unnest(?::{t}[]) AS {n}" for n, t in zip(names, types,
                                                                         strict=True)), [
                [r[n] for r in rows] for n in names]  # fmt: skip

        def work(con):
            sel, args = unnest(states, [*key, "window_from"], ["VARCHAR"] * 6 + ["INTEGER"])
            con.execute(f"DELETE FROM change_points t USING (SELECT {sel}) d WHERE {on} "
                        "AND t.window_start >= d.window_from", args)  # fmt: skip
            sel, args = unnest(states, key, ["VARCHAR"] * 6)
            con.execute(f"DELETE FROM change_point_series t USING (SELECT {sel}) d WHERE {on}",
                        args)  # fmt: skip
            for table, rows, names in (
                ("change_point_series", states, cols),
                ("change_points", found, list(found[0]) if found else []),
            ):
                if rows:
                    con.execute(f"INSERT INTO {table} ({', '.join(names)}) SELECT "
                                + ", ".join(f"unnest(?::{CHANGE_POINT_TYPES[n]}[])"
                                            for n in names),
                                [[r[n] for r in rows] for n in names])  # fmt: skip

        self._write(work)

    def lookback(self, machine: str, *, last: int, lookback: int, benchmark: str | None = None,
                 metric: str | None = None, params: dict | None = None) -> list[dict]:  # fmt: skip
        """What ``ragbench detect`` judges each series of the machine by, over its newest
        ``last`` commits, in SQL (window functions): the newest point of each series, the
        newest ``lookback`` points before it in the newest point's environment (``env_key``)
        from the newest accepted change on, and every accepted point; oldest first. Each row
        also carries its series' counts: ``n`` points, ``since_n`` before the newest from the
        newest accepted one on, ``same_n`` of those in the newest's environment; ``back`` (1:
        the newest), ``accepted``, ``in_lookback``; and ``since``, the oldest of the ``last``
        commits' times. Points as ``series_points`` makes them (one per commit and env_key)."""
        series = "environment, benchmark, metric, param_key"
        where = [HISTORY_RUN, "r.machine = ?", POINT]
        args: list = [self.branch, machine]
        for col, val in (("benchmark", benchmark), ("metric", metric)):
            if val is not None:
                where.append(f"m.{col} = ?")
                args.append(val)
        for k, v in (params or {}).items():
            where.append("json_extract_string(m.params, ?) = ?")
            args += [f"$.{k}", str(v)]
        env = ", ".join(f"any_value(r.{k}) AS {k}" for k in ENV_FIELDS)
        # The windows run over narrow rows (the key, the order, the value) and the wide columns
        # (params, unit, the environment) are joined to the ~lookback rows a series keeps: on
        # the 10,000-run store (--last 2000, 1.5M points) 3.3 s where windows over wide rows,
        # five sorts of them, took 11.5 s.
        sql = f"""
        WITH recent AS (
            SELECT commit_hash, max(commit_time) AS t FROM runs r
            WHERE {HISTORY_RUN} AND r.machine = ? GROUP BY commit_hash
            ORDER BY t DESC NULLS LAST, commit_hash LIMIT ?
        ), pts AS (
            SELECT coalesce(r.environment, '') AS environment, m.benchmark, m.metric, m.param_key,
                   r.commit_hash, r.env_key, min(r.commit_time) AS commit_time,
                   min(r.started_at) AS started_at, median(m.median) AS value
            FROM measurements m JOIN runs r USING (run_id)
            WHERE {" AND ".join(where)} AND r.commit_hash IN (SELECT commit_hash FROM recent)
            GROUP BY 1, 2, 3, 4, 5, 6
        ), ranked AS (
            SELECT p.*, row_number() OVER newest AS back,
                   first_value(env_key) OVER newest AS latest_env, count(*) OVER whole AS n
            FROM pts p
            WINDOW newest AS (PARTITION BY {series} ORDER BY commit_time DESC NULLS LAST,
                              started_at DESC, commit_hash DESC, env_key DESC),
                   whole AS (newest ROWS BETWEEN UNBOUNDED PRECEDING AND UNBOUNDED FOLLOWING)
        ), accepted AS (
            SELECT {series}, commit_hash, back FROM ranked p SEMI JOIN acceptances a
                ON a.commit_hash = p.commit_hash AND a.benchmark = p.benchmark
               AND a.metric = p.metric AND a.param_key = p.param_key
        ), started AS (
            SELECT {series}, min(back) FILTER (WHERE back > 1) AS start_back
            FROM accepted GROUP BY ALL
        ), marked AS (
            SELECT p.*, coalesce(s.start_back, n) - 1 AS since_n,
                   back > 1 AND back <= coalesce(s.start_back, n)
                   AND env_key IS NOT DISTINCT FROM latest_env AS same
            FROM ranked p LEFT JOIN started s USING ({series})
        ), counted AS (
            SELECT *, sum(same::INTEGER) OVER (PARTITION BY {series} ORDER BY back
                                               ROWS UNBOUNDED PRECEDING) AS rank,
                   sum(same::INTEGER) OVER (PARTITION BY {series}) AS same_n
            FROM marked
        ), kept AS (
            SELECT c.* EXCLUDE (rank, same, latest_env), a.back IS NOT NULL AS accepted,
                   same AND rank <= ? AS in_lookback
            FROM counted c LEFT JOIN accepted a USING ({series}, commit_hash)
            WHERE c.back = 1 OR a.back IS NOT NULL OR (same AND rank <= ?)
        ), info AS (
            SELECT coalesce(r.environment, '') AS environment, m.benchmark, m.metric,
                   m.param_key, r.commit_hash, r.env_key, any_value(m.params) AS params,
                   any_value(m.unit) AS unit, {env}
            FROM measurements m JOIN runs r USING (run_id)
            WHERE {" AND ".join(where)} AND r.commit_hash IN (SELECT commit_hash FROM kept)
            GROUP BY 1, 2, 3, 4, 5, 6
        )
        SELECT k.*, i.* EXCLUDE ({series}, commit_hash, env_key),
               (SELECT min(t) FROM recent) AS since
        FROM kept k JOIN info i USING ({series}, commit_hash, env_key)
        ORDER BY {series}, back DESC
        """
        return self._rows(sql, [self.branch, machine, last, *args, lookback, lookback, *args],
                          memory=LOOKBACK_MEMORY)  # fmt: skip

    def newest_failures(self, machine: str) -> list[dict]:
        """The cells that failed (the benchmark raised) on the machine's newest commit."""
        sql = f"""
            WITH newest AS (SELECT commit_hash FROM runs r WHERE {HISTORY_RUN} AND machine = ?
                            ORDER BY commit_time DESC NULLS LAST, started_at DESC LIMIT 1)
            SELECT m.*, r.commit_hash, r.commit_time FROM measurements m JOIN runs r USING (run_id)
            WHERE {HISTORY_RUN} AND r.machine = ? AND m.status = '{FAILED}'
              AND r.commit_hash = (SELECT commit_hash FROM newest)
            ORDER BY m.benchmark, m.metric, m.param_key"""
        return self._rows(sql, [self.branch, machine, self.branch, machine])
