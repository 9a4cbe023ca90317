"""Opening a store (``Core``, what every part of ``Store`` stands on): a file's short
connections and the write lock with its waiting marker, one write transaction with its guard
row and its retries, and the schema's creation, migration and checks; where the store is
(``store_spec``, ``default_path``) and whose history it holds (``history_branch``)."""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .errors import StoreError, StoreLocked, StoreMissing
from .lake import CONFLICT, DUCKDB_CONFIG, Lake, is_lake, one_line, quiet, redact
from .records import HISTORY_BRANCH
from .schema import DROP_CHANGE_POINTS, MIGRATIONS, OURS, TABLES, VIEWS, lake_ddl

if TYPE_CHECKING:
    from . import Store

DEFAULT_PATH = Path("results/perf.duckdb")
ENV_VAR = "RAGBENCH_STORE"
BRANCH_VAR = "RAGBENCH_BRANCH"
SCHEMA_VERSION = 8  # a new table, column or view needs a new version: that is what migrates
# How long a writer may keep the file between transactions before it lets a waiting reader in:
# opening the file costs ~15 ms, so one connection per file would make a 1,000-file ingest 3x
# slower. A process waiting for the lock says so (``waiting_marker``); with nobody waiting the
# writer keeps the file for ``WRITE_HOLD``: each close checkpoints the file (0.3 s a close into a
# 1,000-commit store at a load of 8), and releasing it every WRITE_SLICE spent 51 s of a 175 s
# ingest of 1,000 result files closing it. WRITE_HOLD bounds the wait of a reader that cannot
# leave the marker (a read-only directory).
WRITE_SLICE = 0.25
WRITE_HOLD = 2.0
# How long a writer that let the file go stays out until the process waiting for it is in: that
# process removes the marker once it has the file. Closing and reopening 40 ms later let the
# writer win the file back from a reader that was not scheduled in time: at a load of 8, 4-6 of
# 55 reads of a 100,000-cell ingest waited 1.1-2.1 s, a slice and a checkpoint per miss. A
# marker left by a process that gave up is removed after this.
HAND_OVER = 1.0
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
# The rows no query sees until their run is stored: a run being written in slices, or one whose
# writer died mid-way (``Store._add_in_slices``).
STORED = "run_id IN (SELECT run_id FROM runs)"


def store_spec(text: str | Path) -> str | Path:
    """A store as given on a command line: a lake string as it is, anything else a path."""
    return text if is_lake(text) else Path(text)


def default_path() -> str | Path:
    """``$RAGBENCH_STORE`` (a file or a lake) or ``results/perf.duckdb``."""
    return store_spec(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def history_branch() -> str:
    """The branch whose runs are the history: ``$RAGBENCH_BRANCH``, else ``main``."""
    return os.environ.get(BRANCH_VAR) or HISTORY_BRANCH


class Rollback(Exception):
    """Raised by a write's work to end its transaction with nothing written: -> ``value``."""

    def __init__(self, value):
        self.value = value


class Core:
    """The store's opening, connections and transactions (``Store``'s docstring says how it is
    called). The other parts use ``_connect`` (one query or transaction), ``_write`` (one write
    transaction), ``writing``/``_held``/``_release`` (a write connection shared by many), and
    ``lake``, ``path``, ``name``, ``branch``; the lake's cursor and watch are
    ``LakeConnection``'s."""

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
                con = quiet(
                    duckdb.connect(str(self.path), read_only=not write, config=DUCKDB_CONFIG)
                )
                if waited:  # in: the writer that let the file go for us may go on
                    with contextlib.suppress(OSError):
                        self.waiting_marker.unlink(missing_ok=True)
                return con
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
        lets it in after ``WRITE_SLICE`` instead of ``WRITE_HOLD``, and removes once it is in,
        so that the writer stays out until then (``HAND_OVER``)."""
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
        """``work(con)`` in one write transaction -> its value; ``Rollback(value)`` from it
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
                except Rollback as done:
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
            self._writer.close()
            self._writer = None
            self._hand_over()

    def _hand_over(self) -> None:
        """After closing the file between transactions: wait until the process waiting for it
        is in (it removes ``waiting_marker``), at most ``HAND_OVER`` seconds (then the marker
        is a process's that gave up, and goes)."""
        deadline = time.monotonic() + HAND_OVER
        time.sleep(LOCK_POLL * 2)  # nobody waiting: long enough for a reader's next try
        while self.waiting_marker.exists() and time.monotonic() < deadline:
            time.sleep(LOCK_POLL)
        with contextlib.suppress(OSError):
            self.waiting_marker.unlink(missing_ok=True)

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
