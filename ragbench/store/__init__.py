"""The results store: everything that speaks SQL to it (a DuckDB file or a DuckLake, its schema,
the writes, the queries, the dashboard's rollup); the rest of the house calls ``Store``.

No SQL lives outside this package: ingest, the gate, detection and the dashboard call the methods
of ``Store``. Schema (``SCHEMA_VERSION``; docs/store.md describes every column):

    runs          one row per result file: commit, commit time, branch, machine (and the
                  ``runner`` the file names, where ``[machines]`` maps it), the environment
                  (fingerprint JSON and its main fields; ``environment``, the one another
                  harness defines; ``env_key``, see ``Run.env_key``), harness version, mode,
                  times, and a ``label`` for runs a gate job made (``gate:<id>:base:0`` ...)
    measurements  one row per run x benchmark x parameter cell x metric: the parameters (JSON
                  and a canonical ``param_key``), unit, median, quartiles, raw samples, asv's
                  ``stats_number``/``stats_repeat`` and its 99% confidence interval of the value
                  (``ci_99_a``, ``ci_99_b``), and a ``status``: ``ok``, or ``failed`` where the
                  benchmark raised (no value)
    acceptances   failures a maintainer accepted on a pull request (the label), per cell and
                  commit; carried to the main commit that merged them
    gates         the verdict of each pull-request gate the trusted workflow read
    gate_verdicts what each gate decided (verdict, plan, canonical JSON and its digest) and
                  its blocking cells (``gate_verdict_cells``): what ``gate --settle`` reads
    views         ``series`` (measurements joined with their run), ``speedups`` (a candidate
                  backend against each other one in the same run and cell), ``dispatch_floors``,
                  ``drift``: these two of the benchmarks a suite names, given as data
                  (``ViewNames``; the store imports no benchmark) and kept in ``meta``

History is main's: the history queries (``series``, ``runs``, the views' readers) return runs
of one branch, ``main`` unless ``$RAGBENCH_BRANCH`` or ``branch=`` says otherwise, and never a
gate job's runs. ``any_branch=True`` lifts the branch filter (the gate's stored comparison).

A file or a lake: ``Store`` holds one backend (``backends.py``: ``FileBackend``,
``LakeBackend``) and calls it for the few things that differ (opening a connection, whether the
store is there, the tables' DDL, whether writes go in slices and when a writer lets readers in,
whether a failed commit lost a race, the cache key and size, attaching for a copy, maintenance,
the name and kind shown); no other code asks which one it has.

File connections are short: a reader opens the file read-only for one query, a writer
read-write for one transaction of at most ``SLICE_ROWS`` measurements (ingest keeps its
connection for a slice of transactions, at most ``WRITE_SLICE`` seconds, and never while it
reads a file). DuckDB lets one process write a file, or many read it, at a time; whoever finds
it locked waits (``lock_timeout``), so a reader waits at most one writer's slice. A run of more
rows than a transaction takes is written in slices under a claim in ``meta`` and shows when
its ``runs`` row, written last, does (``_add_in_slices``); until then no query sees its rows.

A lake has no lock: readers read a snapshot, and writers of many processes and machines commit
optimistically. DuckLake has no primary keys, so every write transaction also rewrites one row
of ``meta`` (the guard, ``_write``): two writers that overlap conflict there, and the loser
retries its transaction from the start, where it sees what the winner stored (a run is never
stored twice).

The package, one job a module (``Store`` composes the parts, which reach each other through
``self``):

    records.py          what a run is: ``Run``, ``Measurement``, ``Columns``, the keys
    errors.py           ``StoreError``, ``StoreLocked``, ``StoreMissing``
    backends.py         where a store is, and what a file and a lake do differently: a
                        file's lock and its waiting marker, this process's connection to each
                        lake and the watch around it
    core.py             opening a store: its backend, the write connection shared by many
                        transactions, one transaction, the schema's creation and checks
    writes.py           ``add_run`` (in slices), acceptances, gate verdicts (the pull
                        requests' and the gates' own), change points
    copies.py           ``copy_from``, ``maintain``, ``export_parquet``
    reads.py            the queries
    lake.py             DuckLake: the catalogue's URL, extensions, retries, snapshots
    schema.py           the tables, views (``ViewNames``) and migrations
    rollup.py           the dashboard's read model of a store file
    synthetic.py        the bulk writer of ``ragbench.synth``'s scale store
    timing.py           the measurement settings rows keep (asv's number and repeat,
                        pytest-benchmark's iterations and rounds) and when they moved
"""

from __future__ import annotations

from .backends import DEFAULT_PATH, ENV_VAR, Backend, default_path, store_spec
from .copies import Copies
from .core import BRANCH_VAR, SCHEMA_VERSION, Core, history_branch
from .errors import StoreError, StoreLocked, StoreMissing
from .reads import Reads
from .records import (
    ENV_FIELDS,
    FAILED,
    HISTORY_BRANCH,
    OK,
    VARIANT_PARAMS,
    Columns,
    Measurement,
    Run,
    env_key,
    environment_key,
    param_key,
)
from .schema import ViewNames
from .writes import Writes

__all__ = [
    "BRANCH_VAR",
    "DEFAULT_PATH",
    "ENV_FIELDS",
    "ENV_VAR",
    "FAILED",
    "HISTORY_BRANCH",
    "OK",
    "SCHEMA_VERSION",
    "VARIANT_PARAMS",
    "Backend",
    "Columns",
    "Measurement",
    "Run",
    "Store",
    "StoreError",
    "StoreLocked",
    "StoreMissing",
    "ViewNames",
    "default_path",
    "env_key",
    "environment_key",
    "history_branch",
    "param_key",
    "store_spec",
]


class Store(Reads, Writes, Copies, Core):
    """A results store: a DuckDB file, or a DuckLake given as ``ducklake:...`` (lake.py).
    ``Store(spec)`` creates it (and its schema) if needed, or brings an older schema up to
    date; a file store holds no connection between calls.

    ``read_only=True`` opens an existing store for queries, and ``create=False`` an existing
    one for writing: neither ever makes a store (a mistyped ``--store`` once left an 800 kB
    file behind), and a missing one (a file, or a lake a read-only attach cannot find) raises
    StoreMissing here, a line saying what makes one. ``branch`` names the history's branch
    (default ``history_branch()``). ``name`` is what messages call it (a lake's password
    hidden), ``backend`` what it is (``backends.Backend``: ``kind``, ``label``).

    ``views`` names the benchmarks the views ``dispatch_floors`` and ``drift`` are of
    (``ViewNames``; this suite's are ``ragbench.suite_views.SUITE_VIEWS``, which the commands
    give). A writer makes the views of them when it makes or migrates the store, or where the
    store's were made of other names; without ``views`` it leaves them as they are (a
    migration makes them of the names kept in ``meta``; a new store's hold no rows).
    """
