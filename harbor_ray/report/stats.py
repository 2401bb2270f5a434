"""The statistics of the report and of comparisons: pure (numbers in, numbers out).

- `pass_at_k`: the unbiased estimator of Chen et al. (2021), 1 - C(n-c, k) / C(n, k).
- `wilson`: the Wilson score interval of a proportion (a run's pass rate over its
  rollouts). Unlike p +/- z*sqrt(p(1-p)/n) it stays inside [0, 1] and is not empty at
  0 or n passes, which is where small evaluations land.
- `mean_interval`: a mean over tasks with a Student-t interval, for pass@k averaged over
  tasks and for the per-task paired difference of two runs (B minus A). Tasks are the
  sampling unit: each task's value already carries its attempts' noise, so the spread
  across tasks counts both (the clustered error of "Adding Error Bars to Evals", Miller
  2024). The t quantile (not z) keeps the interval honest for the few tasks a test
  suite has; `t_quantile` computes it exactly, with no scipy.
- With few tasks the spread across them can be near 0 by chance (two tasks that each
  gained +0.5), and the interval would claim a certainty the attempts do not give. So
  the standard error is never below the attempts' own: each task's variance over its
  attempts (`pass_at_k_variance`, the delete-one jackknife of its pass@k, which at k=1
  is p(1-p)/(n-1)), summed over tasks and divided by m^2: the error the mean would have
  on these very tasks.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

__all__ = [
    "LEVEL",
    "Estimate",
    "mean_interval",
    "pass_at_k",
    "pass_at_k_variance",
    "t_quantile",
    "wilson",
]

LEVEL = 0.95  # every interval's confidence level


@dataclass(frozen=True)
class Estimate:
    """A value and its interval at `LEVEL`; `low` and `high` are None where no interval
    exists (no rollouts, or one task: no spread to measure)."""

    value: float
    low: float | None
    high: float | None


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k of a task with `c` passing rollouts out of `n`: the chance
    that k of them drawn without replacement hold at least one pass."""
    assert 0 < k <= n, f"pass@k needs 0 < k <= n, got k={k}, n={n}"
    assert 0 <= c <= n, f"pass@k needs 0 <= c <= n, got c={c}, n={n}"
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def pass_at_k_variance(n: int, c: int, k: int) -> float:
    """The delete-one jackknife variance of a task's pass@k over its n attempts:
    (n-1)/n * sum over attempts of (pass@k without it - their mean)^2. 0 when k = n
    (no attempt can be left out): pass@n is whether the task was solved at all."""
    if k >= n:
        pass_at_k(n, c, k)  # refuses what it cannot estimate
        return 0.0
    without_pass = pass_at_k(n - 1, c - 1, k) if c else 0.0  # a passing attempt left out
    without_fail = pass_at_k(n - 1, c, k) if c < n else 0.0  # a failing one left out
    mean = (c * without_pass + (n - c) * without_fail) / n
    return (n - 1) / n * (c * (without_pass - mean) ** 2 + (n - c) * (without_fail - mean) ** 2)


def wilson(passes: int, n: int, level: float = LEVEL) -> Estimate:
    """The proportion passes/n with its Wilson score interval (None bounds when n is 0,
    and then the value is NaN: nothing was measured)."""
    assert 0 <= passes <= n, f"a proportion needs 0 <= passes <= n, got {passes}/{n}"
    if n == 0:
        return Estimate(math.nan, None, None)
    z = NormalDist().inv_cdf(0.5 + level / 2)
    p = passes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    # At 0 or n passes the bound is exactly 0 or 1; the formula leaves a rounding residue.
    return Estimate(p, 0.0 if passes == 0 else centre - half, 1.0 if passes == n else centre + half)


def _t_two_sided(t: float, df: int) -> float:
    """P(|T| <= t) for Student's t with `df` degrees of freedom: the finite sums of
    Abramowitz and Stegun 26.7.3 (odd df) and 26.7.4 (even df)."""
    theta = math.atan(t / math.sqrt(df))
    c2 = math.cos(theta) ** 2
    if df % 2 == 0:
        term, total = 1.0, 1.0
        for j in range(1, df // 2):  # (1*3*...*(2j-1)) / (2*4*...*2j) * cos^2j
            term *= c2 * (2 * j - 1) / (2 * j)
            total += term
        return math.sin(theta) * total
    if df == 1:
        return 2 * theta / math.pi
    term, total = math.cos(theta), math.cos(theta)
    for j in range(1, (df - 1) // 2):  # (2*4*...*2j) / (3*5*...*(2j+1)) * cos^(2j+1)
        term *= c2 * (2 * j) / (2 * j + 1)
        total += term
    return 2 / math.pi * (theta + math.sin(theta) * total)


def t_quantile(df: int, level: float = LEVEL) -> float:
    """The t with P(|T| <= t) = level for Student's t with `df` degrees of freedom (the
    half-width multiplier of a two-sided interval), by bisection to 1e-12."""
    assert df >= 1, f"Student's t needs df >= 1, got {df}"
    low, high = 0.0, 1.0
    while _t_two_sided(high, df) < level:
        high *= 2
    while high - low > 1e-12 * max(1.0, high):
        mid = (low + high) / 2
        low, high = (mid, high) if _t_two_sided(mid, df) < level else (low, mid)
    return (low + high) / 2


def mean_interval(
    values: Sequence[float],
    within: Sequence[float] = (),
    bounds: tuple[float, float] = (0.0, 1.0),
    level: float = LEVEL,
) -> Estimate:
    """The mean of `values` (one a task) with its Student-t interval, clipped to
    `bounds` (the range the mean can take). `within`: each value's variance over its
    own attempts; the standard error is never below sqrt(sum(within)) / m. Fewer than
    two values: no interval."""
    assert values, "a mean needs at least one value"
    assert not within or len(within) == len(values), (
        f"{len(within)} within-task variances for {len(values)} values"
    )
    m = len(values)
    mean = math.fsum(values) / m
    if m < 2:
        return Estimate(mean, None, None)
    spread = math.fsum((v - mean) ** 2 for v in values) / (m - 1) / m
    error = math.sqrt(max(spread, math.fsum(within) / (m * m)))
    half = t_quantile(m - 1, level) * error
    return Estimate(mean, max(bounds[0], mean - half), min(bounds[1], mean + half))
