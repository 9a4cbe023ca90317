"""scripts/kernel_bench.py's verdict on the launch promises (no GPU needed)."""

from __future__ import annotations

import numpy as np

from scripts import kernel_bench


def test_a_promise_is_met_only_where_its_whole_interval_is_within_it():
    rng = np.random.default_rng(0)
    below = list(1.2 + rng.normal(0, 0.05, 400))
    above = list(1.8 + rng.normal(0, 0.05, 400))
    around = list(1.5 + rng.normal(0, 0.05, 400))
    assert kernel_bench.promise_verdict(below, 1.5) == "met"
    assert kernel_bench.promise_verdict(above, 1.5) == "not met"
    assert kernel_bench.promise_verdict(around, 1.5) == "unresolved"
    assert (
        kernel_bench.promise_verdict(around[:3], 9.0) == "unresolved"
    )  # too few rounds for an interval
    assert kernel_bench.promise_verdict(below, None) == "-"
