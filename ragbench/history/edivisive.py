"""Stored change points: E-Divisive over fixed windows of each series, computed once per window
and updated with what is new.

A series is one machine's cell in one environment (``machine``, ``environment``, ``benchmark``,
``metric``, ``param_key``); its points are one per commit and ``env_key`` (the median of its
runs), in commit order, as ``ragbench detect`` reads them (``Store.series_points``). The series
is cut in windows of ``WINDOW`` points, one starting every ``STRIDE`` points: window ``k`` holds
the points ``[k * STRIDE, k * STRIDE + WINDOW)``. E-Divisive (``stats.e_divisive``, with the
main branch's settings in policies.toml) runs on each window, and the series' change points are
those of all its windows; where two windows found the same change (within ``MERGE`` points of
each other), the one found nearer its window's middle stands (``merged``).

A window's change points depend on its points alone, so a full window never changes: an ingest
recomputes only the windows that hold a new point (the last two of each series that got one),
and the result is the same as computing every window again (tests/test_changepoints.py). A
point that comes out of order (a runner measured an older commit after newer ones: 55 of the
100 commits of tests/data/public/asv-django) moves every point after it by one, so the windows
from the first that holds it on are computed again, and the ones before it kept
(tests/test_public_django.py).
Apache Otava's incremental E-Divisive does the same in spirit (it re-tests only the tail after
the last change point); fixed windows make the equality exact and bound the cost of a window
(O(WINDOW^2) a permutation) whatever the length of the history.

Tables (``ragbench/store/schema.py``, docs/store.md): ``change_point_series``, one row per series
(how many points the change points were computed from, the newest of them, where the next
update starts, the settings), and ``change_points``, each window's change points with the two
points around it and the medians of the window's segments on either side.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby

from .. import stats
from ..policies import load_policies
from ..store import timing

# Points per window. 200 is today's `detect --last` default: E-Divisive over 200 points is
# what main's history was judged with before (docs/calibration.md), and one window with a
# change in it takes ~60 ms (199 permutations of O(200^2)), one without ~2 ms (the permutation
# test stops after two shuffles beat it).
WINDOW = 200
STRIDE = WINDOW // 2  # each point is in two windows, at least WINDOW / 4 from the edge of one
MERGE = 10  # points: the same change found by two windows (their estimates differ by a few)
BATCH = 50  # series a query reads when it reads whole histories (bounded memory)


@dataclass(frozen=True)
class Settings:
    alpha: float = 0.01
    permutations: int = 199
    min_size: int = 3
    window: int = WINDOW

    @classmethod
    def of(cls, policies) -> Settings:
        """The main branch's settings of a ``ragbench.policies.Policies``."""
        conf = policies.main
        return cls(float(conf.get("changepoint_alpha", 0.01)),
                   int(conf.get("permutations", 199)), int(conf.get("min_size", 3)))  # fmt: skip

    @property
    def stride(self) -> int:
        return self.window // 2

    @property
    def text(self) -> str:
        """What the stored change points were computed with (``change_point_series``)."""
        return (f"e-divisive window={self.window} alpha={self.alpha} "
                f"permutations={self.permutations} min_size={self.min_size} seed=0")  # fmt: skip


@dataclass(frozen=True)
class Found:
    """A change point one window found: the window ``[start, end)`` and the position (in the
    series) where the new level starts."""

    start: int
    end: int
    position: int

    @property
    def centrality(self) -> int:
        return min(self.position - self.start, self.end - self.position)


def first_window(points: int, settings: Settings) -> int:
    """The start of the first window that a point at position ``points`` (the next one) falls
    in: where an update after ``points`` points starts."""
    s = settings.stride
    return max(0, (points - settings.window) // s + 1) * s


def found_in(values, settings: Settings, first: int = 0) -> list[Found]:
    """The change points of each window from ``first`` (a multiple of the stride) on;
    ``values[0]`` is the point at position ``first``."""
    n = first + len(values)
    out = []
    for start in range(first, n, settings.stride):
        end = min(start + settings.window, n)
        segment = values[start - first : end - first]
        for i in stats.e_divisive(segment, alpha=settings.alpha, min_size=settings.min_size,
                                  permutations=settings.permutations):  # fmt: skip
            out.append(Found(start, end, start + i))
    return out


def merged(found: Iterable, merge: int = MERGE) -> list:
    """One change point per change: of those found by different windows within ``merge``
    points of each other, the one nearest its window's middle (then the earlier window's).
    Items have ``start``, ``end``, ``position`` (``Found``, or rows of ``change_points`` as
    ``Stored``); -> the kept ones by position."""
    items = sorted(found, key=lambda f: (-min(f.position - f.start, f.end - f.position),
                                         f.start, f.position))  # fmt: skip
    kept: list = []
    for f in items:
        if all(k.start == f.start or abs(k.position - f.position) > merge for k in kept):
            kept.append(f)
    return sorted(kept, key=lambda f: f.position)


def change_points(values, settings: Settings) -> list[int]:
    """The change points of a whole series (``values`` oldest first): positions where a new
    level starts, as the stored ones of the same points are."""
    return [f.position for f in merged(found_in(list(values), settings))]


@dataclass(frozen=True)
class Stored:
    """A row of ``change_points`` as ``merged`` takes it."""

    row: dict

    @property
    def start(self) -> int:
        return self.row["window_start"]

    @property
    def end(self) -> int:
        return self.row["window_end"]

    @property
    def position(self) -> int:
        return self.row["position"]


def current(store, machine: str, settings: Settings, newest: dict[tuple, tuple],
            **where) -> dict[tuple, list[dict]]:  # fmt: skip
    """The change points of the machine's series, merged: ``(environment, benchmark, metric,
    param_key)`` -> rows of ``change_points`` by position. ``newest``: series -> its newest
    point (commit_hash, env_key); a series whose stored state is not there (or of other
    settings, or missing) is brought up to date in memory from its state (not stored:
    readers never write). ``where``: benchmark, metric."""
    raw: dict[tuple, list[dict]] = {}
    for r in store.change_points(machine, **where):
        raw.setdefault((r["environment"], r["benchmark"], r["metric"], r["param_key"]), []).append(
            r
        )
    states = {(s["environment"], s["benchmark"], s["metric"], s["param_key"]): s
              for s in store.change_point_state(machine)}  # fmt: skip
    behind: dict[str, list[tuple]] = {}
    for k, point in newest.items():
        s = states.get(k)
        if s is None or s["settings"] != settings.text or (
                s["last_commit"], s["last_env_key"]) != point:  # fmt: skip
            behind.setdefault(k[0], []).append(k[1:])
    for environment, keys in behind.items():
        new_states, rows = compute(store, machine, environment, keys, settings)
        for s in new_states:
            k = (environment, s["benchmark"], s["metric"], s["param_key"])
            raw[k] = [r for r in raw.get(k, []) if r["window_start"] < s["window_from"]]
        for r in rows:
            raw.setdefault((environment, r["benchmark"], r["metric"], r["param_key"]), []).append(r)
    return {k: [s.row for s in merged(Stored(r) for r in rows)] for k, rows in raw.items()}


# --- computing and storing ------------------------------------------------------------------

KEY = ("branch", "machine", "environment", "benchmark", "metric", "param_key")


def point_env(row: tuple) -> dict:
    """The environment fields of a ``Store.series_points`` row."""
    from ..store import ENV_FIELDS

    return dict(zip(ENV_FIELDS, row[12:], strict=True))


def point_timing(row: tuple) -> dict:
    """How the harness timed a ``Store.series_points`` row (``ragbench.store.timing``)."""
    return timing.of(row[10], row[8], row[9], row[11])


def _series(store, machine: str, environment: str, key: tuple, rows: list[tuple], offset: int,
            settings: Settings) -> tuple[dict, list[dict]]:  # fmt: skip
    """The state and change point rows of one series whose points from position ``offset`` on
    are ``rows`` (``Store.series_points``)."""
    values = [r[7] for r in rows]
    found = found_in(values, settings, offset)
    n = offset + len(rows)
    nxt = first_window(n, settings)
    head = rows[nxt - offset] if nxt < n else None
    ident = dict(zip(KEY, (store.branch, machine, environment, *key), strict=True))
    state = {**ident, "points": n, "last_commit": rows[-1][3], "last_env_key": rows[-1][4],
             "window_start": nxt, "window_commit": head[3] if head else None,
             "window_env_key": head[4] if head else None, "window_time": head[5] if head else None,
             "settings": settings.text, "computed_at": _now(), "window_from": offset}  # fmt: skip
    out = []
    for f in found:
        same = [g.position for g in found if g.start == f.start]
        lo = max([p for p in same if p < f.position], default=f.start)
        hi = min([p for p in same if p > f.position], default=f.end)
        here, prev = rows[f.position - offset], rows[f.position - 1 - offset]
        out.append({
            **ident, "window_start": f.start, "window_end": f.end, "position": f.position,
            "commit_hash": here[3], "commit_time": here[5], "env_key": here[4],
            "env": json.dumps(point_env(here), sort_keys=True), "value": here[7],
            "prev_commit_hash": prev[3], "prev_commit_time": prev[5], "prev_env_key": prev[4],
            "prev_env": json.dumps(point_env(prev), sort_keys=True), "prev_value": prev[7],
            "before": statistics.median(values[lo - offset : f.position - offset]),
            "after": statistics.median(values[f.position - offset : hi - offset]),
            "timing": json.dumps(point_timing(here)),
            "prev_timing": json.dumps(point_timing(prev)),
        })  # fmt: skip
    return state, out


def _index(items: list, item) -> int | None:
    return items.index(item) if item in items else None


def _now():
    from datetime import UTC, datetime

    return datetime.fromtimestamp(time.time(), UTC).replace(tzinfo=None)


def compute(store, machine: str, environment: str, keys: Iterable[tuple] | None, settings: Settings,
            newest_from=None) -> tuple[list[dict], list[dict]]:  # fmt: skip
    """The states and change point rows of the machine's series in ``environment`` (``keys``:
    these (benchmark, metric, param_key), else all): from each series' stored state on where
    it has one of these settings, else from its first point. ``newest_from``: key -> the
    oldest commit time of its new runs. A run of an older commit than the newest (a runner
    measured it after newer ones) came out of order: where it is newer than the point where
    the state's update starts, that update covers it; where it is older, the windows from the
    first that holds it on are computed again (``_late``), the ones before it, whose points did
    not move, are kept. Either costs what an update in order does, give or take a window."""
    newest_from = newest_from or {}
    states = {(s["benchmark"], s["metric"], s["param_key"]): s
              for s in store.change_point_state(machine, environment)}  # fmt: skip
    if keys is None:
        keys = {k for k in states} | set(store.series_keys(machine, environment))
    keys = sorted(set(keys))

    def usable(k):
        s = states.get(k)
        # (a point without a commit time: its series is computed whole)
        return s is not None and s["settings"] == settings.text and s["window_time"] is not None

    def in_order(k):  # every new point after the point where the state's update starts
        new = newest_from.get(k)
        return new is None or new > states[k]["window_time"]

    out_states, out_found, again = [], [], []
    tails = [k for k in keys if usable(k) and in_order(k)]
    if tails:
        since = min(states[k]["window_time"] for k in tails)
        by_key = {k: list(g) for k, g in groupby(
            store.series_points(machine, environment, since=since, keys=tails),
            key=lambda r: r[:3])}  # fmt: skip
        for k in tails:
            s, group = states[k], by_key.get(k, [])
            idents = [(r[3], r[4]) for r in group]
            at = _index(idents, (s["window_commit"], s["window_env_key"]))
            last = _index(idents, (s["last_commit"], s["last_env_key"]))
            # the state's points where it left them, else a point came before (compute again);
            # points that came in between (out of order, after the window's start: their
            # runs' commits are newer than it) move no window before it
            grown = None if at is None or last is None else (
                last - at - (s["points"] - 1 - s["window_start"]))  # fmt: skip
            if grown is None or grown < 0 or (grown > 0 and k not in newest_from):
                again.append(k)
                continue
            state, found = _series(store, machine, environment, k, group[at:], s["window_start"],
                                   settings)  # fmt: skip
            out_states.append(state)
            out_found += found
    late = [k for k in keys if usable(k) and not in_order(k)]
    for i in range(0, len(late), BATCH):
        rows = store.series_points(machine, environment, keys=late[i : i + BATCH])
        for k, group in groupby(rows, key=lambda r: r[:3]):
            done = _late(store, machine, environment, k, list(group), states[k],
                         newest_from[k], settings)  # fmt: skip
            if done is None:
                again.append(k)
                continue
            out_states.append(done[0])
            out_found += done[1]
    whole = [k for k in keys if not usable(k)] + again
    for i in range(0, len(whole), BATCH):
        batch = whole[i : i + BATCH]
        rows = store.series_points(machine, environment, keys=batch)
        for k, group in groupby(rows, key=lambda r: r[:3]):
            state, found = _series(store, machine, environment, k, list(group), 0, settings)
            state["window_from"] = 0
            out_states.append(state)
            out_found += found
    return out_states, out_found


def _late(store, machine: str, environment: str, key: tuple, rows: list[tuple], state: dict,
          oldest, settings: Settings) -> tuple[dict, list[dict]] | None:  # fmt: skip
    """A series that got a point out of order (``rows``: all its points; ``oldest``: the
    oldest commit time of its new runs): its windows from the first that holds a new point on
    computed again, the ones before kept (their points are where they were: every new run's
    point is at ``oldest`` or later). None where the state's points are not where it left
    them (computed whole then)."""
    idents = [(r[3], r[4]) for r in rows]
    p = next((i for i, r in enumerate(rows) if r[5] is not None and r[5] >= oldest), len(rows))
    anchor = _index(idents, (state["window_commit"], state["window_env_key"]))
    last = _index(idents, (state["last_commit"], state["last_env_key"]))
    start = state["window_start"]
    # the state's window starts before the new points (its point did not move), or after them
    # (it moved by the points that came in before it)
    if anchor is None or last is None or (anchor != start if start < p else anchor < start):
        return None
    offset = min(first_window(p, settings), start)
    done, found = _series(store, machine, environment, key, rows[offset:], offset, settings)
    done["window_from"] = offset
    return done, found


def update(store, run_ids: list[str], policies=None) -> int:
    """After an ingest: the change points of the series these runs gave a point (on the
    history's branch), brought up to date and stored; -> how many series."""
    settings = Settings.of(policies or load_policies())
    touched: dict[tuple[str, str], dict[tuple, object]] = {}
    for machine, environment, *key, oldest in store.run_series(run_ids):
        touched.setdefault((machine, environment), {})[tuple(key)] = oldest
    n = 0
    for (machine, environment), keys in sorted(touched.items()):
        states, found = compute(store, machine, environment, keys, settings, newest_from=keys)
        store.save_change_points(states, found)
        n += len(states)
    return n


def rebuild(store, machine: str | None = None, policies=None, log=lambda m: None) -> int:
    """Every series' change points (of ``machine``, or all machines) brought up to date and
    stored: the windows a state covers are kept, a series without one (or with other
    settings) is computed from its first point. -> how many series."""
    settings = Settings.of(policies or load_policies())
    n = 0
    for m in [machine] if machine else store.machines():
        for environment in store.environments(m):
            keys = store.series_keys(m, environment)
            for i in range(0, len(keys), BATCH):
                states, found = compute(store, m, environment, keys[i : i + BATCH], settings)
                store.save_change_points(states, found)
                n += len(states)
                log(f"{m} {environment or '(no environment)'}: {min(i + BATCH, len(keys))}/"
                    f"{len(keys)} series")  # fmt: skip
    return n
