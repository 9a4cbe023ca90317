"""This suite's benchmark names where the store takes them as data: the benchmarks its views
``dispatch_floors`` and ``drift`` are made of (``ragbench.store.ViewNames``). The store, the
lowest room of ragbench, knows no benchmark of this suite; the commands (and ``ragbench.synth``,
the demo, the screenshots) that make or write a store give it these."""

from __future__ import annotations

from benchmarks.support.catalogue import DISPATCH_FLOOR, DRIFT_SUFFIX

from .store import ViewNames

SUITE_VIEWS = ViewNames(dispatch_floor=DISPATCH_FLOOR, drift_suffix=DRIFT_SUFFIX)
