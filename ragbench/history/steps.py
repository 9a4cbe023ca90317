"""The series behind main's alerts (``ragbench.history.alerting``), read whole: its points, its
change points (stored, brought up to date in memory), and the step at a point, measured from
the points either side.

A series is read one at a time (``read_series``, ``change_positions``) or many together
(``read_many``, ``positions_of``): one query an environment and one of the machine's change
points for all of them, where one series at a time took a query of each (0.5-0.7 s a series
on django-asv's history, 2-core machine, load 9).
"""

from __future__ import annotations

import json
import math
import statistics
from dataclasses import dataclass
from itertools import groupby

from .. import stats
from ..policies import Policies
from ..verdicts.comparison import Key, ratio_of
from . import edivisive as changepoints
from . import series as history

SEGMENT = 20  # points a side for a step's interval


@dataclass
class Series:
    """One series of the machine (``Store.series_points``), oldest first."""

    environment: str
    key: Key
    commits: list[str]
    times: list
    values: list[float]
    env_keys: list
    envs: list[dict]
    timings: list[dict]  # how the harness timed each point (ragbench.store.timing)

    def at(self, commit: str, env_key=...) -> int | None:
        """The position of the point of ``commit`` (and ``env_key``, where given)."""
        return next((i for i, c in enumerate(self.commits) if c == commit
                     and (env_key is ... or self.env_keys[i] == env_key)), None)  # fmt: skip

    def point(self, i: int) -> history.Point:
        return history.Point(self.commits[i], self.times[i], self.values[i], self.env_keys[i],
                             self.envs[i], self.timings[i])  # fmt: skip

    def moved(self, i: int) -> bool:
        """Whether the environment or the measurement settings changed at point ``i`` (a step
        there is none of the code's)."""
        return self.env_keys[i] != self.env_keys[i - 1] or history.settings_change(
            self.point(i - 1), self.point(i)) is not None  # fmt: skip


def series_of(environment: str, key: Key, rows: list[tuple]) -> Series:
    """A series from its ``Store.series_points`` rows."""
    return Series(environment, key, [r[3] for r in rows], [r[5] for r in rows],
                  [r[7] for r in rows], [r[4] for r in rows],
                  [changepoints.point_env(r) for r in rows],
                  [changepoints.point_timing(r) for r in rows])  # fmt: skip


def read_series(store, machine: str, environment: str, key: Key) -> Series:
    return series_of(environment, key, store.series_points(machine, environment, keys=[key]))


def read_many(store, machine: str, wanted) -> dict[tuple, Series]:
    """The machine's series ``wanted`` ((environment, benchmark, metric, param_key) each), one
    query an environment: -> the same tuple -> its series (empty where it has no point)."""
    out = {}
    for environment, keys in groupby(sorted(set(wanted)), key=lambda k: k[0]):
        keys = [k[1:] for k in keys]
        rows = store.series_points(machine, environment, keys=keys)
        by = {k: list(g) for k, g in groupby(rows, key=lambda r: r[:3])}
        out.update({(environment, *k): series_of(environment, k, by.get(k, [])) for k in keys})
    return out


def positions_of(store, machine: str, policies: Policies,
                 many: dict[tuple, Series]) -> dict[tuple, list[int]]:  # fmt: skip
    """The positions of the change points of each of ``many`` (``read_many``'s): the stored
    ones, the machine's read once, brought up to date in memory where a series' stored state
    is behind it."""
    newest = {k: (s.commits[-1], s.env_keys[-1]) for k, s in many.items() if s.commits}
    if not newest:
        return {k: [] for k in many}
    found = changepoints.current(store, machine, changepoints.Settings.of(policies), newest)
    return {k: on_series(found.get(k, []), s) for k, s in many.items()}


def change_positions(store, machine: str, policies: Policies, s: Series) -> list[int]:
    """The positions of the series' change points (stored, brought up to date in memory)."""
    if not s.commits:
        return []
    key = (s.environment, *s.key)
    newest = {key: (s.commits[-1], s.env_keys[-1])}
    found = changepoints.current(store, machine, changepoints.Settings.of(policies), newest,
                                 benchmark=s.key[0], metric=s.key[1])  # fmt: skip
    return on_series(found.get(key, []), s)


def on_series(rows: list[dict], s: Series) -> list[int]:
    """The positions of the stored change points ``rows`` that are on ``s`` as it is now (the
    commit at their position is theirs), in order."""
    return sorted(p for r in rows if 0 < (p := r["position"]) < len(s.values)
                  and s.commits[p] == r["commit_hash"])  # fmt: skip


def timed(before: dict, after: dict) -> dict:
    """A step's settings either side, as ``alert_cells`` keeps them (``ragbench.store.timing``)."""
    return {"prev_timing": json.dumps(before), "timing": json.dumps(after)}


def measured(before: list[float], after: list[float], kind: str) -> dict:
    """A step from the points either side: the medians, and the bootstrap interval of their
    ratio (widened to the estimate where the percentile interval misses it: the percentage
    shown always lies inside the interval shown)."""
    b, a = statistics.median(before), statistics.median(after)
    lo, hi = stats.ratio_interval(before, after)
    r = ratio_of(a, b)
    if not (math.isnan(lo) or math.isnan(hi)) and math.isfinite(r):
        lo, hi = min(lo, r), max(hi, r)
    return {"kind": kind, "before": b, "after": a, "ratio_lo": lo, "ratio_hi": hi}


def neighbours(cps: list[int], at: int, n: int) -> tuple[int, int]:
    """The neighbouring change points of position ``at`` (0 and ``n`` at the ends)."""
    return max((p for p in cps if p < at), default=0), min((p for p in cps if p > at), default=n)


def step_at(s: Series, at: int, cps: list[int], kind: str) -> dict:
    """The step of position ``at``: each side up to the neighbouring change point, at most
    ``SEGMENT`` points."""
    prev, nxt = neighbours(cps, at, len(s.values))
    return measured(s.values[max(prev, at - SEGMENT) : at], s.values[at : min(nxt, at + SEGMENT)],
                    kind)  # fmt: skip
