"""The proxy in front of each upstream profile's API (stand-ins: tests/fixtures/providers.py),
with each official SDK as the agent: every dialect against every profile, streamed and
not. No real provider is called."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Iterator
from dataclasses import dataclass

import anthropic
import httpx
import openai
import pytest

from harbor_ray.capture.core.upstream_profile import PROFILES, UpstreamName
from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.fake_engine import FakeReply, echo_script
from harbor_ray.capture.proxy.hosted import HostedUpstream, build_upstream
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.errors import CertificationError
from tests.capture.sdk_clients import anthropic_client, openai_client, reply_text
from tests.fixtures.providers import MODEL, StandIn, provider_app
from tests.fixtures.threaded import serve_in_thread

SECRET = "sk-upstream-SECRET-7f3a9c"  # the upstream's key: must reach it and nothing else
ADMIN = "hosted-admin-key"

NATIVE_PATHS = {
    "chat": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "google": f"/v1/models/{MODEL}:generateContent",
}


@dataclass
class HostedProxy:
    url: str
    stand_in: StandIn
    admin: httpx.Client
    upstream_url: str

    def new_session(self) -> tuple[str, str]:
        body = self.admin.post("/sessions", json={}).raise_for_status().json()
        return body["session_id"], body["key"]

    def export(self, session_id: str) -> dict:
        return self.admin.get(f"/sessions/{session_id}/export").raise_for_status().json()


def _upstream_url(profile: UpstreamName, url: str) -> str:
    return f"{url}/v1" if PROFILES[profile].dialect == "chat" else url


# The profiles the proxy speaks in their own format (the others are engines' chat API).
NATIVE = [p for p in PROFILES if PROFILES[p].native]


@contextlib.contextmanager
def hosted_proxy(stand_in: StandIn) -> Iterator[HostedProxy]:
    """The proxy (certified at `text`, with an admin key) in front of `stand_in`'s API."""
    profile = stand_in.profile
    with serve_in_thread(provider_app(stand_in)) as url:
        upstream = build_upstream(profile, _upstream_url(profile, url), key=stand_in.key)
        cert = asyncio.run(certify(upstream, upstream.root, capture="text"))
        assert cert.capture_level == "text" and cert.served_model == MODEL
        store = InMemorySessionStore()
        app = build_capture_app(
            store,
            upstream,
            CaptureSettings(
                served_model=MODEL, admin_key=ADMIN, stitch=False, capture="text", keepalive_s=0.05
            ),
            admin=store,
        )
        with (
            serve_in_thread(app) as proxy_url,
            httpx.Client(base_url=proxy_url, headers={"authorization": f"Bearer {ADMIN}"}) as admin,
        ):
            yield HostedProxy(proxy_url, stand_in, admin, url)


@pytest.fixture(scope="module", params=list(PROFILES))
def hosted(request: pytest.FixtureRequest) -> Iterator[HostedProxy]:
    with hosted_proxy(StandIn(request.param, SECRET)) as proxy:
        yield proxy


@pytest.fixture
def proxy(hosted: HostedProxy) -> HostedProxy:
    hosted.stand_in.script = echo_script
    hosted.stand_in.tool_script = None
    hosted.stand_in.requests.clear()
    return hosted


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", ["chat", "responses", "anthropic", "google"])
def test_each_sdk_through_each_profile(
    proxy: HostedProxy, dialect: str, stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    sid, key = proxy.new_session()
    assert reply_text(proxy, key, dialect, stream) == "echo: x"

    ((path, headers, body),) = proxy.stand_in.requests
    upstream = PROFILES[proxy.stand_in.profile]
    assert path == NATIVE_PATHS[upstream.dialect]
    assert key not in json.dumps([headers, body]), "the agent's key never goes upstream"
    assert "stream" not in body or body["stream"] is False  # the proxy streams itself
    if dialect == upstream.dialect:
        # The agent's own request went as it came: only the model and stream changed.
        assert body.get("model", MODEL) == MODEL
        assert {
            "anthropic": lambda: body["messages"] == [{"role": "user", "content": "x"}],
            "responses": lambda: body["input"] == "x",
            "google": lambda: body["contents"][0]["parts"] == [{"text": "x"}],
            "chat": lambda: body["messages"] == [{"role": "user", "content": "x"}],
        }[dialect]()

    (turn,) = proxy.export(sid)["turns"]
    assert turn["capture_level"] == "text" and turn["token_ids"] is None
    assert turn["response_message"]["content"] == "echo: x"
    assert turn["request_messages"][-1]["content"] == "x"
    assert SECRET not in json.dumps(proxy.export(sid)) + caplog.text


@pytest.mark.parametrize("hosted", ["anthropic"], indirect=True)
def test_the_agents_own_dialect_passes_through_unconverted(proxy: HostedProxy) -> None:
    """An Anthropic agent's request reaches an Anthropic upstream with fields the chat
    translation has no place for (metadata), as sent."""
    _, key = proxy.new_session()
    anthropic_client(proxy, key).messages.create(
        model="agent-model",
        max_tokens=7,
        metadata={"user_id": "u-1"},
        system="be brief",
        messages=[{"role": "user", "content": "x"}],
    )
    ((_, headers, body),) = proxy.stand_in.requests
    assert body == {
        "model": MODEL,
        "max_tokens": 7,
        "metadata": {"user_id": "u-1"},
        "system": "be brief",
        "messages": [{"role": "user", "content": "x"}],
    }
    assert headers["x-api-key"] == SECRET and headers["anthropic-version"]


def weather(messages: list[dict], tools: list[dict]) -> FakeReply:
    if messages[-1]["role"] == "tool":
        return FakeReply(text=f"it is {messages[-1]['content']}")
    return FakeReply(text="checking", tool_calls=(("get_weather", {"city": "Paris"}),))


WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def test_a_chat_agents_tool_call_round_trips_through_each_profile(proxy: HostedProxy) -> None:
    proxy.stand_in.tool_script = weather
    _, key = proxy.new_session()
    chat = openai_client(proxy, key).chat.completions
    messages: list = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "weather?"},
    ]
    first = chat.create(model="m", messages=messages, tools=[WEATHER], tool_choice="auto")
    (call,) = first.choices[0].message.tool_calls or []
    assert first.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    messages += [
        first.choices[0].message.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "sunny"},
    ]
    second = chat.create(model="m", messages=messages, tools=[WEATHER])
    # Google takes a result as an object (`{"result": ...}`), which its model then reads.
    assert second.choices[0].message.content in ("it is sunny", 'it is {"result":"sunny"}')


@pytest.mark.parametrize("hosted", NATIVE, indirect=True)  # nothing converted for chat
def test_what_a_conversion_cannot_carry_is_refused_in_the_agents_dialect(
    proxy: HostedProxy,
) -> None:
    upstream = PROFILES[proxy.stand_in.profile]
    sid, key = proxy.new_session()
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(proxy, key).chat.completions.create(
            model="m",
            messages=[
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "what is this?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}},
                    ],
                }
            ],
        )
    assert "image_url" in str(refused.value) and upstream.name in str(refused.value)
    assert proxy.stand_in.requests == [] and proxy.export(sid)["turns"] == []


@pytest.mark.parametrize("hosted", NATIVE, indirect=True)
def test_what_the_dialect_leaves_out_is_refused_when_converted(proxy: HostedProxy) -> None:
    """An Anthropic server tool reaches an Anthropic upstream as sent; converted for any
    other it could not be called, so the call is refused (an engine records it left out).
    A chat upstream is an engine's API: there the tool is left out and recorded."""
    sid, key = proxy.new_session()
    messages = anthropic_client(proxy, key).messages
    call = {
        "model": "m",
        "max_tokens": 5,
        "messages": [{"role": "user", "content": "x"}],
        "tools": [{"type": "web_search_20250305", "name": "web_search"}],
    }
    if proxy.stand_in.profile == "anthropic":
        messages.create(**call)  # type: ignore[call-overload]
        ((_, _, body),) = proxy.stand_in.requests
        assert body["tools"] == call["tools"]
        assert proxy.export(sid)["turns"][0]["not_forwarded"] == []
        return
    with pytest.raises(anthropic.BadRequestError, match="web_search"):
        messages.create(**call)  # type: ignore[call-overload]
    assert proxy.stand_in.requests == [] and proxy.export(sid)["turns"] == []


@pytest.mark.parametrize("hosted", ["google"], indirect=True)  # a conversion to google
def test_anthropic_sdk_sees_a_refusal_as_its_own_error(proxy: HostedProxy) -> None:
    _, key = proxy.new_session()
    with pytest.raises(anthropic.BadRequestError, match="parallel"):
        anthropic_client(proxy, key).messages.create(
            model="m",
            max_tokens=5,
            messages=[{"role": "user", "content": "x"}],
            tools=[{"name": "t", "input_schema": {"type": "object"}}],
            tool_choice={"type": "auto", "disable_parallel_tool_use": True},
        )


@pytest.mark.parametrize("profile", NATIVE)
def test_certification_names_the_profile_when_the_upstream_answers_otherwise(
    profile: UpstreamName,
) -> None:
    """A chat server reached as a hosted API (a wrong --upstream) is refused by name."""
    stand_in = StandIn("openai-chat", SECRET)
    with serve_in_thread(provider_app(stand_in)) as url:
        wrong = build_upstream(profile, url, key=SECRET)
        assert isinstance(wrong, HostedUpstream)
        with pytest.raises(CertificationError, match=profile):
            asyncio.run(certify(wrong, wrong.root, model=MODEL, capture="text"))


@pytest.mark.parametrize("profile", NATIVE)
def test_a_hosted_upstream_is_refused_for_training(profile: UpstreamName) -> None:
    stand_in = StandIn(profile, SECRET)
    with serve_in_thread(provider_app(stand_in)) as url:
        upstream = build_upstream(profile, url, key=SECRET)
        with pytest.raises(CertificationError, match="--capture text"):
            asyncio.run(certify(upstream, upstream.root))


def test_a_wrong_key_is_the_upstreams_401() -> None:
    stand_in = StandIn("anthropic", SECRET)
    with serve_in_thread(provider_app(stand_in)) as url:
        upstream = build_upstream("anthropic", url, key="not-the-key")
        with pytest.raises(CertificationError) as refused:
            asyncio.run(certify(upstream, upstream.root, capture="text"))
    assert "401" in str(refused.value) and "not-the-key" not in str(refused.value)


@dataclass
class _At:
    url: str


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("profile", list(PROFILES))
def test_each_stand_in_answers_its_providers_sdk(profile: UpstreamName, stream: bool) -> None:
    """The stand-ins against the official SDKs directly: their replies and their SSE
    streams (Anthropic's events, Google's `alt=sse`) parse as the real APIs' do."""
    stand_in = StandIn(profile, SECRET)
    with serve_in_thread(provider_app(stand_in)) as url:
        assert reply_text(_At(url), SECRET, PROFILES[profile].dialect, stream) == "echo: x"
        with pytest.raises(Exception, match="invalid API key"):
            reply_text(_At(url), "wrong-key", PROFILES[profile].dialect, stream)
