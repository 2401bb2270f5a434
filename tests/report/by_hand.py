"""Statistics computed another way than harbor_ray.report.stats computes them, for tests
to hold it to: pass@k by enumerating every draw, Wilson bounds by inverting the score
test, t intervals with the quantile from a printed table."""

from __future__ import annotations

import itertools
import math
import statistics

Z95 = 1.959963984540054
# Student's t, two-sided 95%, by degrees of freedom (a printed table, to 6 places).
T95 = {1: 12.706205, 2: 4.302653, 3: 3.182446, 4: 2.776445}


def enumerated_pass_at_k(n: int, c: int, k: int) -> float:
    """The share of the k-subsets of n rollouts (c of them passing) holding a pass."""
    rollouts = [True] * c + [False] * (n - c)
    draws = list(itertools.combinations(rollouts, k))
    return sum(any(draw) for draw in draws) / len(draws)


def score_test_bounds(passes: int, n: int) -> tuple[float, float]:
    """The p where |passes/n - p| = z * sqrt(p(1-p)/n), by bisection on each side."""
    phat = passes / n

    def outside(p: float) -> bool:
        return abs(phat - p) > Z95 * math.sqrt(p * (1 - p) / n)

    def edge(inside: float, out: float) -> float:
        for _ in range(200):
            mid = (inside + out) / 2
            inside, out = (inside, mid) if outside(mid) else (mid, out)
        return (inside + out) / 2

    return (0.0 if passes == 0 else edge(phat, 0.0), 1.0 if passes == n else edge(phat, 1.0))


def jackknife_variance(n: int, c: int, k: int) -> float:
    """The delete-one jackknife variance of pass@k over n attempts (c passing), each
    attempt left out in turn and pass@k enumerated on the rest; 0 when k = n."""
    if k == n:
        return 0.0
    attempts = [True] * c + [False] * (n - c)
    without = [
        enumerated_pass_at_k(n - 1, sum(attempts[:j] + attempts[j + 1 :]), k) for j in range(n)
    ]
    mean = statistics.fmean(without)
    return (n - 1) / n * sum((w - mean) ** 2 for w in without)


def t_interval(
    values: list[float], within: list[float] | None = None, bounds: tuple[float, float] = (0.0, 1.0)
) -> tuple[float, float, float]:
    """(mean, low, high): mean +/- t * error, clipped to `bounds`; the error is
    sd / sqrt(m), or sqrt(sum(within)) / m where that is larger."""
    mean = statistics.fmean(values)
    m = len(values)
    error = max(statistics.stdev(values) / math.sqrt(m), math.sqrt(sum(within or [])) / m)
    half = T95[m - 1] * error
    return mean, max(bounds[0], mean - half), min(bounds[1], mean + half)
