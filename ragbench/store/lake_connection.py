"""This process's connection to each lake (``LakeConnection``, a part of ``Store``): made
once and shared by cursors, made again after an error, and the watch around each operation
that turns a catalog which stopped answering into a StoreError (``ragbench/store/lake.py`` holds
the lake's own calls)."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from .errors import StoreError, StoreMissing
from .lake import ALIAS, Lake, is_unanswered, one_line, redact

# DuckDB 1.4's words, attaching read-only a lake that is not there: its catalog file, or
# DuckLake's tables in a catalog database (anything else, a role say, stays its own error)
NO_LAKE = ("read-only mode: database does not exist", "creating a new DuckLake is explicitly")


# Lake connections, one per lake and process: attaching costs a Postgres round trip and the
# extensions' load (~0.1 s), a cursor of it nothing. Each query or transaction takes a cursor.
_LAKES: dict[tuple[Lake, bool], object] = {}  # (lake, read-only) -> connection
_LAKES_LOCK = threading.Lock()


class LakeConnection:
    """The lake's cursor and watch for ``Core``: needs ``lake``, ``name``, ``read_only`` and
    ``_missing``."""

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
