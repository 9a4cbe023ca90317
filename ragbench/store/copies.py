"""Copying and keeping a store (``Copies``, a part of ``Store``): ``copy_from`` another
store (a runner's file into the lake, a lake into a file), ``maintain`` (DuckLake's
maintenance, or a file's leftovers deleted and a checkpoint), ``export_parquet``."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from .core import STORED
from .errors import StoreError
from .lake import one_line, redact
from .schema import OURS
from .writes import CLAIM, stale_claim

if TYPE_CHECKING:
    from . import Store


class Copies:
    """The store's copies and maintenance; needs ``Core`` (and ``Reads.size``)."""

    def export_parquet(self, out_dir: Path) -> list[Path]:
        """Every table and view (``schema.OURS``) as ``<name>.parquet`` under ``out_dir``.
        (A list of names of its own left the alerts and their states out.)"""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        paths = []
        with self._connect() as con:
            for name in sorted(OURS):
                path = out_dir / f"{name}.parquet"
                table = (con.sql(f"SELECT * FROM measurements WHERE {STORED}")
                         if name == "measurements" else con.table(name))  # fmt: skip
                table.write_parquet(str(path))  # the path never enters SQL
                paths.append(path)
        return paths

    def copy_from(self, source: Store) -> tuple[dict[str, int], list[str]]:
        """Every run (its measurements, raw samples and label with it), acceptance, gate
        verdict and gate's own verdict (``gate_verdicts`` with its cells) of ``source`` that
        this store lacks, in one transaction, run ids kept, and the stored change points and
        alerts of each branch and machine this store had no run of (its series are then the
        source's, point for point); -> rows added per table (a
        second copy adds none), and the runs added to a branch and machine this store had
        runs of: their change points are to be brought up to date
        (``changepoints.update``)."""
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
                ("gate_verdicts", missing.format(a=alias, t="gate_verdicts", on=key(
                    ("gate_id",)))),
                ("gate_verdict_cells", missing.format(a=alias, t="gate_verdict_cells", on=key(
                    ("gate_id", "position")))),
            ):  # fmt: skip
                ((added[table],),) = con.execute(f"INSERT INTO {table} BY NAME {select}").fetchall()
            series = ("branch", "machine", "environment", "benchmark", "metric", "param_key")
            for table, keys in (("change_point_series", series), ("change_points", series),
                                ("alerts", ("branch", "machine", "commit_hash")),
                                ("alert_cells", (*series, "commit_hash"))):  # fmt: skip
                added[table] = 0
                for branch, machine in fresh:
                    ((n,),) = con.execute(
                        f"INSERT INTO {table} BY NAME SELECT * FROM {alias}.{table} s WHERE "
                        f"s.branch = ? AND s.machine = ? AND NOT EXISTS (SELECT 1 FROM {table} "
                        f"d WHERE {key(keys)})", [branch, machine]).fetchall()  # fmt: skip
                    added[table] += n
            return added

        behind: list[str] = []
        with self.writing():
            con = self._held()
            try:
                source.backend.attach(con, alias)
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
        if self.backend.slices:  # only a write in slices leaves rows behind
            self._write(self._drop_leftovers)
        with self._connect(write=True) as con:
            self.backend.tidy(con, keep_days)
        after = self.size()
        return {"files_before": before[0], "bytes_before": before[1],
                "files_after": after[0], "bytes_after": after[1]}  # fmt: skip

    @staticmethod
    def _drop_leftovers(con) -> None:
        """The rows and claims of sliced writes whose writer died (``stale_claim``)."""
        claims = con.execute("SELECT key, value FROM meta WHERE starts_with(key, ?)",
                             [CLAIM]).fetchall()  # fmt: skip
        live = [k.removeprefix(CLAIM) for k, v in claims if not stale_claim(v)]
        con.execute(f"DELETE FROM measurements WHERE NOT {STORED} AND NOT list_contains(?, "
                    "run_id)", [live])  # fmt: skip
        con.execute("DELETE FROM meta WHERE starts_with(key, ?) AND NOT list_contains(?, key)",
                    [CLAIM, [CLAIM + r for r in live]])  # fmt: skip
