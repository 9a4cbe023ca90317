"""Where a store is, and the one seam between its two kinds: a DuckDB file (``FileBackend``) or
a DuckLake (``LakeBackend``, ``lake.py``). ``Store`` holds one backend and calls it; everything
else of the store (the schema, the writes, the queries, the copies) is the same SQL on both.

What differs, and only that, is a backend's: opening a connection (a file's lock, waited for
and handed over; a cursor of this process's connection to the lake, watched), whether a store
is there, the tables' DDL, whether long writes go in slices that readers get in between (a
file's lock) and when a writer lets the file go, whether a failed transaction lost a race to
another writer (a lake's optimistic commits), what the dashboard's cache key and the size are,
how a copy attaches it, its maintenance, and the name and kind shown to users.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from .errors import StoreError, StoreLocked, StoreMissing
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
from .schema import lake_ddl

DEFAULT_PATH = Path("results/perf.duckdb")
ENV_VAR = "RAGBENCH_STORE"
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
# DuckDB 1.4's words, attaching read-only a lake that is not there: its catalog file, or
# DuckLake's tables in a catalog database (anything else, a role say, stays its own error)
NO_LAKE = ("read-only mode: database does not exist", "creating a new DuckLake is explicitly")


def store_spec(text: str | Path) -> str | Path:
    """A store as given on a command line: a lake string as it is, anything else a path."""
    return text if is_lake(text) else Path(text)


def default_path() -> str | Path:
    """``$RAGBENCH_STORE`` (a file or a lake) or ``results/perf.duckdb``."""
    return store_spec(os.environ.get(ENV_VAR) or DEFAULT_PATH)


def backend(spec: str | Path, *, read_only: bool, lock_timeout: float, on_wait=None) -> Backend:
    """The backend of a store as ``store_spec`` gives it: a lake string's, else a file's."""
    if is_lake(spec):
        return LakeBackend(Lake.parse(spec), read_only=read_only)
    return FileBackend(Path(spec), read_only=read_only, lock_timeout=lock_timeout,
                       on_wait=on_wait)  # fmt: skip


class Backend:
    """What a store's kind decides (module notes); ``FileBackend`` and ``LakeBackend`` are the
    two. ``name`` is what messages call the store, ``kind`` its kind in words (``DuckDB file``),
    ``label`` in one word (``duckdb``, what ``store info`` prints); ``slices``: whether a run of
    more than ``writes.SLICE_ROWS`` rows is written in slices with readers let in between (so
    that a writer that died can leave a slice's rows behind, for ``maintain`` to delete)."""

    name: str
    kind: str
    label: str
    slices: bool
    path: Path | None = None  # the file, where the store is one

    def exists(self) -> bool:
        """Whether the store is there (a reader's, or a writer's that may not make one)."""
        raise NotImplementedError

    def open(self, write: bool):
        """A connection for one query (read-only) or one transaction (read-write)."""
        raise NotImplementedError

    def mtime(self, connect) -> float:
        """A cache key for readers that changes with every write (``connect``: ``Store``'s)."""
        raise NotImplementedError

    def size(self, connect) -> tuple[int, int]:
        """(files, bytes) the store's data takes (``connect``: ``Store``'s)."""
        raise NotImplementedError

    def attach(self, con, alias: str) -> None:
        """Attach the store read-only to another store's connection ``con`` as ``alias``."""
        raise NotImplementedError

    def tidy(self, con, keep_days: float) -> None:
        """The backend's own maintenance on a write connection (``Store.maintain``)."""
        raise NotImplementedError

    def missing(self) -> str:
        """What a missing store's error says: where, and the commands that make one."""
        where = self.where
        return (f"no results store at {where}: check --store (or ${ENV_VAR}), or make one "
                f"with `ragbench ingest --store {where} <asv results dir>` (or `make demo`)"
                )  # fmt: skip

    @property
    def where(self) -> str:
        return self.name

    def prepare(self) -> None:
        """Before a writer makes or opens the store."""

    def ddl(self, tables: str) -> str:
        """The tables' DDL as this backend takes it."""
        return tables

    def watched(self):
        """Around one operation on the store (a context manager)."""
        return contextlib.nullcontext()

    def limit_memory(self, con, memory: str) -> None:
        """DuckDB's memory limit for one query on ``con`` (a reader's own connection)."""

    def let_go(self, held: float) -> bool:
        """Whether a writer that held a connection for ``held`` seconds closes it between two
        transactions, so that readers get in (``Store.yield_slice``)."""
        return False

    def hand_over(self) -> None:
        """After a writer closed its connection between transactions."""

    def released(self) -> None:
        """After a writer closed its connection for good."""

    def conflict(self, exc: Exception, also: tuple[str, ...] = ()) -> bool:
        """Whether a failed transaction lost a race to another writer's commit (a conflict, or
        one of ``also`` in the message): then it is tried again. A file has one writer."""
        return False


class FileBackend(Backend):
    """A DuckDB file: one process writes it or many read it at a time. A connection is opened
    for one query or transaction (or a writer's slice), waiting for the lock up to
    ``lock_timeout``; a waiting process leaves ``waiting_marker`` so that the writer lets it in."""

    kind = "DuckDB file"
    label = "duckdb"
    slices = True

    def __init__(self, path: Path, *, read_only: bool, lock_timeout: float, on_wait=None):
        self.path = path
        self.name = str(path)
        self.read_only = read_only
        self.lock_timeout = lock_timeout
        self.on_wait = on_wait

    @property
    def where(self) -> str:
        return str(self.path)

    def exists(self) -> bool:
        return self.path.exists()

    def prepare(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def open(self, write: bool):
        """A connection, read-write or read-only, once the file's lock lets it in."""
        import duckdb

        if self.path.exists() and not self.path.is_file():  # a FIFO would hang DuckDB
            raise StoreError(f"{self.path} is not a regular file")
        if write and not self.path.exists():
            self._make_file()
        start = time.monotonic()
        deadline = start + self.lock_timeout
        waited = False
        while True:
            seen = self._identity()
            try:
                con = quiet(
                    duckdb.connect(str(self.path), read_only=not write, config=DUCKDB_CONFIG)
                )
                if waited:  # in: the writer that let the file go for us may go on
                    with contextlib.suppress(OSError):
                        self.waiting_marker.unlink(missing_ok=True)
                return con
            except duckdb.Error as exc:
                if self._being_created(exc, seen) and time.monotonic() < start + CREATING_WAIT:
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
        """The file a process waiting for the lock touches, so that the writer lets it in
        after ``WRITE_SLICE`` instead of ``WRITE_HOLD``, and removes once it is in, so that the
        writer stays out until then (``HAND_OVER``)."""
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

    def _identity(self) -> tuple[int, int] | None:
        """(inode, size) of the file now; None where it is not there."""
        try:
            st = self.path.stat()
        except OSError:
            return None
        return st.st_ino, st.st_size

    def _being_created(self, exc: Exception, seen: tuple[int, int] | None) -> bool:
        """Whether DuckDB refused the file as one shorter than its header (see HEADER_BYTES),
        either as it was when the try began (``seen``, from ``_identity``) or as it is now, or
        because it was replaced during the try: a whole store linked over the empty file that
        DuckDB read (judged by the size after the try alone, that store was called corrupt;
        CI, 2026-11-27)."""
        if "not a valid duckdb database file" not in str(exc).lower():
            return False
        now = self._identity()
        if seen is None or now is None:  # appeared or gone during the try: let the next say
            return True
        return seen[1] < HEADER_BYTES or now[1] < HEADER_BYTES or seen[0] != now[0]

    def limit_memory(self, con, memory: str) -> None:
        con.execute(f"SET memory_limit = '{memory}'")
        con.execute("SET preserve_insertion_order = false")  # the query orders its rows

    def let_go(self, held: float) -> bool:
        """Once the slice is used up and another process waits (``waiting_marker``), or once
        it was held for ``WRITE_HOLD``."""
        return held > WRITE_HOLD or (held > WRITE_SLICE and self.waiting_marker.exists())

    def hand_over(self) -> None:
        """Wait until the process waiting for the file is in (it removes ``waiting_marker``),
        at most ``HAND_OVER`` seconds (then the marker is a process's that gave up, and goes)."""
        deadline = time.monotonic() + HAND_OVER
        time.sleep(LOCK_POLL * 2)  # nobody waiting: long enough for a reader's next try
        while self.waiting_marker.exists() and time.monotonic() < deadline:
            time.sleep(LOCK_POLL)
        with contextlib.suppress(OSError):
            self.waiting_marker.unlink(missing_ok=True)

    def released(self) -> None:
        """Let in: a process still waiting touches the marker again."""
        with contextlib.suppress(OSError):
            self.waiting_marker.unlink(missing_ok=True)

    def mtime(self, connect) -> float:
        """A cache key for readers that changes with every write: when the file last changed."""
        return self.path.stat().st_mtime

    def size(self, connect) -> tuple[int, int]:
        """(files, bytes): the one file."""
        return 1, self.path.stat().st_size

    def attach(self, con, alias: str) -> None:
        """Attach the file read-only to ``con`` as ``alias`` (``Store.copy_from``)."""
        quoted = str(self.path).replace("'", "''")
        con.execute(f"ATTACH '{quoted}' AS {alias} (READ_ONLY)")

    def tidy(self, con, keep_days: float) -> None:
        """The file's maintenance: a checkpoint."""
        con.execute("CHECKPOINT")


# Lake connections, one per lake and process: attaching costs a Postgres round trip and the
# extensions' load (~0.1 s), a cursor of it nothing. Each query or transaction takes a cursor.
_LAKES: dict[tuple[Lake, bool], object] = {}  # (lake, read-only) -> connection
_LAKES_LOCK = threading.Lock()


class LakeBackend(Backend):
    """A DuckLake (``lake.py``): no lock, readers read a snapshot, writers commit
    optimistically and the loser of a conflict tries again. Every operation is watched
    (``Lake.watch``): a catalog that stopped answering is a StoreError that says so."""

    kind = "DuckLake"
    label = "ducklake"
    slices = False

    def __init__(self, lake: Lake, *, read_only: bool):
        self.lake = lake
        self.name = lake.name
        self.read_only = read_only

    @property
    def where(self) -> str:
        return f"'{self.name}'"

    def exists(self) -> bool:
        """Whether a read-only attach finds the lake (StoreMissing is raised where not)."""
        with self.watched():
            self.open(write=False, read_only=True).close()
        return True

    def open(self, write: bool, read_only: bool | None = None):
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
                    raise StoreMissing(self.missing()) from None
                raise StoreError(f"cannot attach the lake {self.name}: "
                                 f"{redact(one_line(str(exc)))}") from None  # fmt: skip

    @contextlib.contextmanager
    def watched(self) -> Iterator[None]:
        """``Lake.watch``, and a catalog that did not answer (the watch cut it off, or libpq's
        connect_timeout) is a StoreError that says so, and this process's connection to the
        lake is made again next time."""
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

    def ddl(self, tables: str) -> str:
        """No keys (``Store._write``'s guard keeps runs unique), no computed defaults."""
        return lake_ddl(tables)

    def conflict(self, exc: Exception, also: tuple[str, ...] = ()) -> bool:
        """Another writer's commit beat it: a conflict (or one of ``also``). Anything else (a
        data path that cannot be written, say) is no race."""
        return any(w in str(exc).lower() for w in (CONFLICT, *also))

    def mtime(self, connect) -> float:
        """The lake's newest snapshot id."""
        with connect() as con:
            return float(lake_snapshot(con))

    def size(self, connect) -> tuple[int, int]:
        """The Parquet data and delete files that the newest snapshot reads."""
        with connect() as con:
            return lake_files(con)

    def attach(self, con, alias: str) -> None:
        self.lake.attach(con, alias, read_only=True)

    def tidy(self, con, keep_days: float) -> None:
        """DuckLake's own maintenance (``lake.maintain``)."""
        lake_maintain(con, keep_days)
