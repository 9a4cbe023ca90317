"""The dashboard's read model of a store file: its runs and measurements without raw samples,
each series' rows together, in a DuckDB file of the store's own schema (so every ``Store``
query reads it unchanged), kept up to date with the runs the store gains.

    with Rollup.of(store_path) as r:   # built or brought up to date, then read-only
        r.series(machine=..., benchmark=..., metric=...)

Why: on a store of 10,000 runs x 750 cells x 3 machines (22.5M rows, ``ragbench.synth``) a
query of one series scans every measurement and joins it with its run (5.7 s, load ~16). Here the
measurements are sorted by benchmark, metric, cell, machine and commit time, so DuckDB's zone
maps (each row group's min and max) skip every row group but the series' own (1.2 s, load ~25).
Raw samples stay in the store: a comparison of two commits reads them there.

Built once from the store (1,026 s, 124 s of CPU, 2.2 GB at most; 773 MB on disk against the
store's 2.3 GB), then each sync appends only the runs the store gained since (a sync that finds
nothing new: 1.4-2.4 s), unsorted at the end; once that tail holds more than a quarter of the
rows the whole is sorted again. A rollup is a cache: deleting it costs a
rebuild, nothing else. File stores only (a lake's queries read its own Parquet files).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
from collections.abc import Iterator
from pathlib import Path

from . import SCHEMA_VERSION, Store, schema
from .lake import DUCKDB_CONFIG, quiet

# the series' order: what a page filters on, most selective first
ORDER = "m.benchmark, m.metric, m.param_key, r.machine, r.commit_time, r.started_at"
COLUMNS = [c for c in schema.MEASUREMENT_COLUMNS if c != "samples"]
RESORT = 0.25  # sort the whole again once the unsorted tail is this fraction of the rows
OWN_META = "('schema_version', 'sorted_rows')"
MEMORY = "2GB"


def cache_path(store: Path) -> Path:
    """Where the rollup of ``store`` lives: ``$RAGBENCH_DASHBOARD_CACHE`` (a directory), else
    ``~/.cache/ragbench``, named by the store's absolute path."""
    root = Path(os.environ.get("RAGBENCH_DASHBOARD_CACHE") or Path.home() / ".cache/ragbench")
    name = hashlib.sha256(str(Path(store).resolve()).encode()).hexdigest()[:16]
    return root / f"rollup-{Path(store).stem}-{name}.duckdb"


@contextlib.contextmanager
def _opened(path: Path) -> Iterator:
    """A connection to the rollup at ``path``, held alone: every reader and the writer (its
    threads and other processes alike) take the lock beside it, so that DuckDB's one writer
    a file and one configuration a process never meet. A query holds it for milliseconds."""
    import duckdb

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(f"{path}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        # a sort of 22.5M rows took 10.8 GB unbounded: bounded, it spills beside the rollup
        con = quiet(duckdb.connect(str(path), config={
            **DUCKDB_CONFIG, "memory_limit": MEMORY, "temp_directory": f"{path}.tmp"}))  # fmt: skip
        try:
            yield con
        finally:
            con.close()


class Rollup(Store):
    """A read-only ``Store`` over the rollup of a store file (module notes)."""

    def __init__(self, path: Path, source: Path, branch: str | None = None):
        self.rollup = Path(path)
        self.source = Path(source)
        super().__init__(source, read_only=True, branch=branch)

    @classmethod
    def of(cls, store: Path, path: Path | None = None, branch: str | None = None) -> Rollup:
        """The rollup of the store file ``store`` (at ``path``, default ``cache_path``),
        brought up to date with it."""
        path = Path(path) if path else cache_path(store)
        sync(Path(store), path)
        return cls(path, store, branch)

    def cells(self, *, machine: str | None = None, frame: bool = False):
        """``Store.cells``, from the rollup's catalogue of cells (kept by ``sync``)."""
        where, args = ["branch = ?"], [self.branch]
        if machine is not None:
            where.append("machine = ?")
            args.append(machine)
        return self._rows(
            "SELECT DISTINCT benchmark, metric, param_key, variant, group_key, unit FROM cells "
            f"WHERE {' AND '.join(where)} ORDER BY 1, 2, 3", args, frame,
        )  # fmt: skip

    def metrics(self, *, frame: bool = False):
        """``Store.metrics``, from the catalogue of cells (the store's scans every row)."""
        return self._rows("SELECT benchmark, metric, any_value(unit) AS unit, "
                          "bool_or(variant IS NOT NULL) AS variants FROM cells GROUP BY ALL "
                          "ORDER BY 1, 2", frame=frame)  # fmt: skip

    @contextlib.contextmanager
    def _connect(self, write: bool = False) -> Iterator:
        if write:
            raise RuntimeError("a rollup is read through Store's queries, written by sync()")
        with _opened(self.rollup) as con:
            yield con


# Store schemas whose rollup rows are this schema's: 5 added only the alerts tables, 6 only the
# gates' own verdicts and a column of ``gates``, which a rollup does not hold, so a rollup of 4
# or 5 gains them instead of being built again (17 min for a 10,000-run store).
SAME_ROWS = ("4", "5")
# The pickers' catalogue: each cell with a value on each machine and branch (gate runs left out,
# as the history's queries leave them out).
CELLS = """CREATE TABLE cells (branch VARCHAR, machine VARCHAR, benchmark VARCHAR,
    metric VARCHAR, param_key VARCHAR, variant VARCHAR, group_key VARCHAR, unit VARCHAR)"""


def _create(con) -> None:
    con.execute(schema.lake_ddl(schema.TABLES))  # no keys: sync keeps runs unique
    con.execute(schema.MIGRATIONS)
    con.execute(CELLS)
    con.execute("INSERT INTO meta VALUES ('schema_version', ?), ('sorted_rows', '0')",
                [str(SCHEMA_VERSION)])  # fmt: skip


def _version(con) -> str | None:
    """The rollup's schema version (the store's it was built under), None where it has none."""
    if not con.execute("SELECT count(*) FROM duckdb_tables() WHERE table_name = 'meta' AND "
                       "database_name = current_database()").fetchone()[0]:  # fmt: skip
        return None
    row = con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    return row[0] if row else None


def sync(store: Path, path: Path) -> dict:
    """Bring the rollup at ``path`` up to date with the store file ``store``: its new runs'
    rows appended (or everything sorted again, module notes); -> {"runs": new runs, "rows":
    rows appended, "sorted": whether it sorted}."""
    Store(store, read_only=True).branches()  # a ragbench store of this schema, or StoreError
    with _opened(path) as con:
        if _version(con) in SAME_ROWS:  # the store's new tables are none a rollup holds
            con.execute(schema.lake_ddl(schema.TABLES))
            con.execute(schema.MIGRATE_GATE_IDS)
            con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'",
                        [str(SCHEMA_VERSION)])  # fmt: skip
        if _version(con) != str(SCHEMA_VERSION):  # new, or of another ragbench: built anew
            for kind, name in con.execute(
                "SELECT 'VIEW', view_name FROM duckdb_views() WHERE NOT internal AND "
                "database_name = current_database() UNION ALL SELECT 'TABLE', table_name FROM "
                "duckdb_tables() WHERE database_name = current_database()"
            ).fetchall():
                con.execute(f"DROP {kind} IF EXISTS {name}")
            _create(con)
        con.execute(f"ATTACH '{store}' AS src (READ_ONLY)")
        try:
            _views(con)
            return _append(con)
        finally:
            con.execute("DETACH src")


def _views(con) -> None:
    """The store's views, as the store made them (of the benchmarks its writer named:
    ``schema.ViewNames``), made again from the first where the rollup's differ."""
    mine = "database_name = current_database() AND NOT internal"
    theirs = dict(con.execute("SELECT view_name, sql FROM duckdb_views() WHERE "
                              "database_name = 'src' AND NOT internal").fetchall())  # fmt: skip
    ours = dict(con.execute(f"SELECT view_name, sql FROM duckdb_views() WHERE {mine}").fetchall())
    changed = False  # a view made again, and every view after it (a view binds those it reads)
    for name in schema.VIEW_ORDER:
        changed = changed or ours.get(name) != theirs.get(name)
        if changed and name in theirs:
            con.execute(f"DROP VIEW IF EXISTS {name}")
            con.execute(theirs[name])


def _append(con) -> dict:
    con.execute("BEGIN TRANSACTION")
    gone = con.execute("SELECT count(*) FROM runs WHERE run_id NOT IN (SELECT run_id FROM "
                       "src.runs)").fetchone()[0]  # fmt: skip
    if gone:  # another store at the same path, or runs deleted: built again
        for table in ("runs", "measurements", "cells"):
            con.execute(f"DELETE FROM {table}")
        con.execute("UPDATE meta SET value = '0' WHERE key = 'sorted_rows'")
    con.execute("CREATE TEMP TABLE new_runs AS SELECT * FROM src.runs WHERE run_id NOT IN "
                "(SELECT run_id FROM runs)")  # fmt: skip
    runs = con.execute("SELECT count(*) FROM new_runs").fetchone()[0]
    total = con.execute("SELECT count(*) FROM measurements").fetchone()[0]
    sorted_rows = int(con.execute("SELECT value FROM meta WHERE key = 'sorted_rows'").fetchone()[0])
    cols = ", ".join(COLUMNS)
    picked = ", ".join(f"m.{c}" for c in COLUMNS)
    rows = 0
    if runs:
        con.execute("INSERT INTO runs SELECT * FROM new_runs")
        con.execute(f"CREATE TEMP TABLE new_rows AS SELECT {picked}, r.branch, r.machine, "
                    "r.label FROM src.measurements m JOIN new_runs r USING (run_id) "
                    f"ORDER BY {ORDER}")  # fmt: skip
        rows = con.execute(f"INSERT INTO measurements ({cols}) SELECT {cols} FROM new_rows"
                           ).fetchone()[0]  # fmt: skip
        con.execute(
            "INSERT INTO cells SELECT DISTINCT branch, machine, benchmark, metric, "
            "param_key, variant, group_key, unit FROM new_rows WHERE status = 'ok' "
            "AND (label IS NULL OR label NOT LIKE 'gate:%') EXCEPT SELECT * FROM cells"
        )
        con.execute("DROP TABLE new_rows")
    # acceptances, gates and meta (the project's name) are small, and change without a new
    # run: copied whole
    for table in ("acceptances", "gates"):
        con.execute(f"DELETE FROM {table}")
        con.execute(f"INSERT INTO {table} BY NAME SELECT * FROM src.{table}")
    con.execute(f"DELETE FROM meta WHERE key NOT IN {OWN_META}")
    con.execute(f"INSERT INTO meta SELECT * FROM src.meta WHERE key NOT IN {OWN_META}")
    resort = rows and total + rows - sorted_rows > RESORT * (total + rows)
    if resort and sorted_rows:
        con.execute(f"CREATE TEMP TABLE everything AS SELECT {picked} FROM measurements m "
                    f"JOIN runs r USING (run_id) ORDER BY {ORDER}")  # fmt: skip
        con.execute("DELETE FROM measurements")
        con.execute(f"INSERT INTO measurements ({cols}) SELECT * FROM everything")
        con.execute("DROP TABLE everything")
    if resort:
        con.execute("UPDATE meta SET value = ? WHERE key = 'sorted_rows'", [str(total + rows)])
    con.execute("DROP TABLE new_runs")
    con.execute("COMMIT")
    if rows:
        con.execute("CHECKPOINT")
    return {"runs": runs, "rows": rows, "sorted": bool(resort)}
