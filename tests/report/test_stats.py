"""The statistics against values found another way: pass@k by enumerating every draw,
Wilson intervals as published (Newcombe 1998, table I) and by inverting the score test,
t quantiles from a printed table."""

from __future__ import annotations

import math

import pytest

from harbor_ray.report.stats import (
    Estimate,
    mean_interval,
    pass_at_k,
    pass_at_k_variance,
    t_quantile,
    wilson,
)
from tests.report.by_hand import enumerated_pass_at_k, jackknife_variance, score_test_bounds


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_is_the_share_of_draws_that_hold_a_pass(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert math.isclose(pass_at_k(n, c, k), enumerated_pass_at_k(n, c, k), abs_tol=1e-12), (
                n,
                c,
                k,
            )


def test_pass_at_k_refuses_what_it_cannot_estimate() -> None:
    for n, c, k in [(2, 1, 3), (2, 1, 0), (2, 3, 1), (2, -1, 1)]:
        with pytest.raises(AssertionError):
            pass_at_k(n, c, k)


# Newcombe, "Two-sided confidence intervals for the single proportion", Stat Med 1998,
# table I, method 3 (score interval without continuity correction), to 4 places.
@pytest.mark.parametrize(
    ("passes", "n", "low", "high"),
    [
        (81, 263, 0.2553, 0.3662),
        (15, 148, 0.0624, 0.1605),
        (0, 20, 0.0, 0.1611),
        (1, 29, 0.0061, 0.1718),
    ],
)
def test_wilson_matches_the_published_intervals(
    passes: int, n: int, low: float, high: float
) -> None:
    estimate = wilson(passes, n)
    assert estimate.value == passes / n
    assert (round(estimate.low, 4), round(estimate.high, 4)) == (low, high)


@pytest.mark.parametrize("n", [1, 2, 5, 12])
def test_wilson_is_the_inverted_score_test(n: int) -> None:
    for passes in range(n + 1):
        estimate = wilson(passes, n)
        low, high = score_test_bounds(passes, n)
        assert math.isclose(estimate.low, low, abs_tol=1e-9), (passes, n)
        assert math.isclose(estimate.high, high, abs_tol=1e-9), (passes, n)


def test_wilson_of_nothing_has_no_interval() -> None:
    estimate = wilson(0, 0)
    assert math.isnan(estimate.value) and estimate.low is None and estimate.high is None


# Student's t, two-sided 95% (0.975 one-sided), from a printed table.
@pytest.mark.parametrize(
    ("df", "t"),
    [
        (1, 12.706),
        (2, 4.303),
        (3, 3.182),
        (4, 2.776),
        (5, 2.571),
        (10, 2.228),
        (30, 2.042),
        (120, 1.980),
    ],
)
def test_t_quantile_matches_the_table(df: int, t: float) -> None:
    assert round(t_quantile(df), 3) == t


def test_mean_interval_is_the_t_interval_over_tasks() -> None:
    # mean 0.65, sd sqrt(0.05/3) = 0.12910, t(3) = 3.182: half-width 0.20540
    estimate = mean_interval([0.5, 0.6, 0.7, 0.8])
    assert math.isclose(estimate.value, 0.65)
    assert math.isclose(estimate.low, 0.65 - 3.18245 * 0.1290994 / 2, abs_tol=1e-5)
    assert math.isclose(estimate.high, 0.65 + 3.18245 * 0.1290994 / 2, abs_tol=1e-5)
    # Clipped to what a mean of pass rates can be; a difference may go down to -1.
    assert mean_interval([0.0, 1.0]) == Estimate(0.5, 0.0, 1.0)
    assert mean_interval([-1.0, 0.0], bounds=(-1.0, 1.0)).low == -1.0
    assert mean_interval([0.25]) == Estimate(0.25, None, None)
    with pytest.raises(AssertionError):
        mean_interval([])


@pytest.mark.parametrize("n", range(1, 8))
def test_pass_at_k_variance_is_the_jackknife_over_attempts(n: int) -> None:
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert math.isclose(
                pass_at_k_variance(n, c, k), jackknife_variance(n, c, k), abs_tol=1e-12
            ), (n, c, k)
    for c in range(n + 1):  # at k=1, the unbiased variance of a proportion
        if n > 1:
            assert math.isclose(
                pass_at_k_variance(n, c, 1), (c / n) * (1 - c / n) / (n - 1), abs_tol=1e-12
            )


def test_the_interval_is_never_narrower_than_the_attempts_noise() -> None:
    # Two tasks that each gained +0.5 (1/4 -> 3/4): no spread across tasks, but 4
    # attempts a task leave each difference uncertain: 2 * (3/16) / 3 = 0.125 each.
    within = [0.125, 0.125]
    estimate = mean_interval([0.5, 0.5], within, bounds=(-1.0, 1.0))
    half = 12.706205 * math.sqrt(0.25) / 2
    assert math.isclose(estimate.low, max(-1.0, 0.5 - half))
    assert estimate.high == 1.0
    assert mean_interval([0.5, 0.5], bounds=(-1.0, 1.0)) == Estimate(0.5, 0.5, 0.5)
    # Where the tasks spread more than the attempts, the spread is the error.
    wide = mean_interval([0.5, 0.6, 0.7, 0.8], [1e-6] * 4)
    assert wide == mean_interval([0.5, 0.6, 0.7, 0.8])
