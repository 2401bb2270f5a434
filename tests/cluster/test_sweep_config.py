from pathlib import Path

import pytest

from harbor_ray.cluster.sweep import SweepConfig
from harbor_ray.errors import StartError
from harbor_ray.trials.start_rate import StartRate


def test_a_fixed_cap_has_no_admission_policy_and_no_start_limit() -> None:
    config = SweepConfig(out=Path("o"), concurrency=8)
    assert config.admission is None and config.ceiling == 8 and config.start_rate is None


def test_the_adaptive_cap_starts_at_concurrency_within_its_bounds() -> None:
    config = SweepConfig(
        out=Path("o"),
        concurrency=8,
        min_concurrency=2,
        max_concurrency=64,
        engine_metrics=("http://e/metrics",),
    )
    policy = config.admission
    assert policy is not None and (policy.floor, policy.start, policy.ceiling) == (2, 8, 64)
    assert config.ceiling == 64


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"max_concurrency": 4}, "--min-concurrency"),  # below --concurrency
        ({"max_concurrency": 16}, "--engine-metrics"),  # nowhere to read the engines
        ({"sandbox_starts_per_s": -1}, "--sandbox-start-rate"),
    ],
)
def test_a_cap_that_cannot_work_is_refused_naming_the_flag(fields: dict, message: str) -> None:
    with pytest.raises(StartError, match=message):
        SweepConfig(out=Path("o"), concurrency=8, **fields)


def test_the_start_rate_is_the_whole_sweep_s() -> None:
    config = SweepConfig(out=Path("o"), concurrency=40, rollouts_per_host=8, sandbox_starts_per_s=5)
    assert config.start_rate == StartRate(per_s=5.0)
