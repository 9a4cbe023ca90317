"""The statistics of regression detection, on plain lists of floats.

mann_whitney      two-sided Mann-Whitney U test (scipy.stats.mannwhitneyu: exact, as asv's, when
                  no side has more than 20 values and none ties; with ties at those sizes the
                  exact permutation distribution of the tied ranks, ``tied_exact_p``; else the
                  tie-corrected normal approximation)
holm              Holm's step-down adjustment of many p-values
ratio_interval    bootstrap interval of median(head) / median(base) (scipy.stats.bootstrap)
min_detectable    the smallest slowdown a comparison of these samples would have flagged
sign_test         two-sided sign test of paired ratios against 1 (scipy.stats.binomtest)
median_interval   distribution-free interval of a median from order statistics
                  (scipy.stats.quantile_test)
robust_z          distance of a value from a history in MADs (scipy.stats.median_abs_deviation)
e_divisive        change points of a series: E-Divisive with means (Matteson & James,
                  "A Nonparametric Approach for Multiple Change Point Analysis of
                  Multivariate Data", JASA 2014) with a permutation test per split

E-Divisive is our own: the maintained implementations do not install beside this project.
MongoDB's ``signal-processing-algorithms`` (2.1.6, an sdist) requires numpy < 2, and Apache
Otava (0.8.0), which carries it, pins numpy 2.2 and scipy < 1.17 and brings an application's
dependencies (BigQuery, Slack, Postgres clients); torch 2.14 and pandas 3 here need numpy 2.3+.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

# asv's own rule (asv/_stats.py ``mann_whitney_u``, "auto"): the exact distribution while no
# side has more than 20 values (and, for scipy's exact, no ties). scipy's "auto" stops at 8,
# and its normal approximation never goes below p = 1.8e-4 at 10 values a side (exact:
# 1.1e-5): under Holm over django-asv's 60 cells (0.01 / 60 = 1.7e-4) no cell could be flagged.
EXACT_MAX = 20


def _scipy():
    """scipy.stats, imported on first use: its 1-2 s of imports are paid only by a process
    that computes a test or an interval (not by ``ragbench ingest``, ``verdict``, ``accept``,
    ``export`` or ``--help``, which run as often as the gate does)."""
    from scipy import stats

    return stats


def _has_ties(x: np.ndarray) -> bool:
    return len(np.unique(x)) < len(x)


def _method(a: np.ndarray, b: np.ndarray, within: bool = False) -> str:
    """exact, tied (exact, with ties: ``tied_exact_p``) or asymptotic for samples ``a`` and
    ``b``; ``within``: ties only inside each (``min_detectable`` rescales one onto the other's
    median, which makes ties at no shift)."""
    if max(len(a), len(b)) > EXACT_MAX:
        return "asymptotic"
    parts = (a, b) if within else (np.concatenate([a, b]),)
    return "tied" if any(_has_ties(p) for p in parts) else "exact"


def tied_exact_p(base, head) -> float:
    """Two-sided p of the rank sum of ``head`` among both samples, exact where values tie:
    every split of the pooled midranks into the two sides' sizes is equally likely (the
    distribution ``scipy.stats.permutation_test`` enumerates for ``mannwhitneyu`` with
    ``method=PermutationMethod()``, which takes 2 s at 10 values a side on this project's
    machine); counted here by dynamic programming over the doubled (integer) midranks, in
    about a millisecond. p = 2 x the smaller tail, at most 1 (scipy's two-sided)."""
    a, b = np.asarray(base, float), np.asarray(head, float)
    ranks = np.rint(2 * _scipy().rankdata(np.concatenate([a, b]))).astype(int)
    n, total = len(b), int(ranks.sum())
    counts = np.zeros((n + 1, total + 1))  # [k, s]: subsets of k ranks so far that sum to s
    counts[0, 0] = 1.0
    for r in ranks:
        counts[1:, r:] += counts[:-1, : total + 1 - r].copy()
    dist = counts[n] / counts[n].sum()
    observed = int(ranks[len(a) :].sum())
    tail = min(dist[: observed + 1].sum(), dist[observed:].sum())
    return float(min(1.0, 2 * tail))


def mann_whitney(base, head) -> tuple[float, float]:
    """(U of head, two-sided p) for "base and head come from the same distribution".

    The exact distribution when no side has more than ``EXACT_MAX`` values: scipy's where no
    value ties, ``tied_exact_p`` where some do (scipy's exact assumes no ties, and its normal
    approximation at 10 values a side never gives a p below 1.8e-4, above what Holm asks over
    60 cells); else the normal approximation with continuity and tie corrections. p is 1 when
    every value is the same (no spread to test).
    """
    a, b = np.asarray(base, float), np.asarray(head, float)
    if len(a) == 0 or len(b) == 0:
        raise ValueError("mann_whitney needs samples on both sides")
    method = _method(a, b)
    with warnings.catch_warnings():  # all values tied: the approximation divides by zero
        warnings.simplefilter("ignore", RuntimeWarning)
        r = _scipy().mannwhitneyu(b, a, alternative="two-sided",
                                method="asymptotic" if method == "tied" else method)  # fmt: skip
    p = tied_exact_p(a, b) if method == "tied" else float(r.pvalue)
    return float(r.statistic), 1.0 if math.isnan(p) else p


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values: reject where adjusted < alpha keeps the family-wise error of
    all the tests together at alpha. Sorted ascending, the i-th (from 0) of n is multiplied by
    n - i, made non-decreasing, and capped at 1 (statsmodels' ``multipletests(method="holm")``
    gives the same, tests/test_detect.py; it also runs a full ``gc.collect()`` on every call:
    48 ms in a process that imported torch, 60% of the calibration's analysis)."""
    p = np.asarray(pvalues, float)
    if p.size == 0:
        return []
    order = np.argsort(p, kind="stable")
    adjusted = np.minimum(1.0, np.maximum.accumulate(p[order] * np.arange(p.size, 0, -1)))
    out = np.empty_like(adjusted)
    out[order] = adjusted
    return [float(x) for x in out]


def ratio_interval(base, head, *, confidence=0.95, resamples=1000, seed=0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``median(head) / median(base)``, the two samples
    resampled independently. (nan, nan) where the ratio is undefined (medians of 0)."""
    if len(base) == 0 or len(head) == 0:
        raise ValueError("ratio_interval needs samples on both sides")
    # scipy resamples samples of 2 values or more; [x, x] resamples as [x] does: always x.
    a, b = (np.resize(np.asarray(s, float), max(len(s), 2)) for s in (base, head))

    def ratio(x, y, axis=-1):
        return np.median(y, axis=axis) / np.median(x, axis=axis)

    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")  # a degenerate (constant) resample, said as nan below
        ci = _scipy().bootstrap(
            (a, b), ratio, n_resamples=resamples, confidence_level=confidence,
            method="percentile", vectorized=True, rng=np.random.default_rng(seed),
        ).confidence_interval  # fmt: skip
    lo, hi = float(ci.low), float(ci.high)
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return math.nan, math.nan
    return lo, hi


def min_detectable(base, head, alpha: float, threshold: float, lower_is_better=True) -> float:
    """The smallest slowdown (0.05 = 5%) these samples would have flagged: head rescaled to
    base's median, then slowed until the test's p falls below ``alpha`` (the strictest level
    of the Holm procedure); never below the threshold, which must also be exceeded."""
    a = np.asarray(base, float)
    b = np.asarray(head, float)
    b = b * (np.median(a) / np.median(b)) if np.median(b) else b

    method = _method(a, b, within=True)

    def flagged(slowdowns: np.ndarray) -> np.ndarray:  # one test per slowdown, vectorized
        s = slowdowns[:, None]
        scaled = b * (1 + s) if lower_is_better else b / (1 + s)
        if method == "tied":  # the exact distribution of tied ranks: one slowdown at a time
            return np.array([tied_exact_p(a, row) < alpha for row in scaled])
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            r = _scipy().mannwhitneyu(scaled, a[None, :], axis=-1, method=method)
        return np.nan_to_num(r.pvalue, nan=1.0) < alpha

    lo, hi = 0.0, 4.0
    if not flagged(np.array([hi]))[0]:
        return math.inf
    # Three rounds of 32 slowdowns in (lo, hi], each in one scipy call (bisection, one test a
    # step, took 20x longer): the smallest flagged one, to 4 / 32**3 = 0.0001.
    for _ in range(3):
        grid = np.linspace(lo, hi, 33)[1:]
        first = int(np.argmax(flagged(grid)))  # hi is flagged: some point is
        lo, hi = (grid[first - 1] if first else lo), float(grid[first])
    return max(hi, threshold)


def sign_test(ratios) -> float:
    """Two-sided p of "the median of ``ratios`` is 1" (exact binomial; ratios of exactly 1
    dropped, as the sign test does)."""
    above = sum(1 for r in ratios if r > 1)
    below = sum(1 for r in ratios if r < 1)
    if above + below == 0:
        return 1.0
    return float(_scipy().binomtest(above, above + below, 0.5).pvalue)


def median_interval(values, confidence: float) -> tuple[float, float]:
    """Interval of the median from the order statistics ``x_(k) .. x_(n+1-k)``: it holds the
    true median with probability at least ``confidence`` whatever the distribution, for
    independent values. (-inf, inf) when there are too few values for that confidence."""
    x = np.asarray(values, float)
    if len(x) == 0:
        return -math.inf, math.inf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # too few values: scipy warns and says nan
        ci = _scipy().quantile_test(x, q=float(np.median(x)), p=0.5).confidence_interval(confidence)
    lo, hi = float(ci.low), float(ci.high)
    return (-math.inf if math.isnan(lo) else lo), (math.inf if math.isnan(hi) else hi)


def robust_z(history, value: float) -> float:
    """(value - median) / (1.4826 MAD) of ``history``; 0 when the history has no spread."""
    h = np.asarray(history, float)
    med = np.median(h)
    mad = _scipy().median_abs_deviation(h, scale="normal")
    if mad == 0:
        return 0.0 if value == med else math.copysign(math.inf, value - med)
    return float((value - med) / mad)


def _split_stats(x: np.ndarray, min_size: int) -> tuple[np.ndarray, np.ndarray]:
    """The best single split of each row of ``x`` (one ordering of a segment's values a row):
    (index where the second part starts, its energy statistic in V-statistic form), per row.

    With ``R_j`` the distances of value ``j`` to the values before it and ``C_j`` to those
    after, the within-sums of the parts of a split at ``t`` are ``2 * sum(R[:t])`` and
    ``2 * sum(C[t:])`` and the between-sum what is left: O(n^2) a row for every split at once,
    many orderings (the permutation test's) in one numpy call. (A 2-D prefix sum of the
    distance matrix a permutation, as before, took 1.3 s for one change in 200 points on this
    machine's shared cores: two strided cumsums of n^2 each; this takes ~0.1 s.)"""
    n = x.shape[1]
    d = np.abs(x[:, :, None] - x[:, None, :])
    before = np.einsum("pij,ij->pi", d, np.tri(n, n, -1))  # R_j: the values i < j
    after = d.sum(2) - before  # C_j: the values i > j
    zero = np.zeros((len(x), 1))
    cum_before = np.hstack([zero, before.cumsum(1)])
    cum_after = np.hstack([zero, after.cumsum(1)])
    t = np.arange(min_size, n - min_size + 1)
    m = n - t
    within_left = 2 * cum_before[:, t]
    within_right = 2 * (cum_after[:, n : n + 1] - cum_after[:, t])
    between = (2 * cum_before[:, n : n + 1] - within_left - within_right) / 2
    q = t * m / n * (2 * between / (t * m) - within_left / t**2 - within_right / m**2)
    best = np.argmax(q, axis=1)
    return t[best], q[np.arange(len(x)), best]


# Permutations a numpy call takes: the first few alone (a segment without a change is done after
# two or three shuffles beat it), then many at once (a change needs every one of them).
FIRST_CHUNK, CHUNK = 8, 64


def e_divisive(values, *, alpha=0.01, permutations=199, min_size=3, seed=0) -> list[int]:
    """Change points of ``values``: indices where a new segment starts, ascending.

    Bisects recursively: the strongest split of any current segment is kept when a permutation
    test finds it significant at ``alpha`` (its statistic against those of ``permutations``
    shuffles of the segment, stopped as soon as too many beat it), otherwise the search stops.
    Shuffles are drawn one at a time from ``seed`` and tested many at once; the generator is
    left where testing them one by one would leave it, so the result is the same either way.
    """
    x = np.asarray(values, float)
    if len(x) < 2 * min_size:
        return []
    rng = np.random.default_rng(seed)
    segments = [(0, len(x))]
    splits: dict[tuple[int, int], tuple[int, float]] = {}
    points: list[int] = []
    allowed = alpha * (permutations + 1) - 1  # more shuffles beating it: not significant
    while True:
        best = None  # (q, segment, tau)
        for lo, hi in segments:
            if hi - lo < 2 * min_size:
                continue
            if (lo, hi) not in splits:
                tau, q = _split_stats(x[None, lo:hi], min_size)
                splits[(lo, hi)] = (int(tau[0]), float(q[0]))
            tau, q = splits[(lo, hi)]
            if best is None or q > best[0]:
                best = (q, (lo, hi), tau)
        if best is None:
            return sorted(points)
        q, (lo, hi), tau = best
        if _beaten(x[lo:hi], q, rng, permutations, allowed, min_size):
            return sorted(points)
        points.append(lo + tau)
        segments.remove((lo, hi))
        segments += [(lo, lo + tau), (lo + tau, hi)]


def _beaten(segment: np.ndarray, q: float, rng, permutations: int, allowed: float,
            min_size: int) -> bool:  # fmt: skip
    """Whether more than ``allowed`` of ``permutations`` shuffles of ``segment`` split at least
    as strongly as ``q`` (the split is then not significant)."""
    n, exceed, done = len(segment), 0, 0
    while done < permutations:
        k = min(FIRST_CHUNK if done == 0 else CHUNK, permutations - done)
        state = rng.bit_generator.state
        shuffles = np.stack([rng.permutation(n) for _ in range(k)])
        hits = exceed + np.cumsum(_split_stats(segment[shuffles], min_size)[1] >= q)
        over = np.flatnonzero(hits > allowed)
        if over.size:  # one by one, the test stops at the first: leave the generator there
            rng.bit_generator.state = state
            for _ in range(over[0] + 1):
                rng.permutation(n)
            return True
        exceed, done = int(hits[-1]), done + k
    return False


# A summary of timings: (mean, standard deviation, count), as pytest-benchmark saves a run
# without its rounds' data.
Summary = tuple[float, float, int]


def welch(base: Summary, head: Summary) -> float:
    """Two-sided p of Welch's t (unequal variances) from the two summaries alone
    (``scipy.stats.ttest_ind_from_stats``); 1.0 where it is undefined (no spread, same means)."""
    (mb, sb, nb), (mh, sh, nh) = base, head
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        p = _scipy().ttest_ind_from_stats(mh, sh, nh, mb, sb, nb, equal_var=False).pvalue
    return 1.0 if math.isnan(p) else float(p)


def _log_ratio_se(base: Summary, head: Summary) -> tuple[float, float]:
    """The standard error of log(mean(head) / mean(base)) by the delta method, and its
    Welch-Satterthwaite degrees of freedom."""
    (mb, sb, nb), (mh, sh, nh) = base, head
    vb, vh = sb**2 / (nb * mb**2), sh**2 / (nh * mh**2)
    se = math.sqrt(vb + vh)
    dof = (vb + vh) ** 2 / (vb**2 / (nb - 1) + vh**2 / (nh - 1)) if vb + vh > 0 else math.inf
    return se, dof


def summary_ratio_interval(base: Summary, head: Summary, *, confidence: float = 0.95,
                           ) -> tuple[float, float]:  # fmt: skip
    """The ``confidence`` interval of ``mean(head) / mean(base)`` from the two summaries: the
    log of the ratio, its standard error by the delta method, Student's t at the
    Welch-Satterthwaite degrees of freedom. (nan, nan) where a mean is not positive."""
    (mb, _, nb), (mh, _, nh) = base, head
    if mb <= 0 or mh <= 0 or min(nb, nh) < 2:
        return (math.nan, math.nan)
    se, dof = _log_ratio_se(base, head)
    t = float(_scipy().t.ppf(0.5 + confidence / 2, dof)) if math.isfinite(dof) else 0.0
    ratio = mh / mb
    return (ratio * math.exp(-t * se), ratio * math.exp(t * se))


def summary_min_detectable(base: Summary, head: Summary, alpha: float, threshold: float,
                           lower_is_better: bool = True) -> float:  # fmt: skip
    """As ``min_detectable``, for Welch's t on summaries: head's mean moved to base's, then
    slowed (its spread scaled with it) until the test's p falls below ``alpha``; never below
    the threshold; inf where no slowdown up to 400% would be flagged."""
    (mb, sb, nb), (mh, sh, nh) = base, head
    if mh <= 0 or mb <= 0:
        return math.inf
    s = np.linspace(0, 4, 4001)[1:]  # to 0.1%
    scale = (1 + s) if lower_is_better else 1 / (1 + s)
    means, sds = mb * scale, sh * (mb / mh) * scale
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        p = _scipy().ttest_ind_from_stats(means, sds, nh, mb, sb, nb, equal_var=False).pvalue
    flagged = np.nan_to_num(p, nan=1.0) < alpha
    if not flagged.any():
        return math.inf
    return max(float(s[int(np.argmax(flagged))]), threshold)
