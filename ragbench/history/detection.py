"""After new runs are stored: the change points of the series they gave main a point, and
main's alerts, brought up to date with the policies a command was given.

``ingest`` only stores; the commands that ingest into main's history (``ragbench ingest``,
``ragbench record``) call ``update`` with their ``--policies``, so the stored settings of a
series are the ones the command was given (``ragbench changepoints --policies`` and the next
ingest with the same policies agree).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from ..policies import Policies, load_policies
from . import alerting as alerts
from . import edivisive as changepoints


@dataclass
class Detected:
    """What an update did: series whose change points were brought up to date, in how long
    (with the alerts), and main's alerts made, grown or marked fixed (and the alerts' share
    of ``seconds``)."""

    series: int = 0
    seconds: float = 0.0
    alerts: int = 0
    alerts_seconds: float = 0.0

    def summary(self) -> str:
        """The clause an ingest's summary line ends with ('' when nothing was updated): the
        change points' seconds and the alerts' apart."""
        said = (f"; change points of {self.series} series updated in "
                f"{self.seconds - self.alerts_seconds:.1f} s, main's alerts in "
                f"{self.alerts_seconds:.1f} s" if self.series else "")  # fmt: skip
        if self.alerts:
            said += f"; {self.alerts} of main's alerts made, grown or fixed (ragbench alerts)"
        return said


def update(store, run_ids: list[str], policies: Policies | None = None,
           log: Callable[[str], None] = lambda m: None) -> Detected:  # fmt: skip
    """The stored change points of the series these runs gave a point brought up to date,
    then main's alerts (the steps those change points are, and the ones undone since), both
    with ``policies`` (default: the shipped policies.toml)."""
    if not run_ids:
        return Detected()
    policies = policies or load_policies()
    t0 = time.perf_counter()
    series = changepoints.update(store, run_ids, policies)
    t1 = time.perf_counter()
    made = alerts.update_runs(store, run_ids, policies, log=log)
    t2 = time.perf_counter()
    return Detected(series, t2 - t0, made, t2 - t1)
