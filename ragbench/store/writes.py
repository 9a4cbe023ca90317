"""What changes a store (``Writes``, a part of ``Store``): ``add_run`` (a large run into a
file in slices, under a claim in ``meta``), acceptances given, withdrawn and carried to main,
gate verdicts, facts about the results, and the stored change points. Each is one
``_write`` transaction (``core.py``)."""

from __future__ import annotations

import contextlib
import json
import os
import random
import socket
import time
import uuid
from collections.abc import Iterable

from . import backends
from .core import Rollback
from .errors import StoreLocked
from .records import Columns, Measurement, Run
from .schema import ACCEPTANCE_KEY, INSERT_COLUMNS

# The most measurements one insert statement takes, and one write transaction of a file
# unless it is a slice of a larger run (``WRITE_SLICE`` seconds of such statements): 100,000
# took 1.2 s to insert and 0.16 s to commit here idle, and 10 s to insert with the machine's
# two cores shared by five other jobs; 2,000 take 1/50 of that. A full run is 750 at most.
SLICE_ROWS = 2_000
CLAIM = "ingest:"  # ``meta`` key of a run being written in slices: CLAIM + run_id
# A claim whose writer has not written a slice for this long is taken over (a writer on
# another host, or one whose process id was reused); a dead local process's at once.
CLAIM_STALE = 300.0
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
    "after": "DOUBLE", "timing": "JSON", "prev_timing": "JSON",
}  # fmt: skip


def _ts(seconds: float | None):
    from datetime import UTC, datetime

    return None if seconds is None else datetime.fromtimestamp(seconds, UTC).replace(tzinfo=None)


# The claims this process's sliced writes hold (``Store._add_in_slices``): any other claim of
# this process is one a failed write left.
_CLAIMS: set[str] = set()


def stale_claim(claim: str) -> bool:
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


class Writes:
    """The store's writes; needs ``Core``."""

    def add_run(self, run: Run, measurements: Iterable[Measurement] | Columns) -> int | None:
        """Store a run and its measurements; -> rows added, or None when the run was already
        stored (nothing changes). What the store refuses of its data is a ValueError, and
        nothing of it is stored then. One transaction, or where the backend slices writes (a
        file), for more than ``SLICE_ROWS`` rows, one per slice of them (``_add_in_slices``)."""
        cols = (
            measurements if isinstance(measurements, Columns) else Columns(run.run_id, measurements)
        )
        if self.backend.slices and len(cols) > SLICE_ROWS:
            return self._add_in_slices(run, cols)

        def work(con):
            if self._stored(con, run.run_id):
                raise Rollback(None)
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
        (``stale_claim``), deleting the rows that writer left. A slice that finds the claim gone
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
                    raise Rollback(None)
                other = holder(con)
                if other is not None and not stale_claim(other):
                    raise Rollback(other)  # another writer's: wait for it
                con.execute("DELETE FROM measurements WHERE run_id = ?", [run_id])  # its leftovers
            elif not (holder(con) or "").startswith(mine):
                raise Rollback(self._stored(con, run_id) or "lost")
            con.execute("DELETE FROM meta WHERE key = ?", [key])
            stop = start
            with _refused():
                while stop < len(cols) and (
                    stop == start or time.monotonic() - began < backends.WRITE_SLICE
                ):  # a slice's time is the lock's setting (backends.WRITE_SLICE): one for both
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
                    failures: list[dict], report: str = "",
                    gate_id: str | None = None) -> None:  # fmt: skip
        """The verdict of a pull request's gate (its failing cells and its markdown report),
        as the trusted workflow read it; a verdict recorded before for this head is replaced.
        ``gate_id``: the gate verdict (``record_gate_verdict``) its JSON is."""

        def work(con):
            con.execute("DELETE FROM gates WHERE pr = ? AND head = ?", [pr, head])
            con.execute(
                "INSERT INTO gates (pr, head, base, machine, failures, report, recorded_at, "
                "gate_id) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                [pr, head, base, machine, json.dumps(failures, sort_keys=True), report,
                 _ts(time.time()), gate_id],
            )  # fmt: skip

        self._write(work)

    def record_gate_verdict(self, verdict: dict, cells: list[dict]) -> bool:
        """A gate's verdict (a row of ``gate_verdicts``, ``recorded_at`` given here) and its
        blocking ``cells`` (rows of ``gate_verdict_cells`` less ``gate_id`` and ``position``,
        in order), in one transaction; -> whether it was new. A verdict of the same
        ``gate_id`` (the same document: the id is its digest's) is kept as it was."""
        row = {**verdict, "recorded_at": _ts(time.time())}

        def work(con):
            there = con.execute("SELECT 1 FROM gate_verdicts WHERE gate_id = ?",
                                [row["gate_id"]]).fetchall()  # fmt: skip
            if there:
                return False
            con.execute(f"INSERT INTO gate_verdicts ({', '.join(row)}) VALUES "
                        f"({', '.join('?' * len(row))})", list(row.values()))  # fmt: skip
            for i, c in enumerate(cells):
                c = {"gate_id": row["gate_id"], "position": i, **c}
                con.execute(f"INSERT INTO gate_verdict_cells ({', '.join(c)}) VALUES "
                            f"({', '.join('?' * len(c))})", list(c.values()))  # fmt: skip
            return True

        return self._write(work)

    def describe(self, **values: str) -> None:
        """Keep facts about the results in ``meta`` (ingest: asv's ``project`` and
        ``project_url``), each replacing the value stored before under its key."""

        def work(con):
            for key, value in values.items():
                con.execute("DELETE FROM meta WHERE key = ?", [key])
                con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])

        self._write(work)

    def save_change_points(self, states: list[dict], found: list[dict]) -> None:
        """Replace each series' state (``states``: rows of ``change_point_series``) and its
        change points of windows from ``window_from`` on (a key of each state, not a column)
        with ``found`` (rows of ``change_points``): a series' state and points in one
        transaction, ``SLICE_ROWS`` series a transaction, readers let in between
        (``yield_slice``). One transaction for an ingest's 100,000 new series held the file
        9.2 s against a reader (load 8)."""
        if not states:
            return
        key = ("branch", "machine", "environment", "benchmark", "metric", "param_key")
        if len(states) > SLICE_ROWS:
            parts = [states[i : i + SLICE_ROWS] for i in range(0, len(states), SLICE_ROWS)]
            part_of = {tuple(s[k] for k in key): n for n, part in enumerate(parts) for s in part}
            points: list[list[dict]] = [[] for _ in parts]
            for f in found:  # a point of no state given goes with the first
                points[part_of.get(tuple(f[k] for k in key), 0)].append(f)
            with self.writing():
                for part, its in zip(parts, points, strict=True):
                    self.save_change_points(part, its)
                    self.yield_slice()
            return
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

    def save_alerts(self, alerts: list[dict], cells: list[dict]) -> None:
        """Add ``alerts`` (rows of ``alerts``; one that is stored keeps its state) and their
        ``cells`` (rows of ``alert_cells``; a stored cell is replaced), in one transaction."""
        key = ("branch", "machine", "commit_hash")
        cell_key = (*key, "environment", "benchmark", "metric", "param_key")

        def work(con):
            for a in alerts:
                there = con.execute("SELECT 1 FROM alerts WHERE branch = ? AND machine = ? AND "
                                    "commit_hash = ?", [a[k] for k in key]).fetchall()  # fmt: skip
                if not there:
                    con.execute(f"INSERT INTO alerts ({', '.join(a)}) VALUES "
                                f"({', '.join('?' * len(a))})", list(a.values()))  # fmt: skip
            for c in cells:
                con.execute("DELETE FROM alert_cells WHERE "
                            + " AND ".join(f"{k} = ?" for k in cell_key),
                            [c[k] for k in cell_key])  # fmt: skip
                con.execute(f"INSERT INTO alert_cells ({', '.join(c)}) VALUES "
                            f"({', '.join('?' * len(c))})", list(c.values()))  # fmt: skip

        self._write(work)

    def set_alert_state(self, machine: str, commit_hash: str, state: str, *, by: str,
                        was: str, reason: str | None = None,
                        fixed_by: str | None = None) -> int:  # fmt: skip
        """Change the state of the alert of ``machine`` at ``commit_hash`` (a full hash) from
        ``was``, the state its caller read: a conditional update (``WHERE state = was``), so
        that a change made since that read (a person's, while an ingest judged the alert) is
        never overwritten. -> how many alerts changed (0: none such, or its state is no longer
        ``was``)."""

        def work(con):
            ((n,),) = con.execute(
                "UPDATE alerts SET state = ?, reason = ?, changed_by = ?, changed_at = ?, "
                "fixed_by = ? WHERE branch = ? AND machine = ? AND commit_hash = ? AND state = ?",
                [state, reason, by, _ts(time.time()), fixed_by, self.branch, machine,
                 commit_hash, was],
            ).fetchall()  # fmt: skip
            return n

        return self._write(work)
