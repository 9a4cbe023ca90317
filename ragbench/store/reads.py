"""The store's queries (``Reads``, a part of ``Store``): counts, metrics, cells, runs,
series, speedups, dispatch floors, drift, acceptances and gate verdicts, and what detection
reads (``series_points``, ``lookback``, the stored change points). History is main's unless
``branch`` says otherwise, never a gate job's runs."""

from __future__ import annotations

import json
from collections.abc import Iterable

from . import timing
from .core import STORED
from .records import ENV_FIELDS, FAILED, OK

# DuckDB's memory for the lookback's query over a file: it caches what it scans. On the
# 10,000-run store (22.5M rows), `detect --last 200` peaked at 810 MB of RSS without a limit,
# 852 MB with this one; at 400 MB `--last 2000` ran out of memory (its window functions hold
# 1.5M points), at 600 MB it peaked at 964 MB: a reader stays within 1 GB.
LOOKBACK_MEMORY = "600MB"
# A run of the history (``r``: runs, its branch the argument) and a measurement (``m``) with a
# value: what a point of a series is made of.
HISTORY_RUN = "r.branch = ? AND (r.label IS NULL OR r.label NOT LIKE 'gate:%')"
POINT = "m.status = 'ok' AND m.median IS NOT NULL"
# The alert cells ``alerts`` returns: steps of the code and findings (alerted), or the steps
# where a measurement setting changed (listed apart: ``ragbench.store.timing``).
CODE, SETTINGS = "code", "settings"


class Reads:
    """The store's queries; needs ``Core``."""

    def _rows(self, sql: str, args: list | None = None, frame: bool = False,
              memory: str | None = None):  # fmt: skip
        """Rows of one query (dicts, or a DataFrame); ``memory``: DuckDB's memory limit for it
        on a connection of its own (``Backend.limit_memory``: a file's; a lake's connection is
        the process's, left as it is)."""
        with self._connect() as con:
            if memory and self._writer is None:
                self.backend.limit_memory(con, memory)
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
        return self.backend.mtime(self._connect)

    def size(self) -> tuple[int, int]:
        """(files, bytes) the store's data takes: the DuckDB file, or the Parquet data and
        delete files that the lake's newest snapshot reads."""
        return self.backend.size(self._connect)

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

    def gate_verdict(self, *, gate_id: str | None = None,
                     digest: str | None = None) -> dict | None:  # fmt: skip
        """The gate verdict recorded (``Writes.record_gate_verdict``) under ``gate_id``, or
        whose document has ``digest``, with its ``cells`` in order; None where there is none."""
        col, value = ("gate_id", gate_id) if gate_id is not None else ("digest", digest)
        rows = self._rows(f"SELECT * FROM gate_verdicts WHERE {col} = ?", [value])
        if not rows:
            return None
        cells = self._rows("SELECT * FROM gate_verdict_cells WHERE gate_id = ? ORDER BY position",
                           [rows[0]["gate_id"]])  # fmt: skip
        return {**rows[0], "cells": cells}

    # --- stored change points (ragbench/history/edivisive.py computes them) -----------------------

    def series_points(self, machine: str, environment: str, *, since=None,
                      keys: Iterable[tuple] | None = None) -> list[tuple]:  # fmt: skip
        """The points of the machine's series in one environment (``environment``; '' for runs
        without one) on the history's branch: one per series, commit and ``env_key``, the
        median of its runs' medians, values only (no failed cell). Rows ``(benchmark, metric,
        param_key, commit_hash, env_key, commit_time, started_at, value, number, repeat,
        source, version, *ENV_FIELDS)``: ``number`` and ``repeat`` the smallest of its runs'
        settings and ``version`` the largest of their asv benchmark versions
        (``ragbench.store.timing``), ``source`` their harness; ordered by series, then commit time
        and start. ``since``: commits from that time on; ``keys``: these series (benchmark,
        metric, param_key) only."""
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
               f"min(r.commit_time) AS t, min(r.started_at) AS s, median(m.median), "
               f"min(m.stats_number), min(m.stats_repeat), any_value(r.source), "
               f"max(m.version), {env} "
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
        each window found; ``ragbench.history.edivisive.merged`` makes one list of them)."""
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
                   min(r.started_at) AS started_at, median(m.median) AS value,
                   min(m.stats_number) AS stats_number, min(m.stats_repeat) AS stats_repeat,
                   any_value(r.source) AS source, max(m.version) AS version
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

    def newest_commit(self, machine: str) -> tuple[str, object] | None:
        """(commit_hash, commit_time) of the machine's newest run on the history's branch."""
        rows = self._rows(f"SELECT commit_hash, commit_time FROM runs r WHERE {HISTORY_RUN} AND "
                          "machine = ? ORDER BY commit_time DESC NULLS LAST, started_at DESC "
                          "LIMIT 1", [self.branch, machine])  # fmt: skip
        return (rows[0]["commit_hash"], rows[0]["commit_time"]) if rows else None

    def alerts(self, machine: str | None = None, *, state: str | None = None,
               commit: str | None = None, cells: str | None = CODE) -> list[dict]:  # fmt: skip
        """main's alerts (``ragbench.history.alerting``), newest commit first, each with the
        ``mode`` of its commit's runs and its ``cells`` (rows of ``alert_cells``, each with
        ``settings_changed``: the measurement settings that moved at its step, ``asv number
        89287 -> 1``, else None: ``ragbench.store.timing``); of one machine, state or commit (a
        prefix) where given.
        ``cells``: ``code`` (the steps of the code and the findings: what is alerted),
        ``settings`` (the steps where a measurement setting changed: listed apart, never
        alerted), or None (both); an alert without such cells is left out."""
        where, args = ["branch = ?"], [self.branch]
        for col, val in (("machine", machine), ("state", state)):
            if val is not None:
                where.append(f"{col} = ?")
                args.append(val)
        if commit:
            where.append("starts_with(commit_hash, ?)")
            args.append(commit)
        # ``mode``: the grid main's runs of the commit measured (this suite's quick or full;
        # None for another harness's), which a re-measurement of its cells must name
        found = self._rows(f"SELECT a.*, (SELECT max(r.mode) FROM runs r WHERE {HISTORY_RUN} "
                           "AND r.machine = a.machine AND r.commit_hash = a.commit_hash) AS mode "
                           f"FROM alerts a WHERE {' AND '.join(where)} "
                           "ORDER BY commit_time DESC NULLS LAST, machine",
                           [self.branch, *args])  # fmt: skip
        if not found:
            return []
        rows = self._rows(
            "SELECT * FROM alert_cells WHERE branch = ? AND list_contains(?, commit_hash) "
            "ORDER BY machine, commit_hash, benchmark, metric, param_key, environment",
            [self.branch, sorted({a["commit_hash"] for a in found})],
        )  # fmt: skip
        by = {}
        for c in rows:
            c["settings_changed"] = timing.changed(timing.parse(c["prev_timing"]),
                                                   timing.parse(c["timing"]), c["before"],
                                                   c["after"])  # fmt: skip
            if cells is None or (c["settings_changed"] is None) == (cells == CODE):
                by.setdefault((c["machine"], c["commit_hash"]), []).append(c)
        keys = [(a["machine"], a["commit_hash"]) for a in found]
        return [
            {**a, "cells": by.get(k, [])}
            for a, k in zip(found, keys, strict=True)
            if cells is None or k in by
        ]
