"""The hosted-provider stand-ins (tests/fixtures/providers.py) are not the proxy: their
replies parse with each official SDK's own response models, and they refuse what the
real API refuses, in its error shape, by the SDK's request types alone."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import httpx
import openai.types.chat
import openai.types.responses
import pytest
from google.genai import types as google_types
from pydantic import TypeAdapter

from harbor_ray.capture.core.upstream_profile import PROFILES, UpstreamName
from harbor_ray.capture.proxy.fake_engine import FakeReply
from tests.fixtures.provider_replies import documented, reply_body, reply_events
from tests.fixtures.providers import MODEL, StandIn, provider_app
from tests.fixtures.threaded import serve_in_thread

KEY = "sk-stand-in-key"
REPLY_MODELS: dict[str, Any] = {
    "anthropic": anthropic.types.Message,
    "chat": openai.types.chat.ChatCompletion,
    "responses": openai.types.responses.Response,
    "google": google_types.GenerateContentResponse,
}
EVENT_TYPES: dict[str, Any] = {
    "anthropic": anthropic.types.RawMessageStreamEvent,
    "chat": openai.types.chat.ChatCompletionChunk,
    "responses": openai.types.responses.ResponseStreamEvent,
    "google": google_types.GenerateContentResponse,
}
APIS = list(REPLY_MODELS)
CALL = FakeReply(text="checking", tool_calls=(("get_weather", {"city": "Paris"}),))


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "reply", [FakeReply(text="hello"), CALL, FakeReply(tool_calls=CALL.tool_calls)]
)
def test_each_reply_and_its_stream_parse_with_the_sdks_models(api: str, reply: FakeReply) -> None:
    TypeAdapter(REPLY_MODELS[api]).validate_python(documented(api)["reply"])
    body = reply_body(api, reply, MODEL, 0)
    TypeAdapter(REPLY_MODELS[api]).validate_python(body)
    events = [
        line.removeprefix("data: ")
        for chunk in reply_events(api, body)
        for line in chunk.splitlines()
        if line.startswith("data: {")
    ]
    assert events
    for event in events:
        TypeAdapter(EVENT_TYPES[api]).validate_python(json.loads(event))
    assert reply.text in json.dumps(body) and all(
        name in json.dumps(body) for name, _ in reply.tool_calls
    )


# Per profile: a request the real API refuses (a required field missing), the status and
# the words of its refusal, and where its error JSON keeps the message.
REFUSED: dict[UpstreamName, tuple[dict[str, Any], str]] = {
    "anthropic": (
        {"model": MODEL, "messages": [{"role": "user", "content": "x"}]},
        "max_tokens: Field required",
    ),
    "openai-chat": ({"model": MODEL}, "messages: Field required"),
    "hf": ({"model": MODEL, "messages": [{"role": "user"}]}, "content: Field required"),
    "openai-responses": (
        {"model": MODEL, "input": [{"type": "function_call_output", "call_id": "call_1"}]},
        "input",
    ),
    "google": ({"generationConfig": {"maxOutputTokens": 5}}, "contents is not specified"),
}


def _message(profile: UpstreamName, error: dict[str, Any]) -> str:
    if PROFILES[profile].dialect == "anthropic":
        assert error["type"] == "error" and error["error"]["type"] == "invalid_request_error"
    elif PROFILES[profile].dialect == "google":
        assert error["error"]["status"] == "INVALID_ARGUMENT" and error["error"]["code"] == 400
    else:
        assert error["error"]["type"] == "invalid_request_error"
    return error["error"]["message"]


@pytest.mark.parametrize("profile", list(REFUSED))
def test_each_stand_in_refuses_what_its_sdk_types_refuse(profile: UpstreamName) -> None:
    """Nothing of the proxy decides this: the SDK's request types do. The request was
    taken (recorded) and refused, in the provider's error shape, naming the field."""
    body, words = REFUSED[profile]
    stand_in = StandIn(profile, KEY)
    path = {
        "anthropic": "/v1/messages",
        "google": f"/v1beta/models/{MODEL}:generateContent",
        "responses": "/v1/responses",
    }.get(PROFILES[profile].dialect, "/v1/chat/completions")
    with serve_in_thread(provider_app(stand_in)) as url:
        answer = httpx.post(
            url + path,
            json=body,
            headers={**PROFILES[profile].headers(KEY), "anthropic-version": "2023-06-01"},
        )
    assert answer.status_code == 400, answer.text
    assert words in _message(profile, answer.json())
    assert [recorded for _, _, recorded in stand_in.requests] == [body]


@pytest.mark.parametrize("profile", ["anthropic", "openai-chat", "google"])
def test_each_stand_in_refuses_a_field_its_api_does_not_document(profile: UpstreamName) -> None:
    stand_in = StandIn(profile, KEY)
    api = PROFILES[profile].dialect
    body = {
        "anthropic": {
            "model": MODEL,
            "max_tokens": 5,
            "return_token_ids": True,
            "messages": [{"role": "user", "content": "x"}],
        },
        "chat": {
            "model": MODEL,
            "return_token_ids": True,
            "messages": [{"role": "user", "content": "x"}],
        },
        "google": {
            "contents": [{"role": "user", "parts": [{"text": "x"}]}],
            "return_token_ids": True,
        },
    }[api]
    path = {
        "anthropic": "/v1/messages",
        "chat": "/v1/chat/completions",
        "google": f"/v1beta/models/{MODEL}:generateContent",
    }[api]
    with serve_in_thread(provider_app(stand_in)) as url:
        answer = httpx.post(
            url + path,
            json=body,
            headers={**PROFILES[profile].headers(KEY), "anthropic-version": "2023-06-01"},
        )
    assert answer.status_code == 400 and "return_token_ids" in _message(profile, answer.json())


@pytest.mark.parametrize("profile", ["anthropic", "openai-responses"])
def test_a_field_unknown_inside_a_message_is_refused(profile: UpstreamName) -> None:
    """The SDKs' TypedDicts ignore a field they do not name; the APIs refuse it, and so
    does the stand-in (a tool result keyed `tool_id` for `tool_use_id` is refused)."""
    stand_in = StandIn(profile, KEY)
    body, path = (
        (
            {
                "model": MODEL,
                "max_tokens": 5,
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "x", "tool_id": "t1"}]}
                ],
            },
            "/v1/messages",
        )
        if profile == "anthropic"
        else (
            {"model": MODEL, "input": [{"role": "user", "content": "x", "tool_id": "t1"}]},
            "/v1/responses",
        )
    )
    with serve_in_thread(provider_app(stand_in)) as url:
        answer = httpx.post(
            url + path,
            json=body,
            headers={**PROFILES[profile].headers(KEY), "anthropic-version": "2023-06-01"},
        )
    assert answer.status_code == 400 and "tool_id" in _message(profile, answer.json())
    assert len(stand_in.requests) == 1


def test_the_stand_ins_import_nothing_of_the_proxys_conversions() -> None:
    import ast
    from pathlib import Path

    fixtures = Path(__file__).parents[1] / "fixtures"
    for name in ("providers.py", "provider_requests.py", "provider_replies.py"):
        tree = ast.parse((fixtures / name).read_text())
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module
        } | {
            alias.name
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        }
        assert not {
            m
            for m in imported
            if m.startswith(
                (
                    "harbor_ray.capture.core.dialects",
                    "harbor_ray.capture.core.native_",
                    "harbor_ray.capture.core.completion",
                )
            )
        }, name
