"""Detection: the statistics, the per-metric policies, A/A noise, known change points."""

from __future__ import annotations

import math

import numpy as np
import pytest

from ragbench import stats
from ragbench.history import series as history
from ragbench.history.series import Point
from ragbench.policies import Policies, Policy, load_policies
from ragbench.verdicts import comparison as compare
from ragbench.verdicts import evidence
from ragbench.verdicts.comparison import Cell

POLICIES = load_policies()


def test_mann_whitney_known_values():
    u, p = stats.mann_whitney([1, 2, 3], [4, 5, 6])
    assert u == 9
    # small samples without ties: exact, 2 of the C(6, 3) = 20 orderings are as extreme
    assert p == pytest.approx(2 / 20)
    assert stats.mann_whitney([1, 1, 1], [1, 1, 1])[1] == 1.0  # all tied: no evidence
    # larger samples with ties: the normal approximation, continuity- and tie-corrected
    rng = np.random.default_rng(0)
    a, b = rng.normal(0, 1, 40).round(1), rng.normal(0.5, 1, 30).round(1)
    u, p = stats.mann_whitney(a, b)
    n1, n2 = len(a), len(b)
    assert u == sum((x > y) + 0.5 * (x == y) for x in b for y in a)
    _, counts = np.unique(np.concatenate([a, b]), return_counts=True)
    n = n1 + n2
    var = n1 * n2 / 12 * ((n + 1) - (counts**3 - counts).sum() / (n * (n - 1)))
    z = (abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(var)
    assert p == pytest.approx(math.erfc(z / math.sqrt(2)))


def test_the_commands_start_without_scipy():
    """scipy.stats is 1-2 s of imports: the command line, and commands that compute no test
    (verdict, accept, export, a refused store), start without it; the first test loads it."""
    import subprocess
    import sys
    from pathlib import Path

    code = (
        "import sys\n"
        "import ragbench.cli\n"
        "assert 'scipy.stats' not in sys.modules, 'imported with the command line'\n"
        "from ragbench import stats\n"
        "assert stats.mann_whitney([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])[1] < 0.2\n"
        "assert 'scipy.stats' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True,
                   cwd=Path(__file__).resolve().parent.parent)  # fmt: skip


def test_holm():
    assert stats.holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert stats.holm([]) == [] and stats.holm([0.6, 0.7]) == [1.0, 1.0]
    from statsmodels.stats.multitest import multipletests

    rng = np.random.default_rng(9)
    for n in (1, 2, 7, 40):  # ties included: statsmodels' own Holm gives the same
        p = np.round(rng.uniform(0, 0.2, n) ** 2, 4)
        assert stats.holm(list(p)) == pytest.approx(list(multipletests(p, method="holm")[1]))


def test_ratio_interval_covers_the_true_ratio():
    rng = np.random.default_rng(1)
    base, head = rng.normal(100, 2, 200), rng.normal(105, 2, 200)
    lo, hi = stats.ratio_interval(base, head)
    assert lo < 1.05 < hi and hi - lo < 0.02


def test_min_detectable_shrinks_with_less_noise():
    rng = np.random.default_rng(2)
    quiet = stats.min_detectable(rng.normal(100, 0.5, 40), rng.normal(100, 0.5, 40), 1e-3, 0.0)
    loud = stats.min_detectable(rng.normal(100, 10, 40), rng.normal(100, 10, 40), 1e-3, 0.0)
    assert 0 < quiet < 0.02 < loud
    assert stats.min_detectable([1, 2], [1, 2], 1e-3, 0.05) == math.inf  # 2 samples: never
    assert (
        stats.min_detectable(rng.normal(100, 0.1, 40), rng.normal(100, 0.1, 40), 1e-3, 0.05) == 0.05
    )


def test_e_divisive_finds_known_change_points():
    rng = np.random.default_rng(3)
    x = np.concatenate(
        [rng.normal(10, 0.1, 40), rng.normal(10.5, 0.1, 30), rng.normal(10.2, 0.1, 50)]
    )
    assert stats.e_divisive(x) == [40, 70]
    assert stats.e_divisive(x[:5]) == []  # too short for two segments of min_size


def test_e_divisive_on_noise_rarely_fires():
    rng = np.random.default_rng(4)
    fired = sum(bool(stats.e_divisive(rng.normal(10, 0.1, 80), seed=i)) for i in range(40))
    assert fired <= 2  # alpha 0.01 per series


def cell(metric: str, samples, bench="kernel.KernelLatency", **params) -> Cell:
    from ragbench.store import param_key

    params = params or {"backend": "triton", "batch": 1}
    return Cell(bench, metric, param_key(params), params, "us", list(samples))


def side(*cells: Cell) -> dict:
    return {c.key: c for c in cells}


def test_aa_noise_raises_no_alarm_and_a_real_slowdown_is_caught():
    rng = np.random.default_rng(5)
    policies = Policies((Policy("*", "latency", threshold=0.03),), {"alpha": 0.01}, {})
    false_alarms = 0
    for _ in range(100):  # 100 gate runs of 30 cells each, no change at all
        base = side(*(cell("gpu_us", rng.lognormal(3, 0.01, 40), batch=i) for i in range(30)))
        head = side(*(cell("gpu_us", rng.lognormal(3, 0.01, 40), batch=i) for i in range(30)))
        false_alarms += compare.compare(base, head, policies).failed
    assert false_alarms <= 2
    base = side(cell("gpu_us", rng.lognormal(3, 0.01, 40)))
    head = side(cell("gpu_us", rng.lognormal(3, 0.01, 40) * 1.05))
    (v,) = compare.compare(base, head, policies).verdicts
    assert v.status == "regression" and v.change == pytest.approx(0.05, abs=0.01)
    assert v.p_adj < 0.01 and 1.03 < v.interval[0] < v.ratio < v.interval[1] < 1.07
    assert v.detectable >= 0.03


def test_significant_but_small_and_large_but_noisy_are_not_regressions():
    rng = np.random.default_rng(6)
    policies = Policies((Policy("*", "latency", threshold=0.03),), {"alpha": 0.01}, {})
    small = compare.compare(side(cell("gpu_us", rng.normal(100, 0.1, 200))),
                            side(cell("gpu_us", rng.normal(101, 0.1, 200))), policies)  # fmt: skip
    assert small.verdicts[0].status == "unchanged" and small.verdicts[0].p_adj < 1e-6
    noisy = compare.compare(side(cell("gpu_us", [100, 160, 90])),
                            side(cell("gpu_us", [150, 95, 170])), policies)  # fmt: skip
    assert noisy.verdicts[0].status == "inconclusive"  # 3 a side could never be flagged
    faster = compare.compare(side(cell("gpu_us", rng.normal(100, 1, 50))),
                             side(cell("gpu_us", rng.normal(80, 1, 50))), policies)  # fmt: skip
    assert faster.verdicts[0].status == "improvement" and not faster.failed


def test_a_verdict_needs_evidence():
    """PASS only with evidence for every gated cell (``evidence.RULE``). Each case here passed
    before: a run is inconclusive as soon as one cell is, not when most are."""
    from ragbench.gate import gating as gate
    from ragbench.verdicts.status import gate_document

    rng = np.random.default_rng(11)
    pol = Policies((Policy("*", "latency", threshold=0.03),), {"alpha": 0.01}, {})
    quiet = [cell("gpu_us", rng.normal(10, 0.01, 40), batch=i) for i in range(20)]
    base = side(*quiet)
    # Fewer samples than the policy needs: base 10, head 2 at +25%. Before: the cell was
    # inconclusive without its change, the run PASS and gate.json's failures empty.
    thin = cell("gpu_us", rng.normal(10, 0.1, 10), batch=99)
    head = side(*quiet, cell("gpu_us", [12.5, 12.5], batch=99))
    c = compare.compare({**base, thin.key: thin}, head, pol)
    v = next(v for v in c.verdicts if v.key == thin.key)
    assert v.status == "inconclusive" and "too few samples" in v.note
    assert v.change == pytest.approx(0.25, abs=0.02)  # shown with its change
    assert c.headline == "inconclusive" and not c.failed
    res = gate.GateResult("a" * 40, "b" * 40, "m", c, measured=False, rounds=1)
    assert res.exit_code == 1
    doc = gate_document("a" * 40, "b" * 40, "m", c)
    assert [(f["param_key"], f["status"]) for f in doc["failures"]] == [
        (thin.key[2], "inconclusive")
    ]
    assert doc["failures"][0]["change"] == pytest.approx(0.25, abs=0.02)
    # One noisy cell among 20 quiet ones, which the test cannot see at 3%: unchanged where its
    # interval of head/base stays under the threshold (shown as such), and then the run
    # passes; inconclusive at 30% spread, where before a point estimate within half the
    # threshold passed it.
    cases = ((0.06, 1.0, "unchanged", "pass"), (0.3, 1.01, "inconclusive", "inconclusive"))
    for spread, shift, status, headline in cases:
        noisy = np.random.default_rng(2)
        noisy_base = cell("gpu_us", 10 * noisy.uniform(1 - spread, 1 + spread, 40), batch=98)
        noisy_head = cell("gpu_us", 10 * shift * noisy.uniform(1 - spread, 1 + spread, 40),
                          batch=98)  # fmt: skip
        c = compare.compare({**base, noisy_base.key: noisy_base},
                            {**side(*quiet), noisy_head.key: noisy_head}, pol)  # fmt: skip
        v = next(v for v in c.verdicts if v.key == noisy_base.key)
        assert (v.status, c.headline) == (status, headline), (v.change, v.note)
        assert v.detectable > 0.03
        lo, hi = v.interval
        assert (hi < 1.03) == (status == "unchanged")
        said = f"interval {lo:.3f}-{hi:.3f}, at worst {(hi - 1) * 100:+.1f}%"
        assert said in v.note and "within half" not in v.note
        assert v.note.startswith("unchanged: ") == (status == "unchanged")
        assert not evidence.powered(v)
    # Nothing judged at all (every cell info): before, PASS.
    info = Policies((Policy("*", "info"),), {"alpha": 0.01}, {})
    c = compare.compare(base, side(*quiet), info)
    assert c.headline == "inconclusive" and not c.judged() and not c.failed
    doc = gate_document("a" * 40, "b" * 40, "m", c)
    assert doc["verdict"] == "inconclusive" and doc["failures"][0]["metric"] == "judged_cells"


def test_a_policy_sets_the_samples_a_side_needs():
    """The default (5: below it Mann-Whitney at 0.01 can never be significant) and a policy's
    own ``min_samples``: one value a side may then show a regression by the threshold, never
    that a cell is unchanged (no interval of head/base)."""
    pol = Policies((Policy("*", "latency", threshold=0.1, min_samples=1),), {"alpha": 0.01}, {})
    for head, status in ((10.4, "inconclusive"), (10.8, "inconclusive"), (11.5, "regression")):
        (v,) = compare.compare(side(cell("x", [10.0])), side(cell("x", [head])), pol).verdicts
        assert v.status == status, head  # no interval of head/base: only a regression shows
        assert status == "regression" or "one value a side: no interval" in v.note
    four = side(cell("gpu_us", [10.0] * 4))
    (v,) = compare.compare(four, four, POLICIES).verdicts
    assert v.status == "inconclusive" and "needs 5 a side" in v.note


def test_a_real_slowdown_in_a_noisy_cell_never_passes():
    """30% spread, a true +10% step, a 2% threshold, 20 seeds: caught or inconclusive, never
    unchanged (before, 2 of these 20 passed: "within half the 2% threshold on the point
    estimate" at -0.3% and -1.6%)."""
    pol = Policies((Policy("*", "latency", threshold=0.02),), {"alpha": 0.01}, {})
    for seed in range(20):
        rng = np.random.default_rng(seed)
        base = side(cell("gpu_us", 10 * rng.uniform(0.7, 1.3, 40)))
        head = side(cell("gpu_us", 11 * rng.uniform(0.7, 1.3, 40)))
        (v,) = compare.compare(base, head, pol).verdicts
        assert v.status in ("regression", "inconclusive"), (seed, v.note)


def test_a_tie_at_ten_a_side_still_lets_a_cell_be_flagged():
    """10 values a side and one tie among them: the exact distribution of the tied ranks (as
    scipy's permutation test enumerates it), where the normal approximation's p never fell
    under Holm's strictest level over 66 cells (1.8e-4 > 0.01 / 66): a clear +20% was
    inconclusive, "too few samples to detect any change"."""
    from scipy.stats import PermutationMethod, mannwhitneyu

    tied_a, tied_b = [0.0, 0.0, 1, 2, 3, 4, 5], [1, 3, 4.5, 6, 7, 7]
    exact = mannwhitneyu(tied_b, tied_a, method=PermutationMethod(n_resamples=10**6)).pvalue
    rng = np.random.default_rng(12)
    pol = Policies((Policy("*", "latency", threshold=0.03),), {"alpha": 0.01}, {})
    quiet = [cell("gpu_us", rng.normal(10, 0.01, 40), batch=i) for i in range(65)]
    b = list(np.round(rng.normal(10, 0.05, 10), 3))
    h = [x * 1.2 for x in rng.normal(10, 0.05, 10)]
    h[0] = max(b)  # one head value ties one of base's
    base, head = cell("gpu_us", b, batch=99), cell("gpu_us", h, batch=99)
    c = compare.compare(side(*quiet, base), side(*quiet, head), pol)
    v = next(v for v in c.verdicts if v.key == base.key)
    assert v.status == "regression" and c.failed, v.note
    assert math.isfinite(v.detectable)
    assert stats.mann_whitney(tied_a, tied_b)[1] == pytest.approx(exact, rel=1e-12)


def test_an_improvement_is_not_within_half_the_threshold():
    """A head 24.5% faster on noisy samples, not significant: the note says what was judged
    (its interval), not "within half the 5% threshold on the point estimate (-24.5%)"."""
    pol = Policies((Policy("*", "latency", threshold=0.05),), {"alpha": 0.01}, {})
    base = side(cell("gpu_us", [6.0, 9.0, 10.0, 12.0, 15.0, 8.0, 11.0]))
    head = side(cell("gpu_us", [5.0, 6.5, 7.55, 9.5, 12.0, 6.0, 8.0]))
    (v,) = compare.compare(base, head, pol).verdicts
    assert v.change == pytest.approx(-0.245) and v.status in ("unchanged", "inconclusive")
    assert "within half" not in v.note and "interval" in v.note, v.note


def test_throughput_lower_is_the_regression():
    rng = np.random.default_rng(7)
    base = side(cell("img_per_s", rng.normal(1000, 5, 30), bench="pipeline.Throughput"))
    head = side(cell("img_per_s", rng.normal(800, 5, 30), bench="pipeline.Throughput"))
    pol = Policies((Policy("*", "throughput", threshold=0.1),), {"alpha": 0.01}, {})
    (v,) = compare.compare(base, head, pol).verdicts
    assert v.policy.kind == "throughput" and v.status == "regression"
    assert v.change == pytest.approx(0.25, abs=0.02)
    # the shipped policy judges img/s paired: across processes a 25% drop is inconclusive
    (v,) = compare.compare(base, head, POLICIES).verdicts
    assert v.status == "inconclusive" and "one process" in v.note


def drift(backend, value, model="deit_base_224"):
    return cell("max_abs_diff", [value], bench="numerics.Drift", backend=backend, model=model)


def test_drift_bounds():
    # 0.009 would break the fixed 0.007, but torch's own padded_full is 0.0089 off in this run.
    head = side(drift("triton", 0.009), drift("padded_full", 0.0089))
    verdicts = {v.key[2]: v for v in compare.compare(head, head, POLICIES).verdicts}
    assert all(v.status == "unchanged" for v in verdicts.values())
    head = side(drift("triton", 0.02), drift("padded_full", 0.0089))
    base = side(drift("triton", 0.005), drift("padded_full", 0.0089))
    c = compare.compare(base, head, POLICIES)
    (bad,) = c.by_status("violation")
    assert bad.params["backend"] == "triton" and "bound 0.0178" in bad.note and c.failed
    c = compare.compare(head, head, POLICIES)  # broken on base as well: not this change
    assert c.by_status("pre-existing") and not c.failed
    # the reference with no base (a history's first commit): held to 2 x 0.007, where the
    # fixed 0.007 alone broke its measured 0.0089 (an H100 run of 2026-11-28: a "violation"
    # alert); a broken one still fails, and never widens the others' bound
    c = compare.compare({}, side(drift("padded_full", 0.0089), drift("triton", 0.0085)), POLICIES)
    verdicts = {v.params["backend"]: v for v in c.verdicts}
    assert verdicts["padded_full"].status == "unchanged" and not c.failed
    assert verdicts["triton"].status == "unchanged", verdicts  # held to 2 x 0.0089
    failed_base = cell("max_abs_diff", [], bench="numerics.Drift", backend="padded_full")
    failed_base.failures = 1  # raised on base: no value there
    broken = side(drift("padded_full", 0.5), drift("triton", 0.5))
    c = compare.compare(side(failed_base), broken, POLICIES)
    assert c.failed and {v.params["backend"] for v in c.by_status("violation")} == {
        "padded_full"}, c.verdicts  # fmt: skip
    assert "0.5 >= bound 0.014" in c.by_status("violation")[0].note
    top1 = cell("top1_agreement", [0.97], bench="numerics.Drift", backend="triton")
    (v,) = compare.compare(side(top1), side(top1), POLICIES).verdicts  # a near tie: shown
    assert v.policy.kind == "info" and not compare.compare({}, side(top1), POLICIES).failed
    fp32 = cell("max_abs_diff", [2e-4], bench="cpu.Drift", backend="triton")
    assert compare.compare({}, side(fp32), POLICIES).failed


def test_hash_change_is_reported_not_failed_and_a_new_cell_is_not_counted():
    old = cell("output_hash", [123.0], bench="numerics.Drift", backend="triton")
    new = cell("output_hash", [456.0], bench="numerics.Drift", backend="triton")
    c = compare.compare(side(old), side(new), POLICIES)
    assert c.by_status("hash-changed") and not c.failed
    c = compare.compare({}, side(cell("gpu_us", [1.0, 2.0, 3.0])), POLICIES)
    assert c.by_status("new") and not c.failed


def failed(metric: str, bench="kernel.KernelLatency", **params) -> Cell:
    c = cell(metric, [], bench, **params)
    c.failures = 1
    return c


@pytest.mark.parametrize(
    "metric, bench",
    [("gpu_us", "kernel.KernelLatency"), ("error_ratio", "cpu.KernelError"),
     ("output_hash", "numerics.Drift"), ("sm_clock_mhz", "kernel.KernelClocks")],
)  # fmt: skip
def test_a_cell_that_failed_on_head_fails_whatever_its_kind(metric, bench):
    base = side(cell(metric, [1.0, 1.1, 0.9], bench))
    c = compare.compare(base, side(failed(metric, bench)), POLICIES)
    assert [v.status for v in c.verdicts] == ["failed"] and c.failed
    both = compare.compare(side(failed(metric, bench)), side(failed(metric, bench)), POLICIES)
    (v,) = both.verdicts  # broken on base too: still no pass for head
    assert v.status == "failed" and "base" in v.note and both.failed
    (v,) = compare.compare({}, side(failed(metric, bench)), POLICIES).verdicts  # a new cell
    assert v.status == "failed"


# the last is info (shown, never gated), but a NaN is no measurement whatever the kind
@pytest.mark.parametrize(
    "metric, bench",
    [("gpu_us", "kernel.KernelLatency"), ("error_ratio", "cpu.KernelError"),
     ("output_hash", "numerics.Drift"), ("max_abs_diff", "numerics.Drift"),
     ("max_abs_error", "cpu.KernelError")],
)  # fmt: skip
def test_a_cell_base_has_and_head_lacks_fails(metric, bench):
    c = compare.compare(side(cell(metric, [0.5, 0.6], bench)), {}, POLICIES)
    (v,) = c.verdicts
    assert v.status == "missing" and c.failed and "no value on head" in v.note
    c = compare.compare(side(failed(metric, bench)), {}, POLICIES)  # neither side has a value
    assert [v.status for v in c.verdicts] == ["unchanged"] and not c.failed
    c = compare.compare(side(failed(metric, bench)), side(cell(metric, [1e-4], bench)), POLICIES)
    assert [v.status for v in c.verdicts] in (["new"], ["unchanged"], ["info"]) and not c.failed


def test_zero_values_never_divide_by_zero():
    thr = dict(bench="pipeline.Throughput")
    lost = compare.compare(side(cell("img_per_s", np.linspace(900, 1100, 12), **thr)),
                           side(cell("img_per_s", [0.0] * 12, **thr)), POLICIES)  # fmt: skip
    (v,) = lost.verdicts
    assert v.change == math.inf and v.status == "regression"
    zeros = side(cell("img_per_s", [0.0] * 12, **thr))
    pol = Policies((Policy("*", "throughput", threshold=0.1),), {"alpha": 0.01}, {})
    (v,) = compare.compare(zeros, zeros, pol).verdicts
    assert v.status == "inconclusive" and v.change == 0  # no change could show in zeros
    (v,) = compare.compare(zeros, side(cell("img_per_s", np.linspace(5, 7, 12), **thr)),
                           pol).verdicts  # fmt: skip
    assert v.status == "improvement"
    (v,) = compare.compare(side(cell("gpu_us", [0.0, 0.0])), side(cell("gpu_us", [1.0, 1.0])),
                           POLICIES).verdicts  # fmt: skip
    assert v.change == math.inf
    points = [Point(f"c{i}", i, 0.0, "e", {}) for i in range(6)]
    rep = history.history(points, ("pipeline.Throughput", "img_per_s", "x"), {}, "img/s",
                          pol)  # fmt: skip
    assert rep.status == "unchanged"


def test_policies_file_errors(tmp_path):
    bad = tmp_path / "p.toml"
    bad.write_text('[[policy]]\nmatch = "*"\nkind = "sometimes"\n')
    with pytest.raises(ValueError, match="unknown kind"):
        load_policies(bad)
    bad.write_text("[[policy]\n")
    with pytest.raises(ValueError, match="not a valid policies file"):
        load_policies(bad)
    # 199 shuffles give no p-value below 1/200: every history read as clean (before: silently)
    bad.write_text("[main]\nchangepoint_alpha = 0.001\npermutations = 199\n")
    with pytest.raises(ValueError, match="below the least p-value 199 permutations can give"):
        load_policies(bad)
    bad.write_text("[main]\nchangepoint_alpha = 0.001\npermutations = 999\n")
    assert load_policies(bad).main["permutations"] == 999
    bad.write_text('[main]\nchangepoint_alpha = "0.01"\n')
    with pytest.raises(ValueError, match="must be a number in"):
        load_policies(bad)


def points(values, envs=None):
    envs = envs or ["e1"] * len(values)
    return [Point(f"{i:040x}", i, v, e, {"torch": e}) for i, (v, e) in
            enumerate(zip(values, envs, strict=True))]  # fmt: skip


def test_history_change_points_and_environment_changes():
    rng = np.random.default_rng(8)
    values = np.concatenate([rng.normal(10, 0.05, 30), rng.normal(11, 0.05, 30),
                             rng.normal(12, 0.05, 30)])  # fmt: skip
    envs = ["torch-2.10"] * 60 + ["torch-2.11"] * 30
    key = ("kernel.KernelLatency", "gpu_us", "backend=triton")
    rep = history.history(points(list(values), envs), key, {}, "us", POLICIES)
    assert rep.change_points == [30, 60] and rep.env_changes == [60]
    assert rep.describe_change(60) == "environment: torch torch-2.10 -> torch-2.11"
    assert rep.status == "unchanged"  # the newest run matches its own environment's lookback


def test_history_lookback_flags_the_newest_run():
    rng = np.random.default_rng(9)
    key = ("kernel.KernelLatency", "gpu_us", "backend=triton")
    steady = list(rng.normal(10, 0.02, 20))
    assert history.history(points([*steady, 10.01]), key, {}, "us", POLICIES).status == "unchanged"
    rep = history.history(points([*steady, 11.0]), key, {}, "us", POLICIES)
    assert rep.status == "regression" and rep.latest_change == pytest.approx(0.1, abs=0.01)
    assert history.history(points([*steady, 9.0]), key, {}, "us", POLICIES).status == "improvement"
    envs = ["a"] * 20 + ["b"]  # a new environment: no lookback to judge against
    assert (
        history.history(points([*steady, 11.0], envs), key, {}, "us", POLICIES).status
        == "env-change"
    )


def test_an_accepted_change_is_marked_and_becomes_the_baseline():
    rng = np.random.default_rng(10)
    key = ("kernel.KernelLatency", "gpu_us", "backend=triton")
    values = [*rng.normal(10, 0.02, 20), 11.0]
    pts = points(values)
    assert history.history(pts, key, {}, "us", POLICIES).status == "regression"
    rep = history.history(pts, key, {}, "us", POLICIES, accepted=[pts[-1].commit_hash])
    assert rep.status == "accepted" and rep.accepted == [20]
    later = points([*values, *rng.normal(11, 0.02, 5)])  # the new level, from the accepted commit
    accepted = [later[20].commit_hash]
    assert history.history(later, key, {}, "us", POLICIES).status == "unchanged"  # MAD mixes both
    rep = history.history(later, key, {}, "us", POLICIES, accepted=accepted)
    assert rep.status == "unchanged" and rep.latest_change == pytest.approx(0, abs=0.01)
    slower = points([*values, *rng.normal(11, 0.02, 5), 11.0 * 1.1])
    rep = history.history(slower, key, {}, "us", POLICIES, accepted=accepted)
    assert rep.status == "regression" and rep.latest_change == pytest.approx(0.1, abs=0.01)
    rows = [{"benchmark": key[0], "metric": key[1], "param_key": key[2], "commit_hash": c}
            for c in accepted]  # fmt: skip
    series = [{"benchmark": key[0], "metric": key[1], "param_key": key[2], "params": "{}",
               "unit": "us", "median": p.value, "commit_hash": p.commit_hash,
               "commit_time": p.commit_time, "env_key": "e"} for p in slower]  # fmt: skip
    (rep,) = history.histories(series, POLICIES, acceptances=rows)
    assert rep.accepted == [20] and rep.status == "regression"


def test_summaries_no_test_can_use_are_said_as_such():
    """Found by an attack on the gate (a helper, this session): pytest-benchmark summaries of
    a mean of 0 (9,987 rounds) were "too few samples (1 base, 1 head)": true of the samples,
    silent on why the summaries were not tested instead."""
    from ragbench.verdicts.comparison import Cell

    policies = Policies((Policy("*", "latency", threshold=0.03),), {"alpha": 0.01}, {})
    zero = Cell("t.py::test_x", "time", "", {}, "s", [0.0], summary=(0.0, 0.0, 9987))
    (v,) = compare.compare({zero.key: zero}, {zero.key: zero}, policies).verdicts
    assert v.status == "inconclusive" and v.note == (
        "too few samples (1 base, 1 head; the policy needs 5 a side), and summaries no test can "
        "use (a mean of 0, or one round): measure again")  # fmt: skip


def test_an_infinite_change_is_worded_by_its_direction():
    """Found by an attack on the gate (a helper, this session): a latency whose base was 0
    read "all of it lost", a throughput's words."""
    from ragbench.verdicts.status import worded

    assert worded(math.inf, "us") == "from a base of 0"
    assert worded(math.inf, "img/s", lower_better=False) == "all of it lost"
    assert worded(-math.inf, "us") == "-"
