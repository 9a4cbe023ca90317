"""The statistics of regression detection, on plain lists of floats (numpy only).

mann_whitney      two-sided Mann-Whitney U test (normal approximation, tie-corrected)
holm              Holm's step-down adjustment of many p-values (family-wise error)
ratio_interval    bootstrap interval of median(head) / median(base)
min_detectable    the smallest slowdown a comparison of these samples would have flagged
sign_test         two-sided sign test of paired ratios against 1 (the paired gate)
median_interval   distribution-free interval of a median from order statistics
robust_z          distance of a value from a history in MADs (the main-branch lookback)
e_divisive        change points of a series: E-Divisive with means (Matteson & James,
                  "A Nonparametric Approach for Multiple Change Point Analysis of
                  Multivariate Data", JASA 2014) with a permutation test per split
"""

from __future__ import annotations

import math

import numpy as np


def _ranks(x: np.ndarray) -> np.ndarray:
    """Ranks 1..n, ties given their average rank."""
    order = np.argsort(x, kind="mergesort")
    sorted_x = x[order]
    ranks = np.empty(len(x))
    i = 0
    while i < len(x):
        j = i
        while j + 1 < len(x) and sorted_x[j + 1] == sorted_x[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def mann_whitney(base, head) -> tuple[float, float]:
    """(U of head, two-sided p) for "base and head come from the same distribution".

    Normal approximation with a continuity and tie correction (good from ~8 samples a side).
    """
    a, b = np.asarray(base, float), np.asarray(head, float)
    n1, n2 = len(a), len(b)
    if n1 == 0 or n2 == 0:
        raise ValueError("mann_whitney needs samples on both sides")
    ranks = _ranks(np.concatenate([a, b]))
    u = ranks[n1:].sum() - n2 * (n2 + 1) / 2
    mu = n1 * n2 / 2
    _, counts = np.unique(np.concatenate([a, b]), return_counts=True)
    n = n1 + n2
    tie = (counts**3 - counts).sum() / (n * (n - 1)) if n > 1 else 0.0
    var = n1 * n2 / 12 * ((n + 1) - tie)
    if var <= 0:
        return float(u), 1.0
    z = (abs(u - mu) - 0.5) / math.sqrt(var)
    return float(u), float(min(1.0, math.erfc(max(z, 0.0) / math.sqrt(2))))


def holm(pvalues: list[float]) -> list[float]:
    """Holm-adjusted p-values: reject where adjusted < alpha keeps the family-wise error of
    all the tests together at alpha."""
    m = len(pvalues)
    order = sorted(range(m), key=lambda i: pvalues[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * pvalues[i]))
        adjusted[i] = running
    return adjusted


def ratio_interval(base, head, *, confidence=0.95, resamples=1000, seed=0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``median(head) / median(base)``."""
    rng = np.random.default_rng(seed)
    a, b = np.asarray(base, float), np.asarray(head, float)
    ma = np.median(a[rng.integers(0, len(a), (resamples, len(a)))], axis=1)
    mb = np.median(b[rng.integers(0, len(b), (resamples, len(b)))], axis=1)
    tail = (1 - confidence) / 2 * 100
    with np.errstate(all="ignore"):  # medians of 0: the ratio is inf or NaN, said as such
        ratios = mb / ma
        ratios = ratios[~np.isnan(ratios)]
        if not len(ratios):
            return math.nan, math.nan
        lo, hi = np.percentile(ratios, [tail, 100 - tail])
    return float(lo), float(hi)


def min_detectable(base, head, alpha: float, threshold: float, lower_is_better=True) -> float:
    """The smallest slowdown (0.05 = 5%) these samples would have flagged: head rescaled to
    base's median, then slowed until the test's p falls below ``alpha`` (the strictest level
    of the Holm procedure); never below the threshold, which must also be exceeded."""
    a = np.asarray(base, float)
    b = np.asarray(head, float)
    b = b * (np.median(a) / np.median(b)) if np.median(b) else b

    def flagged(s: float) -> bool:
        scaled = b * (1 + s) if lower_is_better else b / (1 + s)
        return mann_whitney(a, scaled)[1] < alpha

    if not flagged(4.0):
        return math.inf
    lo, hi = 0.0, 4.0
    for _ in range(30):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if flagged(mid) else (mid, hi)
    return max(hi, threshold)


def _binom_half_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2), exact (integer sums)."""
    if k < 0:
        return 0.0
    return sum(math.comb(n, i) for i in range(min(k, n) + 1)) / 2**n


def sign_test(ratios) -> float:
    """Two-sided p of "the median of ``ratios`` is 1" (exact binomial; ratios of exactly 1
    dropped, as the sign test does)."""
    above = sum(1 for r in ratios if r > 1)
    below = sum(1 for r in ratios if r < 1)
    n = above + below
    if n == 0:
        return 1.0
    return min(1.0, 2 * _binom_half_cdf(min(above, below), n))


def median_interval(values, confidence: float) -> tuple[float, float]:
    """Interval of the median from the order statistics ``x_(k) .. x_(n+1-k)``: it holds the
    true median with probability at least ``confidence`` whatever the distribution, for
    independent values. (-inf, inf) when there are too few values for that confidence."""
    x = sorted(float(v) for v in values)
    n = len(x)
    tail = (1 - confidence) / 2
    k, cdf, total = 0, 1, 2**n  # the largest k with P(X <= k - 1) <= tail; cdf: 2^n P(X <= k)
    while k < n // 2 and cdf / total <= tail:
        k += 1
        cdf += math.comb(n, k)
    if k == 0:
        return -math.inf, math.inf
    return x[k - 1], x[n - k]


def robust_z(history, value: float) -> float:
    """(value - median) / (1.4826 MAD) of ``history``; 0 when the history has no spread."""
    h = np.asarray(history, float)
    med = np.median(h)
    mad = 1.4826 * np.median(np.abs(h - med))
    if mad == 0:
        return 0.0 if value == med else math.copysign(math.inf, value - med)
    return float((value - med) / mad)


def _split_stats(d: np.ndarray, min_size: int) -> tuple[int, float]:
    """The best single split of the segment whose pairwise distances are ``d``: (index where
    the second part starts, its energy statistic, in V-statistic form). O(n^2), through 2-D
    prefix sums, for every split at once."""
    n = len(d)
    s = np.zeros((n + 1, n + 1))
    s[1:, 1:] = d.cumsum(0).cumsum(1)
    t = np.arange(min_size, n - min_size + 1)
    m = n - t
    between = s[t, n] - s[0, n] - s[t, t] + s[0, t]
    within_left = s[t, t]
    within_right = s[n, n] - s[t, n] - s[n, t] + s[t, t]
    q = t * m / n * (2 * between / (t * m) - within_left / t**2 - within_right / m**2)
    best = int(np.argmax(q))
    return int(t[best]), float(q[best])


def e_divisive(values, *, alpha=0.01, permutations=199, min_size=3, seed=0) -> list[int]:
    """Change points of ``values``: indices where a new segment starts, ascending.

    Bisects recursively: the strongest split of any current segment is kept when a permutation
    test finds it significant at ``alpha`` (its statistic against those of ``permutations``
    shuffles of the segment), otherwise the search stops.
    """
    x = np.asarray(values, float)
    if len(x) < 2 * min_size:
        return []
    rng = np.random.default_rng(seed)
    d_all = np.abs(x[:, None] - x[None, :])
    segments = [(0, len(x))]
    points: list[int] = []
    while True:
        best = None  # (q, segment, tau)
        for lo, hi in segments:
            if hi - lo < 2 * min_size:
                continue
            tau, q = _split_stats(d_all[lo:hi, lo:hi], min_size)
            if best is None or q > best[0]:
                best = (q, (lo, hi), tau)
        if best is None:
            return sorted(points)
        q, (lo, hi), tau = best
        d = d_all[lo:hi, lo:hi]
        exceed, allowed = 0, alpha * (permutations + 1) - 1  # more: not significant
        for _ in range(permutations):
            p = rng.permutation(hi - lo)
            exceed += _split_stats(d[np.ix_(p, p)], min_size)[1] >= q
            if exceed > allowed:
                break
        if exceed > allowed:
            return sorted(points)
        points.append(lo + tau)
        segments.remove((lo, hi))
        segments += [(lo, lo + tau), (lo + tau, hi)]
