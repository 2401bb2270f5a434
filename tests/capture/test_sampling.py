import pytest
from pydantic import ValidationError

from harbor_ray.capture.core.dialects.base import EngineCall
from harbor_ray.capture.core.normalize import engine_body
from harbor_ray.capture.core.sampling import Sampling


def body_with(sampling: Sampling | None, **agent) -> dict:
    call = EngineCall(body={"messages": [], **agent}, stream=False, request_model="m")
    return engine_body(call, "served", sampling)


def test_replaces_the_agents_sampling() -> None:
    s = Sampling(temperature=1.0, top_p=0.9, top_k=20, seed=7)
    body = body_with(s, temperature=0.2, top_p=0.5, seed=1)
    assert (body["temperature"], body["top_p"], body["top_k"], body["seed"]) == (1.0, 0.9, 20, 7)


def test_max_tokens_is_a_cap() -> None:
    assert body_with(Sampling(max_tokens=64), max_tokens=1000)["max_tokens"] == 64
    assert body_with(Sampling(max_tokens=64), max_tokens=10)["max_tokens"] == 10
    capped = body_with(Sampling(max_tokens=64), max_completion_tokens=500)
    assert capped["max_tokens"] == 64 and "max_completion_tokens" not in capped
    assert body_with(Sampling(max_tokens=64))["max_tokens"] == 64


def test_unset_fields_leave_the_agent_alone() -> None:
    body = body_with(Sampling(), temperature=0.3, max_tokens=9)
    assert body["temperature"] == 0.3 and body["max_tokens"] == 9
    assert body_with(None, temperature=0.3)["temperature"] == 0.3


@pytest.mark.parametrize("bad", [{"temperature": -1}, {"top_p": 0}, {"max_tokens": 0},
                                 {"presence": 1}])
def test_invalid_settings_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        Sampling(**bad)
