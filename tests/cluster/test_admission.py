import pytest

from harbor_ray.cluster.admission import AdmissionController, AdmissionPolicy
from harbor_ray.cluster.engine_metrics import EngineLoad
from harbor_ray.errors import StartError

IDLE = EngineLoad(kv_cache_usage=0.1, running=4)


def _controller(floor: int = 2, ceiling: int = 40, start: int = 8) -> AdmissionController:
    return AdmissionController(AdmissionPolicy(floor=floor, ceiling=ceiling, start=start))


def test_rises_while_the_engines_are_idle_and_the_cap_is_in_use() -> None:
    admission = _controller()
    limits = [admission.observe(IDLE, in_flight=admission.limit) for _ in range(5)]
    assert limits == [10, 12, 15, 18, 22]


def test_holds_when_the_cap_is_not_in_use() -> None:
    admission = _controller()
    assert admission.observe(IDLE, in_flight=3) == 8


def test_never_above_the_ceiling() -> None:
    admission = _controller(ceiling=12)
    for _ in range(10):
        admission.observe(IDLE, in_flight=admission.limit)
    assert admission.limit == 12


@pytest.mark.parametrize(
    "pressure",
    [
        EngineLoad(kv_cache_usage=0.1, waiting=3),  # queued inside the engines
        EngineLoad(kv_cache_usage=0.95),  # the KV cache nearly full
    ],
)
def test_falls_under_pressure_down_to_the_floor(pressure: EngineLoad) -> None:
    admission = _controller(start=20)
    limits = [admission.observe(pressure, in_flight=20) for _ in range(10)]
    assert limits[:4] == [15, 12, 9, 7]
    assert limits[-1] == 2


def test_a_preemption_since_the_last_sample_cuts() -> None:
    admission = _controller(start=20)
    assert admission.observe(EngineLoad(preemptions=5), in_flight=20) == 25  # first: a base
    assert admission.observe(EngineLoad(preemptions=5), in_flight=25) == 31
    assert admission.observe(EngineLoad(preemptions=6), in_flight=31) == 24
    # An engine restarted (its counter went back): not a preemption.
    assert admission.observe(EngineLoad(preemptions=0), in_flight=24) == 30


def test_between_the_thresholds_it_holds() -> None:
    admission = _controller()
    assert admission.observe(EngineLoad(kv_cache_usage=0.8), in_flight=8) == 8


def test_a_policy_that_cannot_work_is_refused() -> None:
    with pytest.raises(StartError, match=r"floor \(4\) <= start \(2\) <= ceiling \(8\)"):
        AdmissionPolicy(floor=4, ceiling=8, start=2)
