"""Opening a store (``Core``, what every part of ``Store`` stands on): its backend (a file or a
lake: ``backends.py``, the one place they differ), the write connection shared by a series of
transactions, one write transaction with its guard row and its retries, and the schema's
creation, migration and checks; whose history it holds (``history_branch``)."""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from .backends import backend, default_path, store_spec
from .errors import StoreError, StoreMissing
from .lake import one_line, redact
from .records import HISTORY_BRANCH
from .schema import (
    DROP_CHANGE_POINTS,
    MIGRATIONS,
    OURS,
    TABLES,
    VIEWS_KEY,
    ViewNames,
    views_sql,
)

if TYPE_CHECKING:
    from . import Store

BRANCH_VAR = "RAGBENCH_BRANCH"
SCHEMA_VERSION = 9  # a new table, column or view needs a new version: that is what migrates
GUARD_KEY = "writer"  # the row of ``meta`` that every write transaction rewrites
# The rows no query sees until their run is stored: a run being written in slices, or one whose
# writer died mid-way (``Store._add_in_slices``).
STORED = "run_id IN (SELECT run_id FROM runs)"


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
    ``backend`` (what differs between a file and a lake), ``name``, ``branch``."""

    def __init__(self, path: Path | str | None = None, *, read_only: bool = False,
                 lock_timeout: float | None = None, on_wait=None,
                 branch: str | None = None, create: bool = True,
                 views: ViewNames | None = None):  # fmt: skip
        spec = store_spec(path) if path is not None else default_path()
        self.read_only = read_only
        self.lock_timeout = (60.0 if read_only else 600.0) if lock_timeout is None else lock_timeout
        self.backend = backend(spec, read_only=read_only, lock_timeout=self.lock_timeout,
                               on_wait=on_wait)  # fmt: skip
        self.name = self.backend.name
        self.branch = branch or history_branch()
        self.view_names = views
        self._writing = False  # inside ``writing()``
        self._writer = None  # the connection of an open write slice (``writing``)
        self._checked = False  # the schema, checked on the first connection
        self.create = create and not read_only
        if (read_only or not create) and not self.backend.exists():  # StoreMissing
            raise StoreMissing(self.backend.missing())
        if not read_only:
            self.backend.prepare()
            self._create()
            self._checked = True

    @property
    def kind(self) -> str:
        return self.backend.kind

    @property
    def path(self) -> Path | None:
        """The store's file; None for a lake (``name`` says where either is)."""
        return self.backend.path

    def _open(self, write: bool):
        return self.backend.open(write)

    @contextlib.contextmanager
    def _connect(self, write: bool = False) -> Iterator:
        """A connection for one query (read-only) or one transaction (read-write); inside
        ``writing()`` the write slice's own connection. DuckDB's errors become StoreError."""
        import duckdb

        if write and self.read_only:
            raise StoreError(f"{self.name} was opened read-only")
        with self.backend.watched():
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
            self.backend.released()

    def yield_slice(self) -> None:
        """Between two transactions of ``writing()``: close the connection where the backend
        lets it go now (a file's, once the slice is used up and another process waits for it,
        or once it was held for ``WRITE_HOLD``: ``backends.FileBackend.let_go``), so that
        readers get the store before the next transaction opens it again (a lake has no lock)."""
        if self._writer is None or not self.backend.let_go(time.monotonic() - self._slice_started):
            return
        self._writer.close()
        self._writer = None
        self.backend.hand_over()

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
        already at this version is not written (but for its views, made again where ``views``
        names other benchmarks than they were made with: ``_views``), and a store of anything
        else is refused. On a lake, writers that create it at once conflict, and the losers find
        it made."""
        import duckdb

        deadline = time.monotonic() + self.lock_timeout
        with self._connect(write=True) as con:
            while True:
                if self._foreign(con):
                    raise StoreError(f"{self.name} is a {self.kind} of other things, not a "
                                     "ragbench store")  # fmt: skip
                version = self._schema(con)
                if version is None and not self.create:  # an empty file or lake: not a store
                    raise StoreMissing(self.backend.missing())
                recorded = self._views(con) if version is not None else None
                if version == SCHEMA_VERSION and self.view_names in (None, recorded):
                    return
                names = self.view_names or recorded or ViewNames()
                con.execute("BEGIN TRANSACTION")
                try:
                    if version != SCHEMA_VERSION:
                        if version is not None and version < 4:
                            con.execute(DROP_CHANGE_POINTS)
                        con.execute(self.backend.ddl(TABLES))
                        con.execute(MIGRATIONS)
                    con.execute(views_sql(names))
                    con.execute("DELETE FROM meta WHERE key IN ('schema_version', ?, ?)",
                                [GUARD_KEY, VIEWS_KEY])  # fmt: skip
                    con.execute("INSERT INTO meta VALUES ('schema_version', ?), (?, ''), (?, ?)",
                                [str(SCHEMA_VERSION), GUARD_KEY, VIEWS_KEY,
                                 names.to_json()])  # fmt: skip
                    con.execute("COMMIT")
                    return
                except duckdb.Error as exc:
                    with contextlib.suppress(duckdb.Error):
                        con.execute("ROLLBACK")
                    # another writer made it at once: look again
                    if not self._lost_race(exc, deadline, ("already exists", "duplicate")):
                        raise

    @staticmethod
    def _views(con) -> ViewNames | None:
        """The benchmark names the store's views were made with (``meta``), None where they
        were made before the names were kept."""
        rows = con.execute("SELECT value FROM meta WHERE key = ?", [VIEWS_KEY]).fetchall()
        return ViewNames.from_json(rows[0][0]) if rows else None

    def _lost_race(self, exc, deadline: float, also: tuple[str, ...] = ()) -> bool:
        """After a transaction failed: whether another writer's commit beat it (on a lake: a
        conflict, or one of ``also`` in the message: ``Backend.conflict``) with time left to
        try again, after a random pause."""
        if time.monotonic() > deadline or not self.backend.conflict(exc, also):
            return False
        time.sleep(random.uniform(0.005, 0.05))
        return True

    def close(self) -> None:
        """Nothing to close between calls; kept so that ``with Store(...)`` reads as before."""

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
