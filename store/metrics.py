"""The cross-rank metrics, defined once (DESIGN.md "Metrics"; README "Cross-rank questions").

Per run and name, T_r is the total time of that name on rank r, 0 where the rank never ran it.
Over the N ranks of the run:

- mean = sum_r T_r / N, in integer ns (floor), so the SQL views give the same numbers;
- imbalance = max_r T_r / mean_r T_r (exact ratio, 1.0 = perfect balance; None when all are 0);
- recoverable = max - mean: the time the slowest rank would save if the work were balanced;
- cv = population standard deviation / mean (coefficient of variation; None when the mean is 0);
- slowest / fastest rank: the rank with the largest / smallest T_r, ties to the lowest global rank.

Pure functions on plain numbers: no database here."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Spread:
    """How one quantity is spread over ranks (or steps, or hosts)."""

    n: int
    total: int
    mean: int
    max: int
    min: int
    imbalance: float | None
    recoverable: int
    cv: float | None
    #: positions (into the input sequence) of the largest and smallest value, ties to the first
    argmax: int
    argmin: int


def spread(values: Sequence[int]) -> Spread:
    """Metrics of ``values`` (one per rank, in rank order; zeros for absent ranks included)."""
    if not values:
        raise ValueError("spread() of no values")
    n = len(values)
    total = sum(values)
    hi = max(values)
    lo = min(values)
    mean = total // n
    exact_mean = total / n
    imbalance = hi * n / total if total > 0 else None
    if exact_mean > 0:
        var = sum((v - exact_mean) ** 2 for v in values) / n
        cv: float | None = math.sqrt(var) / exact_mean
    else:
        cv = None
    return Spread(
        n=n,
        total=total,
        mean=mean,
        max=hi,
        min=lo,
        imbalance=imbalance,
        recoverable=hi - mean,
        cv=cv,
        argmax=values.index(hi),
        argmin=values.index(lo),
    )


def ratio(value: int | float, mean: int | float) -> float | None:
    """value / mean, or None when the mean is 0 (used for "x the mean" columns)."""
    return value / mean if mean else None


#: above this many trials of unequal probabilities, ``p_at_least`` uses the normal approximation
EXACT_TRIALS = 2000


def p_at_least(k: int, probs: Sequence[float]) -> float:
    """P(K >= k) where K counts successes of independent trials with success probabilities ``probs``
    (Poisson-binomial; the binomial when all are equal). Exact: by the binomial tail when all
    probabilities are equal (any number of trials, O(n)), else by dynamic programming over trials
    (O(n^2)) up to EXACT_TRIALS trials; beyond that the normal approximation with a continuity
    correction (n > 2000: within 1e-3 of the exact tail, enough to compare with a 0.01 level).

    Used for "is one rank last at a collective more often than chance": trial i is instance i, its
    probability 1/(participants of i) under "last arrivals spread evenly"."""
    n = len(probs)
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if n and all(p == probs[0] for p in probs):
        return _binomial_tail(k, n, probs[0])
    if n <= EXACT_TRIALS:
        dist = [1.0]  # dist[j] = P(j successes so far)
        for p in probs:
            nxt = [0.0] * (len(dist) + 1)
            for j, q in enumerate(dist):
                nxt[j] += q * (1 - p)
                nxt[j + 1] += q * p
            dist = nxt
        return min(1.0, max(0.0, sum(dist[k:])))
    mean = sum(probs)
    var = sum(p * (1 - p) for p in probs)
    if var <= 0:
        return 1.0 if mean >= k else 0.0
    z = (k - 0.5 - mean) / math.sqrt(var)
    return min(1.0, max(0.0, 0.5 * math.erfc(z / math.sqrt(2))))


def _binomial_tail(k: int, n: int, p: float) -> float:
    """P(Binomial(n, p) >= k), summed from the k-th term in log space (no overflow for large n)."""
    if p <= 0:
        return 0.0
    if p >= 1:
        return 1.0
    log_term = (math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)
                + k * math.log(p) + (n - k) * math.log1p(-p))
    term = math.exp(log_term)
    total = term
    odds = p / (1 - p)
    for j in range(k, n):
        term *= (n - j) / (j + 1) * odds
        total += term
        if term < total * 1e-17:
            break
    return min(1.0, max(0.0, total))
