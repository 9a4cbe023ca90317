"""asv glue shared by the suite: grid mode, versions, cached grids, sample results.

How the suite runs under asv (``asv run --launch-method forkserver``): each process is a fork
of a server that imported the suite, and CUDA is initialised only in the forks (it does not
survive a fork). Each class measures its whole grid once, in ``setup_cache``: one process and
one CUDA context, the backends of one workload measured in alternating rounds so that their
ratios are honest. Its ``track_`` methods then return one cell of that cache (``measure``
holds the three caches), in a fork each: a cell costs a fork, not a start-up.

A ``track_`` method returns ``{"samples": [...], "number": 1}``. asv's runner reads that dict as
a timing result: it stores the median with quartiles and a 99% interval, and keeps the raw
samples under ``--record-samples``. A metric a cell cannot have (``gpu_us`` of a backend that
syncs with the host) is NaN, which asv shows as n/a.

``RAGBENCH_MODE`` picks the grid: ``quick`` (the default: pull requests, ``make demo``,
``make test``) or ``full`` (main). Each axis of the quick grid is a subset of the full one, so
the two modes' results compare cell by cell.
"""

from __future__ import annotations

import hashlib
import inspect
import math
import os

from .harness import HARNESS_VERSION

MODES = ("quick", "full")
NAN = math.nan


def mode() -> str:
    """The grid mode from ``RAGBENCH_MODE`` (default quick)."""
    value = os.environ.get("RAGBENCH_MODE", "quick")
    if value not in MODES:
        raise ValueError(f"RAGBENCH_MODE must be one of {', '.join(MODES)}, got {value!r}")
    return value


def grid(quick: list, full: list) -> list:
    """One parameter axis: ``quick`` in quick mode, ``full`` in full mode."""
    if not set(quick) <= set(full):
        raise ValueError(f"the quick axis {quick} must be a subset of the full axis {full}")
    return list(quick if mode() == "quick" else full)


def versioned(cls):
    """Set ``cls.version``: the harness version and a hash of the class's and its
    ``setup_cache``'s source (asv's own default hashes the benchmark, setup and setup_cache
    source, but cannot see the ruler in ``harness``).

    asv drops results of another version when it compares, and the store keeps the version
    with every row: a change of the ruler or of the benchmark starts a new series instead of
    reading as a regression.
    """
    source = inspect.getsource(cls) + inspect.getsource(cls.setup_cache)
    digest = hashlib.sha256(source.encode()).hexdigest()[:12]
    cls.version = f"harness{HARNESS_VERSION}-{digest}"
    return cls


def samples(values: list[float] | None):
    """A track_ result carrying raw samples (asv stores their median and keeps them); NaN
    where there are none."""
    if not values:
        return NAN
    return {"samples": [float(v) for v in values], "number": 1}


def skipped(reason: str) -> dict:
    """A cache for a grid that cannot run here at all (no GPU, a missing backend)."""
    return {"skip": reason, "cells": {}}


class Grid:
    """Base of the suite's classes: ``setup`` finds the cell of the cached grid or skips it.

    Subclasses name their ``table`` of the cache (``measure``) and take ``setup_cache`` from
    there. Skips raise NotImplementedError, which asv records as skipped, never as a value.
    """

    table = ""
    timeout = 1200  # seconds; setup_cache measures whole grids

    def setup(self, cache, *params):
        reason = cache["skip"]
        cell = cache["cells"].get(self.table, {}).get(tuple(params))
        if reason is None and cell is None:
            reason = f"not measured in the {mode()} grid"
        if reason is None:
            reason = cell.get("skip")
        if reason:
            raise NotImplementedError(reason)
        self.cell = cell

    def metric(self, name: str):
        """A metric of this cell: raw samples (a list) or one value."""
        value = self.cell.get(name)
        return samples(value) if value is None or isinstance(value, list) else value
