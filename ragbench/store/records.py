"""What the store holds of a run: ``Run`` (one result file's run and its environment),
``Measurement`` (one cell's metric in it), ``Columns`` (a run's measurements as the store's
columns), and the keys that name them (``param_key``, ``env_key``)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field

HISTORY_BRANCH = "main"
# The environment fields that move figures: a change of any is an environment change.
ENV_FIELDS = ("gpu", "driver", "cuda", "torch", "triton", "python")
# Parameters that name the thing being compared (a backend or a pipeline) in a cell.
VARIANT_PARAMS = ("backend", "pipeline")
# A measurement's status: a value, or a benchmark that raised (asv records it as null).
OK, FAILED = "ok", "failed"


def param_key(params: dict) -> str:
    """Canonical text of a parameter cell: ``batch=1,backend=triton`` (sorted names)."""
    return ",".join(f"{k}={params[k]}" for k in sorted(params))


def env_key(fields: dict) -> str:
    """A short hash of the fields in ``ENV_FIELDS``: equal keys, same environment."""
    text = json.dumps({k: fields.get(k) for k in ENV_FIELDS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def environment_key(environment: str) -> str:
    """The ``env_key`` of a run whose environment another harness defines: a short hash of
    ``environment`` (the same as the store's ``left(sha256(environment), 12)``, which migrates
    an older store's runs)."""
    return hashlib.sha256(environment.encode()).hexdigest()[:12]


@dataclass
class Run:
    """One result file's run. ``run_id`` is derived from what identifies the run (source,
    machine, commit, environment name, start time), so the same file always maps to it."""

    source: str
    commit_hash: str
    machine: str
    started_at: float | None  # seconds since the epoch
    commit_time: float | None = None
    ended_at: float | None = None
    branch: str | None = None
    env_name: str | None = None
    fingerprint: dict = field(default_factory=dict)
    harness_version: int | None = None
    mode: str | None = None
    label: str | None = None
    source_file: str | None = None
    # The environment as another harness defines it (asv's ``env_name``; pytest-benchmark's
    # Python and CPU); None for this suite's runs, whose fingerprint defines theirs.
    environment: str | None = None
    python: str | None = None  # where no fingerprint says (asv's ``python``)
    runner: str | None = None  # the machine the file names, where ``[machines]`` renamed it
    dirty: bool = False  # measured in a checkout with uncommitted changes (pytest-benchmark's)

    @property
    def env_key(self) -> str:
        """Equal keys, same environment: the hash of the fingerprint's ``ENV_FIELDS`` for this
        suite's runs (unchanged since schema 1), of ``environment`` for another harness's."""
        if self.environment is not None:
            return environment_key(self.environment)
        return env_key(self.fingerprint or {})

    @property
    def run_id(self) -> str:
        """The same for the same file on main (or on the branch it names); a file ingested
        for another branch too is another run, so a pull request's ingest can never make
        main's ingest of the same file read as 'already stored'."""
        machine = self.runner or self.machine  # a file is one run whatever its machine is called
        ident = f"{self.source}|{machine}|{self.commit_hash}|{self.env_name}|{self.started_at}"
        if self.branch != HISTORY_BRANCH:
            ident += f"|branch={self.branch}"
        return hashlib.sha256(ident.encode()).hexdigest()[:20]


@dataclass
class Measurement:
    """One benchmark cell's metric in one run; ``samples`` None where only a value exists;
    ``status`` ``failed`` (and no value) where the benchmark raised; ``ci_99_a``/``ci_99_b``
    asv's 99% confidence interval of the value, where it gives one."""

    benchmark: str
    metric: str
    params: dict
    unit: str | None
    median: float | None
    q25: float | None = None
    q75: float | None = None
    samples: list[float] | None = None
    version: str | None = None
    status: str = OK
    stats_number: int | None = None  # asv's ``number``: calls per sample
    stats_repeat: int | None = None  # asv's ``repeat``: samples
    ci_99_a: float | None = None
    ci_99_b: float | None = None
    mean: float | None = None  # a summary's mean and standard deviation over its
    stddev: float | None = None  # ``stats_repeat`` rounds (pytest-benchmark's)

    def row(self, run_id: str) -> tuple:
        variant = next((str(self.params[p]) for p in VARIANT_PARAMS if p in self.params), None)
        group = {k: v for k, v in self.params.items() if k not in VARIANT_PARAMS}
        n = len(self.samples) if self.samples else (1 if self.median is not None else 0)
        return (
            run_id, self.benchmark, self.metric, json.dumps(self.params, sort_keys=True),
            param_key(self.params), variant, param_key(group), self.unit, self.version,
            self.median, self.q25, self.q75, n, self.samples, self.status, self.stats_number,
            self.stats_repeat, self.ci_99_a, self.ci_99_b, self.mean, self.stddev,
        )  # fmt: skip


class Columns:
    """A run's measurements as the store's columns (``schema.MEASUREMENT_COLUMNS``), built
    before the store is opened: 0.7 s for 100,000 rows here, which no writer should hold the
    file for."""

    def __init__(self, run_id: str, measurements: Iterable[Measurement]):
        rows = [m.row(run_id) for m in measurements]
        self.n = len(rows)
        self.data = [list(c) for c in zip(*rows, strict=True)] if rows else []

    def __len__(self) -> int:
        return self.n

    def slice(self, start: int, stop: int) -> list[list]:
        return [c[start:stop] for c in self.data]
