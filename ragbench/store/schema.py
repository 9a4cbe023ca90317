"""The store's schema: its tables, their migration, its views (of the benchmarks a suite names:
``ViewNames``), and the DDL a DuckLake takes (``ragbench/store/core.py`` runs them;
docs/store.md describes every column)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass

# Units where a larger value is better; every other timed unit is a latency.
HIGHER_IS_BETTER = ("img/s", "rows/s", "ops/s")
# Units a speedup is taken of: times and throughputs (a ratio of hashes, drift or clocks is
# no speedup).
SPEED_UNITS = ("us", "ms", "s", "seconds", *HIGHER_IS_BETTER)

TABLES = """
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
CREATE TABLE IF NOT EXISTS change_point_series (
    branch VARCHAR NOT NULL,
    machine VARCHAR NOT NULL,
    environment VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    param_key VARCHAR NOT NULL,
    points INTEGER NOT NULL,
    last_commit VARCHAR,
    last_env_key VARCHAR,
    window_start INTEGER NOT NULL,
    window_commit VARCHAR,
    window_env_key VARCHAR,
    window_time TIMESTAMP,
    settings VARCHAR NOT NULL,
    computed_at TIMESTAMP,
    PRIMARY KEY (branch, machine, environment, benchmark, metric, param_key)
);
CREATE TABLE IF NOT EXISTS change_points (
    branch VARCHAR NOT NULL,
    machine VARCHAR NOT NULL,
    environment VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    param_key VARCHAR NOT NULL,
    window_start INTEGER NOT NULL,
    window_end INTEGER NOT NULL,
    position INTEGER NOT NULL,
    commit_hash VARCHAR NOT NULL,
    commit_time TIMESTAMP,
    env_key VARCHAR,
    env JSON,
    value DOUBLE,
    prev_commit_hash VARCHAR,
    prev_commit_time TIMESTAMP,
    prev_env_key VARCHAR,
    prev_env JSON,
    prev_value DOUBLE,
    before DOUBLE,
    after DOUBLE,
    timing JSON,
    prev_timing JSON
);
CREATE TABLE IF NOT EXISTS alerts (
    branch VARCHAR NOT NULL,
    machine VARCHAR NOT NULL,
    commit_hash VARCHAR NOT NULL,
    prev_commit_hash VARCHAR,
    commit_time TIMESTAMP,
    state VARCHAR NOT NULL,
    reason VARCHAR,
    changed_by VARCHAR,
    changed_at TIMESTAMP,
    fixed_by VARCHAR,
    found_at TIMESTAMP,
    PRIMARY KEY (branch, machine, commit_hash)
);
CREATE TABLE IF NOT EXISTS alert_cells (
    branch VARCHAR NOT NULL,
    machine VARCHAR NOT NULL,
    commit_hash VARCHAR NOT NULL,
    environment VARCHAR NOT NULL,
    benchmark VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    param_key VARCHAR NOT NULL,
    unit VARCHAR,
    kind VARCHAR,
    before DOUBLE,
    after DOUBLE,
    ratio_lo DOUBLE,
    ratio_hi DOUBLE,
    found_by VARCHAR,
    timing JSON,
    prev_timing JSON,
    rule VARCHAR,
    PRIMARY KEY (branch, machine, commit_hash, environment, benchmark, metric, param_key)
);
CREATE TABLE IF NOT EXISTS gate_verdicts (
    gate_id VARCHAR PRIMARY KEY,
    digest VARCHAR NOT NULL,
    base VARCHAR NOT NULL,
    head VARCHAR NOT NULL,
    machine VARCHAR NOT NULL,
    verdict VARCHAR NOT NULL,
    mode VARCHAR NOT NULL,
    rounds INTEGER NOT NULL,
    processes INTEGER NOT NULL,
    plan JSON,
    document VARCHAR NOT NULL,
    source VARCHAR NOT NULL,
    pr INTEGER,
    settles VARCHAR,
    recorded_at TIMESTAMP DEFAULT current_timestamp
);
CREATE TABLE IF NOT EXISTS gate_verdict_cells (
    gate_id VARCHAR NOT NULL,
    position INTEGER NOT NULL,
    benchmark VARCHAR NOT NULL,
    metric VARCHAR NOT NULL,
    param_key VARCHAR NOT NULL,
    status VARCHAR NOT NULL,
    change DOUBLE,
    words VARCHAR,
    note VARCHAR,
    PRIMARY KEY (gate_id, position)
);
"""
# Schema 2 -> 3: environments as other harnesses define them (``Run.environment``: asv's
# env_name, pytest-benchmark's Python and CPU) and their keys, the runner a machine was renamed
# from, asv's number and repeat per cell. An older store's runs get theirs from what it kept
# (this suite's own runs, those with a fingerprint, keep their keys).
MIGRATE_ENVIRONMENTS = r"""
ALTER TABLE runs ADD COLUMN IF NOT EXISTS environment VARCHAR;
ALTER TABLE runs ADD COLUMN IF NOT EXISTS runner VARCHAR;
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS stats_number INTEGER;
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS stats_repeat INTEGER;
UPDATE runs SET runner = machine WHERE runner IS NULL;
UPDATE runs SET environment = env_name
 WHERE environment IS NULL AND source = 'asv' AND fingerprint::VARCHAR = '{}';
UPDATE runs SET environment = nullif(concat_ws(', ',
        'python ' || nullif(regexp_extract(coalesce(python, ''), '^\d+\.\d+'), ''),
        nullif(json_extract_string(fingerprint, '$.cpu'), '')), '')
 WHERE environment IS NULL AND source = 'pytest-benchmark';
UPDATE runs SET env_key = left(sha256(environment), 12) WHERE environment IS NOT NULL;
"""
# Schema 4: the stored change points (ragbench.history.edivisive) keyed by the series' environment.
# A store of schema 3 may hold no such tables, or tables of another layout (main's history has
# commits of both): an older store's are dropped and made anew; they are derived data, which
# `detect` computes in memory until `ragbench changepoints` stores them again.
DROP_CHANGE_POINTS = """
DROP TABLE IF EXISTS change_points;
DROP TABLE IF EXISTS change_point_series;
"""
# Schema 6: the gates' own verdicts (``gate_verdicts``, ``gate_verdict_cells``: what
# ``ragbench gate --settle`` continues), made by TABLES; a pull request's recorded verdict names
# the one its JSON is (``gates.gate_id``).
MIGRATE_GATE_IDS = """
ALTER TABLE gates ADD COLUMN IF NOT EXISTS gate_id VARCHAR;
"""
# Schema 7: a summary's mean and standard deviation (pytest-benchmark's, whose saved runs keep
# no rounds' data), with its rounds in ``stats_repeat`` and calls a round in ``stats_number``:
# what judges such a cell (``compare.by_summary``: Welch's t on the two summaries).
MIGRATE_SUMMARIES = """
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS mean DOUBLE;
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS stddev DOUBLE;
"""
# Schema 8: how the harness timed each point (asv's number and repeat, pytest-benchmark's
# iterations and rounds: ``ragbench.store.timing``) kept with the stored change points and alert
# cells, at the step (``timing``) and before it (``prev_timing``). An older store's get theirs
# from the measurements: each point's and the one before it in its series (a newest run's
# cell: the point before, where a new one keeps the lookback's median).
MIGRATE_TIMING = """
ALTER TABLE change_points ADD COLUMN IF NOT EXISTS timing JSON;
ALTER TABLE change_points ADD COLUMN IF NOT EXISTS prev_timing JSON;
ALTER TABLE alert_cells ADD COLUMN IF NOT EXISTS timing JSON;
ALTER TABLE alert_cells ADD COLUMN IF NOT EXISTS prev_timing JSON;
CREATE TEMP TABLE timed_points AS
WITH pts AS (
    SELECT r.branch, r.machine, coalesce(r.environment, '') AS environment, m.benchmark,
           m.metric, m.param_key, r.commit_hash, r.env_key, min(r.commit_time) AS t,
           min(r.started_at) AS s, min(m.stats_number) AS n, min(m.stats_repeat) AS k,
           any_value(r.source) AS source
    FROM measurements m JOIN runs r USING (run_id)
    WHERE m.status = 'ok' AND m.median IS NOT NULL
      AND (r.label IS NULL OR r.label NOT LIKE 'gate:%')
      AND (m.stats_number IS NOT NULL OR m.stats_repeat IS NOT NULL)
    GROUP BY ALL
), named AS (
    SELECT *, CASE WHEN source = 'pytest-benchmark'
                   THEN json_object('iterations', n, 'rounds', k)
                   ELSE json_object('number', n, 'repeat', k) END AS timing
    FROM pts
)
SELECT *, lag(timing) OVER (PARTITION BY branch, machine, environment, benchmark, metric,
                                         param_key ORDER BY t NULLS FIRST, s, commit_hash,
                                         env_key) AS prev_timing
FROM named;
UPDATE change_points c SET timing = p.timing, prev_timing = p.prev_timing FROM timed_points p
 WHERE c.timing IS NULL AND c.branch = p.branch AND c.machine = p.machine
   AND c.environment = p.environment AND c.benchmark = p.benchmark AND c.metric = p.metric
   AND c.param_key = p.param_key AND c.commit_hash = p.commit_hash
   AND c.env_key IS NOT DISTINCT FROM p.env_key;
UPDATE alert_cells c SET timing = p.timing, prev_timing = p.prev_timing FROM (
    SELECT branch, machine, environment, benchmark, metric, param_key, commit_hash,
           any_value(timing) AS timing, any_value(prev_timing) AS prev_timing
    FROM timed_points GROUP BY ALL) p
 WHERE c.timing IS NULL AND c.branch = p.branch AND c.machine = p.machine
   AND c.environment = p.environment AND c.benchmark = p.benchmark AND c.metric = p.metric
   AND c.param_key = p.param_key AND c.commit_hash = p.commit_hash;
DROP TABLE timed_points;
"""
# Schema 9: the rule an alert cell was found under (``Policy.rule``: ``latency 0.05``, ``bound
# max 2``); NULL in the cells stored before, which are compared by their kind.
MIGRATE_RULES = """
ALTER TABLE alert_cells ADD COLUMN IF NOT EXISTS rule VARCHAR;
"""
# Schema 1 -> 2: a status per measurement; acceptances name their pull request and the commit
# they were given on (a main commit's carried copy names the PR head). Schema 2 -> 3 also:
# asv's 99% confidence interval of each value (``stats_ci_99_a``/``_b``), which judges a cell
# without raw samples as ``asv compare`` does (``compare.by_interval``).
MIGRATIONS = (
    """
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS status VARCHAR DEFAULT 'ok';
ALTER TABLE acceptances ADD COLUMN IF NOT EXISTS pr INTEGER;
ALTER TABLE acceptances ADD COLUMN IF NOT EXISTS given_on VARCHAR;
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS ci_99_a DOUBLE;
ALTER TABLE measurements ADD COLUMN IF NOT EXISTS ci_99_b DOUBLE;
"""
    + MIGRATE_ENVIRONMENTS
    + MIGRATE_GATE_IDS
    + MIGRATE_SUMMARIES
    + MIGRATE_TIMING
    + MIGRATE_RULES
)


# The views; ``{floor}`` and ``{drift}`` the conditions on their benchmarks (``views_sql``).
VIEWS = f"""
CREATE OR REPLACE VIEW series AS
SELECT m.*, r.commit_hash, r.commit_time, r.branch, r.machine, r.env_key, r.gpu,
       r.driver,
       r.cuda, r.torch, r.triton, r.python, r.harness_version, r.mode, r.label, r.started_at,
       r.source, r.environment
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
FROM series WHERE {{floor}}
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
FROM series WHERE {{drift}}
GROUP BY ALL;
"""


@dataclass(frozen=True)
class ViewNames:
    """The benchmarks that the views ``dispatch_floors`` and ``drift`` are made of, as data: a
    suite's own names, given to ``Store(views=...)`` by the layer that knows the suite (this
    suite's: ``ragbench.suite_views.SUITE_VIEWS``); the store knows no benchmark.
    ``dispatch_floor``: the benchmark whose ``floor_us`` and ``dispatch_us`` a dispatch floor is;
    ``drift_suffix``: the end of the name of each benchmark whose outputs' drift ``drift``
    shows. None: that view has no rows."""

    dispatch_floor: str | None = None
    drift_suffix: str | None = None

    def to_json(self) -> str:
        """As ``meta`` keeps them (``VIEWS_KEY``)."""
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ViewNames:
        return cls(**json.loads(text))


VIEWS_KEY = "views"  # the ``meta`` key of the names the store's views were made with
# The views, each after those it reads (a view is bound when it is made).
VIEW_ORDER = ("series", "speedups", "dispatch_floors", "drift")


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def views_sql(names: ViewNames) -> str:
    """The views, of the benchmarks ``names`` gives."""
    floor, suffix = names.dispatch_floor, names.drift_suffix
    floor = "FALSE" if floor is None else f"benchmark = {_literal(floor)}"
    drift = "FALSE" if suffix is None else f"ends_with(benchmark, {_literal(suffix)})"
    return VIEWS.format(floor=floor, drift=drift)


def lake_ddl(sql: str) -> str:
    """The tables as DuckLake takes them: no keys (``_guard`` keeps runs unique) and no
    computed defaults (every insert gives its time)."""
    sql = re.sub(r",\s*PRIMARY KEY \([^)]*\)", "", sql)
    return sql.replace(" PRIMARY KEY", "").replace(" DEFAULT current_timestamp", "")


# Every table and view of a ragbench store: a file holding anything else is not one.
OURS = {"meta", "runs", "measurements", "acceptances", "gates", "series", "speedups",
         "dispatch_floors", "drift", "change_point_series", "change_points", "alerts",
         "alert_cells", "gate_verdicts", "gate_verdict_cells"}  # fmt: skip

MEASUREMENT_COLUMNS = (
    "run_id", "benchmark", "metric", "params", "param_key", "variant", "group_key", "unit",
    "version", "median", "q25", "q75", "n", "samples", "status", "stats_number", "stats_repeat",
    "ci_99_a", "ci_99_b", "mean", "stddev",
)  # fmt: skip
COLUMN_TYPES = (*["VARCHAR"] * 3, "JSON", *["VARCHAR"] * 5, *["DOUBLE"] * 3, "INTEGER",
                 "DOUBLE[]", "VARCHAR", "INTEGER", "INTEGER", "DOUBLE", "DOUBLE", "DOUBLE",
                 "DOUBLE")  # fmt: skip
ACCEPTANCE_KEY = "commit_hash = ? AND benchmark = ? AND metric = ? AND param_key = ?"
INSERT_COLUMNS = f"INSERT INTO measurements ({', '.join(MEASUREMENT_COLUMNS)}) SELECT " + ", ".join(
    f"unnest(?::{t}[])" for t in COLUMN_TYPES
)
