"""The bulk writer of ``ragbench.synth``'s scale store: its runs and measurements generated in
SQL straight into a new store's tables (the events and the noise are described in synth.py).

``write_scale`` takes what synth decided (the cells, the machines and their environments, one
run id per machine and commit) and writes it with a few ``INSERT ... SELECT``: 22.5M rows in
minutes, where ingesting as many result files would take hours.
"""

from __future__ import annotations

import json
from pathlib import Path

from .records import ENV_FIELDS


def write_scale(path: Path, cell_rows: list[tuple], machine_rows: list[tuple],
                run_rows: list[tuple], *, runs: int, env_at: int, t0: float,
                chunk: int) -> dict:  # fmt: skip
    """Runs and measurements into the new store at ``path`` (its schema already made):
    ``cell_rows`` (index, benchmark, metric, params JSON, param_key, variant, group_key, unit,
    base, noise, device, triton, fa2, env, newest), ``machine_rows`` (index, name, scale, and
    the env_key and fingerprint before and after the environment's move at commit ``env_at``),
    ``run_rows`` (run id, machine index, commit index, commit hash); ``chunk`` commits per
    insert. -> rows per table."""
    import duckdb

    con = duckdb.connect(str(path))
    try:
        con.execute("CREATE TEMP TABLE cells (c INTEGER, benchmark VARCHAR, metric VARCHAR, "
                    "params VARCHAR, param_key VARCHAR, variant VARCHAR, group_key VARCHAR, "
                    "unit VARCHAR, base DOUBLE, noise DOUBLE, device BOOLEAN, triton BOOLEAN, "
                    "fa2 BOOLEAN, env DOUBLE, newest BOOLEAN)")  # fmt: skip
        con.executemany("INSERT INTO cells VALUES (" + ", ".join(["?"] * 15) + ")", cell_rows)
        con.execute("CREATE TEMP TABLE machines (m INTEGER, name VARCHAR, scale DOUBLE, "
                    "key0 VARCHAR, fp0 JSON, key1 VARCHAR, fp1 JSON)")  # fmt: skip
        con.executemany("INSERT INTO machines VALUES (?, ?, ?, ?, ?, ?, ?)",
                        [(m, n, s, k0, json.dumps(f0, sort_keys=True), k1,
                          json.dumps(f1, sort_keys=True))
                         for m, n, s, k0, f0, k1, f1 in machine_rows])  # fmt: skip
        con.execute("CREATE TEMP TABLE gen (run_id VARCHAR, m INTEGER, i INTEGER, "
                    "commit_hash VARCHAR)")  # fmt: skip
        con.execute("INSERT INTO gen SELECT unnest(?::VARCHAR[]), unnest(?::INTEGER[]), "
                    "unnest(?::INTEGER[]), unnest(?::VARCHAR[])",
                    [list(c) for c in zip(*run_rows, strict=True)])  # fmt: skip
        fp_fields = ", ".join(f"json_extract_string(fp, '$.{k}') AS {k}" for k in ENV_FIELDS
                              if k != "python")  # fmt: skip
        con.execute(f"""
            INSERT INTO runs (run_id, source, commit_hash, commit_time, branch, machine,
                env_name, env_key, gpu, driver, cuda, torch, triton, timm, python,
                harness_version, mode, fingerprint, started_at, ended_at, ingested_at,
                label, source_file)
            SELECT run_id, 'asv', commit_hash, to_timestamp({t0} + i * 3600)::TIMESTAMP,
                   'main', name, 'synthetic', key, gpu, driver, cuda, torch, triton, '1.0.29',
                   json_extract_string(fp, '$.python'), 1, 'quick', fp,
                   to_timestamp({t0} + i * 3600 + 60)::TIMESTAMP,
                   to_timestamp({t0} + i * 3600 + 1800)::TIMESTAMP,
                   to_timestamp({t0} + i * 3600 + 1900)::TIMESTAMP, NULL, NULL
            FROM (SELECT g.*, x.name, CASE WHEN g.i >= {env_at} THEN x.key1 ELSE x.key0 END
                         AS key, CASE WHEN g.i >= {env_at} THEN x.fp1 ELSE x.fp0 END AS fp
                  FROM gen g JOIN machines x USING (m)), LATERAL (SELECT {fp_fields})
        """)  # fmt: skip

        def uniform(salt: int) -> str:  # (0, 1], from the hash of (machine, commit, cell)
            return f"((hash(g.m, g.i, c.c, {salt}) >> 11) + 1) / 9007199254740992.0"

        z = f"sqrt(-2 * ln({uniform(1)})) * cos(2 * pi() * {uniform(2)})"
        value = f"""c.base * CASE WHEN c.device THEN x.scale ELSE 1 END
            * CASE WHEN c.triton AND g.i >= {runs // 2} THEN 0.9 ELSE 1 END
            * CASE WHEN c.fa2 AND g.m = 0 AND g.i >= {4 * runs // 5} THEN 1.06 ELSE 1 END
            * CASE WHEN g.i >= {env_at} THEN c.env ELSE 1 END
            * CASE WHEN c.newest AND g.m = 0 AND g.i = {runs - 1} THEN 1.2 ELSE 1 END
            * CASE WHEN c.device AND {uniform(3)} <= 0.002 THEN 1.3 ELSE 1 END"""
        drift = """CASE WHEN c.metric = 'max_abs_diff' AND c.variant = 'triton'
                         THEN c.base + 0.0004 * (g.i // 250)
                         WHEN c.metric = 'output_hash' AND c.variant = 'triton'
                         THEN 17 + g.i // 250 ELSE c.base END"""
        for lo in range(0, runs, chunk):
            con.execute(f"""
                INSERT INTO measurements (run_id, benchmark, metric, params, param_key, variant,
                    group_key, unit, version, median, q25, q75, n, samples, status)
                SELECT run_id, benchmark, metric, params, param_key, variant, group_key, unit,
                       'synthetic-1', v, v * (1 - 0.674 * noise), v * (1 + 0.674 * noise), 10,
                       NULL, 'ok'
                FROM (SELECT g.run_id, c.*, CASE WHEN c.benchmark = 'numerics.Drift'
                             THEN {drift} ELSE ({value}) * (1 + c.noise * {z}) END AS v
                      FROM gen g JOIN machines x USING (m), cells c
                      WHERE g.i >= {lo} AND g.i < {lo + chunk}
                      ORDER BY g.m, g.i, c.c)
            """)  # fmt: skip
        con.execute("CHECKPOINT")
        counts = {t: con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                  for t in ("runs", "measurements")}  # fmt: skip
    finally:
        con.close()
    return counts
