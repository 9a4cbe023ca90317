"""The policies: which rule judges each metric (its kind, threshold, bounds) and the gate's
and main's settings, read from ``policies.toml`` (or a file given in its place). The comparison
(``ragbench.verdicts.comparison``), main's history (``ragbench.history.series``), ingest
(``[machines]``) and the trusted verdict (``[gate] max_accepted``) all read them from here.
"""

from __future__ import annotations

import fnmatch
import math
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from . import jsonfile

POLICIES = Path(__file__).with_name("policies.toml")
STATISTICAL = ("latency", "throughput")


@dataclass(frozen=True)
class Policy:
    match: str
    kind: str  # latency | throughput | bound | hash | info
    threshold: float = 0.0
    max: float | None = None
    min: float | None = None
    relative_to: dict | None = None
    paired: bool = False  # includes host time: judged from base and head in one process
    history_only: bool = False  # judged on main's history, shown but never gated in a PR
    min_samples: int | None = None  # a side needs this many to be judged ([gate] min_samples)
    metric: str = "*"  # a glob of the metric's own name (``time_*``: asv's time benchmarks)
    unit: tuple[str, ...] | None = None  # only metrics of these units (globs); None: any

    def rule(self) -> str:
        """What judges a cell, in words an alert's cell keeps (``latency 0.05``, ``bound max 2``,
        ``bound max 0.007 or 2 x backend=padded_full``, ``info``): a cell found under one rule
        is not undone under another."""
        if self.kind in STATISTICAL:
            return f"{self.kind} {self.threshold:.4g}"
        if self.kind != "bound":
            return self.kind
        words = [f"{side} {v:.6g}" for side, v in (("min", self.min), ("max", self.max))
                 if v is not None]  # fmt: skip
        if self.relative_to:
            r = self.relative_to
            words.append(f"or {r.get('factor', 1):g} x {r.get('param')}={r.get('value')}")
        return " ".join(["bound", *words])

    def applies(self, benchmark: str, metric: str, unit: str | None) -> bool:
        """Whether this rule judges ``benchmark.metric`` of ``unit``."""
        if not (fnmatch.fnmatchcase(f"{benchmark}.{metric}", self.match)
                and fnmatch.fnmatchcase(metric, self.metric)):  # fmt: skip
            return False
        return self.unit is None or (
            unit is not None and any(fnmatch.fnmatchcase(unit, u) for u in self.unit)
        )


@dataclass(frozen=True)
class Policies:
    rules: tuple[Policy, ...]
    gate: dict
    main: dict

    # ``[machines]``: runner-name glob -> machine, first match (hosted CI runners, each named
    # after its node, are one machine)
    machines: dict[str, str] = field(default_factory=dict)

    def machine(self, runner: str) -> str:
        """The machine a runner's results belong to (``[machines]``), else its own name."""
        return next((m for p, m in self.machines.items() if fnmatch.fnmatchcase(runner, p)), runner)

    def for_metric(self, benchmark: str, metric: str, unit: str | None = None) -> Policy:
        """The first rule that applies to ``benchmark.metric`` of ``unit`` (None: unknown, and
        no rule that names units applies); ``info`` where none does."""
        rules = (r for r in self.rules if r.applies(benchmark, metric, unit))
        return next(rules, Policy("*", "info"))


def load_policies(path: Path | None = None) -> Policies:
    """The policies file (default: the one shipped with ragbench); ValueError if malformed."""
    path = Path(path) if path else POLICIES
    try:
        data = tomllib.loads(jsonfile.read_text(path, limit=2**20))
        rules = tuple(_rule(p) for p in data.get("policy", []))
    except (ValueError, tomllib.TOMLDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: not a valid policies file ({exc})") from None
    for rule in rules:
        if rule.kind not in (*STATISTICAL, "bound", "hash", "info"):
            raise ValueError(f"{path}: unknown kind {rule.kind!r} for {rule.match!r}")
    _check_main(path, data.get("main", {}))
    machines = data.get("machines", {})
    if not isinstance(machines, dict) or not all(isinstance(v, str) and v
                                                 for v in machines.values()):  # fmt: skip
        raise ValueError(f"{path}: [machines] maps runner-name patterns to machine names "
                         '(\'"fv-az*" = "github-ubuntu"\')')  # fmt: skip
    return Policies(rules, data.get("gate", {}), data.get("main", {}), machines)


def _check_main(path: Path, main: dict) -> None:
    """ValueError where ``[main]``'s change-point settings cannot find a change: E-Divisive's
    permutation test needs ``changepoint_alpha`` x (``permutations`` + 1) >= 1, the least
    p-value ``permutations`` shuffles can give (0.001 with 199: nothing is ever significant,
    and every history would read as clean)."""
    alpha, n = main.get("changepoint_alpha", 0.01), main.get("permutations", 199)
    if not (isinstance(alpha, int | float) and 0 < alpha < 1 and isinstance(n, int) and n > 0):
        raise ValueError(
            f"{path}: [main] changepoint_alpha must be a number in (0, 1) and "
            f"permutations a positive whole number, not {alpha!r} and {n!r}"
        )
    if alpha * (n + 1) < 1:
        least = math.ceil(1 / alpha) - 1
        raise ValueError(
            f"{path}: [main] changepoint_alpha {alpha:g} is below the least "
            f"p-value {n} permutations can give (1/{n + 1}): no change could ever "
            f"be found; raise permutations to at least {least}"
        )


def _rule(entry: dict) -> Policy:
    """One ``[[policy]]``; TypeError when a field is unknown or ``unit`` no list of texts."""
    if not isinstance(entry, dict):
        raise TypeError(f"a [[policy]] must be a table, not {str(entry)[:40]!r}")
    unit = entry.get("unit")
    if unit is not None:
        if not isinstance(unit, list) or not all(isinstance(u, str) for u in unit):
            raise TypeError(f"unit of {entry.get('match')!r} must be a list of texts")
        entry = {**entry, "unit": tuple(unit)}
    return Policy(**entry)
