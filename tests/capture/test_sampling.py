import pytest
from pydantic import ValidationError

from harbor_ray.capture.core.dialects.base import EngineCall
from harbor_ray.capture.core.normalize import engine_body
from harbor_ray.capture.core.sampling import Sampling, TurnSampling
from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.capture.asgi_client import call


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


@pytest.mark.parametrize(
    "bad", [{"temperature": -1}, {"top_p": 0}, {"max_tokens": 0}, {"presence": 1}]
)
def test_invalid_settings_refused(bad: dict) -> None:
    with pytest.raises(ValidationError):
        Sampling(**bad)


async def test_each_turn_records_its_sampling_and_the_engines_logprobs_mode() -> None:
    """What the engine request carried (the session's imposed settings over the agent's),
    and which logprobs the certified engine returns: what a trainer re-scores with."""
    engine = FakeEngine()
    store = InMemorySessionStore()
    app = build_capture_app(
        store, engine, CaptureSettings(served_model="m", logprobs_mode="processed")
    )
    info = await store.open_session(sampling=Sampling(temperature=0.7, min_p=0.05))
    reply = await call(
        app,
        "/v1/chat/completions",
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "temperature": 0.2,
            "top_p": 0.9,
        },
        key=info.key,
    )
    assert reply.status == 200, reply.json()
    assert engine.calls[-1]["min_p"] == 0.05
    [turn] = (await store.close_session(info.session_id)).turns
    assert turn.logprobs_mode == "processed"
    assert turn.sampling == TurnSampling(temperature=0.7, top_p=0.9, top_k=None, min_p=0.05)


def test_turn_sampling_ignores_what_no_engine_takes() -> None:
    assert (
        TurnSampling.of({"temperature": True, "top_p": "0.9", "top_k": 2**64, "min_p": None})
        == TurnSampling()
    )
    assert TurnSampling.of({"temperature": 0, "top_k": -1}) == TurnSampling(
        temperature=0.0, top_k=-1
    )
