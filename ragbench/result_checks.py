"""What a result file must hold before it is stored (``validate``): a git commit hash,
plausible dates, at least one measurement, finite non-negative numbers wherever numbers
belong, texts DuckDB can store, each value the median of its samples."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime

from .store import FAILED, Measurement, Run, param_key

COMMIT = re.compile(r"[0-9a-f]{40}(?:[0-9a-f]{24})?")  # SHA-1, or SHA-256 repositories
# Plausible dates: after git existed, and not in the future (a day's clock skew allowed).
EARLIEST = datetime(2005, 4, 1).timestamp()
SKEW = 86400.0


def is_number(x) -> bool:
    """A number, not a bool (JSON's true is no value)."""
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def _check_value(x, what: str) -> None:
    try:
        ok = is_number(x) and math.isfinite(x) and x >= 0
    except OverflowError:  # an int beyond any float
        ok = False
    if not ok:
        raise ValueError(f"{what} is {str(x)[:40]!r}, not a finite non-negative number")


def _check_date(seconds: float | None, what: str) -> None:
    if seconds is not None and not EARLIEST <= seconds <= time.time() + SKEW:
        raise ValueError(f"{what} {seconds:.4g} s since 1970 is not a plausible date")


def _text(x, what: str, empty: bool = True) -> None:
    """A text DuckDB can store: str, UTF-8 encodable (no lone surrogates), or None."""
    if x is None:
        return
    if not isinstance(x, str) or (not empty and not x):
        raise ValueError(f"{what} {str(x)[:40]!r} is not a text")
    try:
        x.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError(f"{what} {x[:40]!r} is not valid UTF-8 text") from None


def _json(x, what: str) -> None:
    try:
        json.dumps(x, allow_nan=False).encode("utf-8")
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{what} cannot be stored as JSON ({exc})") from None


def validate(run: Run, rows: list[Measurement]) -> None:
    """ValueError naming the first thing in the file that is not as it must be."""
    if not isinstance(run.commit_hash, str) or not COMMIT.fullmatch(run.commit_hash):
        raise ValueError(f"commit hash {str(run.commit_hash)[:50]!r} is not a git commit hash")
    _text(run.machine, "machine", empty=False)
    if run.machine.startswith("-"):  # every printed command line would read it as an option
        raise ValueError(f"machine {run.machine[:40]!r} starts with '-', which the commands "
                         "printed for it (ragbench's, asv's) would take for an option: rename "
                         "it (asv's --machine, the results directory)")  # fmt: skip
    _text(run.env_name, "env_name")
    _text(run.environment, "the environment")
    _text(run.python, "python")
    _text(run.branch, "branch")
    for what in ("commit_time", "started_at", "ended_at"):
        _check_date(getattr(run, what), what)
    fp = run.fingerprint
    for k in ("gpu", "driver", "cuda", "torch", "triton", "timm", "python", "mode"):
        _text(fp.get(k), f"the fingerprint's {k}")
    hv = fp.get("harness_version")
    if hv is not None and not (isinstance(hv, int) and 0 <= hv < 2**31):
        raise ValueError(f"harness_version {str(hv)[:40]!r} is not a small integer")
    _json(fp, "its fingerprint")
    if not rows:
        raise ValueError("no measurements (every cell skipped, or no result column)")
    seen = set()
    for m in rows:
        where = f"{m.benchmark}.{m.metric} {str(m.params)[:200]}"
        _text(m.benchmark, "a benchmark name", empty=False)
        _text(m.metric, "a metric name", empty=False)
        _text(m.unit, f"{where}: the unit")
        _text(m.version, f"{where}: the version")
        for n, what in (
            (m.stats_number, "calls per sample (asv's number, pytest-benchmark's iterations)"),
            (m.stats_repeat, "samples (asv's repeat, pytest-benchmark's rounds)"),
        ):
            small = is_number(n) and math.isfinite(n) and n == int(n) and 0 <= n < 2**31
            if n is not None and not small:
                raise ValueError(f"{where}: the {what} {str(n)[:40]!r} is not a small integer")
        if not isinstance(m.params, dict) or not all(
            isinstance(k, str) and k and (isinstance(v, (str, int, float, bool)) or v is None)
            for k, v in m.params.items()
        ):
            raise ValueError(f"{where}: parameters are not a flat object of named values")
        _json(m.params, f"{where}: the parameters")
        for k, v in m.params.items():
            _text(k, "a parameter name")
            _text(v if isinstance(v, str) else None, f"{where}: a parameter")
        key = (m.benchmark, m.metric, param_key(m.params))
        if key in seen:
            raise ValueError(f"{where}: the same cell twice (names or parameters collide)")
        seen.add(key)
        if m.status == FAILED:
            continue
        _check_value(m.median, f"{where}: the value")
        for q, name in ((m.q25, "q25"), (m.q75, "q75"), (m.mean, "mean"), (m.stddev, "stddev")):
            if q is not None:
                _check_value(q, f"{where}: {name}")
        _check_interval(m.ci_99_a, m.ci_99_b, where)
        if m.samples is not None:
            if not isinstance(m.samples, list):
                raise ValueError(f"{where}: samples are {type(m.samples).__name__}, not a list")
            for x in m.samples:
                _check_value(x, f"{where}: a sample")
            _check_median(m, where)


def _check_interval(a, b, where: str) -> None:
    """asv's 99% interval: both bounds or neither, finite numbers, a <= b. A lower bound below
    0 is asv's: with few samples it extends the interval by a fitted distribution (the suite's
    own CPU img/s: -0.039)."""
    if a is None and b is None:
        return
    ok = all(is_number(x) and math.isfinite(x) for x in (a, b)) and a <= b
    if not ok:
        raise ValueError(f"{where}: the interval {str(a)[:20]}-{str(b)[:20]} is not one")


def _check_median(m: Measurement, where: str) -> None:
    """The value must be the median of the samples (asv's: either middle one for an even
    count): the gate reads the samples, history the value, and both must tell one story."""
    if not m.samples:
        return
    xs = sorted(m.samples)
    lo, hi = xs[(len(xs) - 1) // 2], xs[len(xs) // 2]
    if not lo * (1 - 1e-9) <= m.median <= hi * (1 + 1e-9):
        raise ValueError(f"{where}: the value {m.median:.6g} is not the median of its samples")
