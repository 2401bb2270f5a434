"""The official SDKs against the capture app over real HTTP, with the fake engine.

Each SDK must parse every reply without error and see exactly the text and tool calls
the engine produced; the session must record exactly one turn per model call, holding
the engine's own ids.
"""

from __future__ import annotations

import dataclasses
import gc
import json

import anthropic
import httpx
import numpy as np
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from harbor_ray.capture.core.budget import BUDGET_MESSAGE
from harbor_ray.capture.proxy.fake_engine import FakeReply, render_prompt
from tests.capture.live_server import CaptureServer
from tests.capture.sdk_clients import (
    anthropic_client,
    google_client,
    openai_client,
    reply_text,
)

WEATHER_TOOL_ARGS = {"city": "Paris", "unit": "celsius"}


def weather_script(messages: list[dict]) -> FakeReply:
    return FakeReply(text="Let me check.", tool_calls=(("get_weather", WEATHER_TOOL_ARGS),))


def assert_one_turn_per_call(server: CaptureServer, session_id: str, calls: int) -> dict:
    doc = server.export(session_id)
    assert len(doc["turns"]) == calls == len(server.engine.calls)
    for turn, sent in zip(doc["turns"], server.engine.calls, strict=True):
        assert turn["prompt_ids"] == render_prompt(sent["messages"], sent.get("tools"))
        assert turn["token_ids"], "sampled ids must be recorded"
        assert len(turn["logprobs"]) == len(turn["token_ids"])
    return doc


# ---- OpenAI chat-completions ---------------------------------------------------------


def test_openai_chat(server: CaptureServer) -> None:
    sid, key = server.new_session()
    reply = openai_client(server, key).chat.completions.create(
        model="agent-model", messages=[{"role": "user", "content": "hello"}], max_tokens=64
    )
    assert reply.choices[0].message.content == "echo: hello"
    assert reply.model == "agent-model"
    assert server.engine.calls[0]["model"] == "fake-model"  # rewritten to the served id
    doc = assert_one_turn_per_call(server, sid, 1)
    assert doc["turns"][0]["dialect"] == "chat"


def test_a_recorded_turn_leaves_the_collector_one_object(server: CaptureServer) -> None:
    """A session keeps every turn for the rollout's life; anything in a turn that the
    garbage collector tracks is walked by every full pass while it lives (the old record
    kept its messages as dicts and its ids on array/memoryview chains: 7+ objects)."""
    sid, key = server.new_session()
    client = openai_client(server, key)
    for _ in range(2):
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}], max_tokens=8
        )
    turn, again = server.store.state(sid).turns
    # One sampling record for every call sampled alike, not one per turn.
    assert turn.sampling is again.sampling
    values = [getattr(turn, f.name) for f in dataclasses.fields(turn) if f.name != "sampling"]
    assert [v for v in values if gc.is_tracked(v)] == []
    for ids in (turn.prompt_ids, turn.token_ids, turn.logprobs):
        # Own data, or a view one level into the session's shared buffer (capture.core.
        # held): an array that owns its data, never a memoryview chain.
        owner = ids if ids.base is None else ids.base
        assert isinstance(owner, np.ndarray) and owner.base is None
        assert not gc.is_tracked(owner)
    assert json.loads(turn.request_messages_json) == [{"role": "user", "content": "hi"}]
    assert json.loads(turn.response_message_json)["content"] == "echo: hi"


def test_openai_chat_stream(server: CaptureServer) -> None:
    sid, key = server.new_session()
    stream = openai_client(server, key).chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": "stream me"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "echo: stream me"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert "stream_options" not in server.engine.calls[0]
    assert server.engine.calls[0]["stream"] is False
    assert_one_turn_per_call(server, sid, 1)


def test_openai_chat_tool_call_streamed_and_not(server: CaptureServer) -> None:
    server.engine.script = weather_script
    sid, key = server.new_session()
    client = openai_client(server, key)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    msgs = [{"role": "user", "content": "weather?"}]
    reply = client.chat.completions.create(model="m", messages=msgs, tools=tools)
    call = reply.choices[0].message.tool_calls[0]
    assert reply.choices[0].finish_reason == "tool_calls"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == WEATHER_TOOL_ARGS
    stream = client.chat.completions.create(model="m", messages=msgs, tools=tools, stream=True)
    deltas = [c.choices[0].delta for c in stream if c.choices]
    streamed = [tc for d in deltas for tc in (d.tool_calls or [])]
    assert [tc.function.name for tc in streamed] == ["get_weather"]
    assert json.loads(streamed[0].function.arguments) == WEATHER_TOOL_ARGS
    assert_one_turn_per_call(server, sid, 2)


def test_openai_chat_three_turns_link_into_one_root(server: CaptureServer) -> None:
    sid, key = server.new_session()
    client = openai_client(server, key)
    messages: list[dict] = [{"role": "system", "content": "be brief"}]
    for word in ("one", "two", "three"):
        messages.append({"role": "user", "content": word})
        reply = client.chat.completions.create(model="m", messages=messages)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    doc = assert_one_turn_per_call(server, sid, 3)
    assert doc["counts"]["roots"] == 1
    assert [t["parent"] for t in doc["turns"]] == [None, 0, 1]
    (sequence,) = doc["sequences"]
    last = doc["turns"][-1]
    assert sequence["input_ids"] == last["prompt_ids"] + last["token_ids"]
    assert sum(sequence["loss_mask"]) == sum(len(t["token_ids"]) for t in doc["turns"])
    assert doc["trainable"] is True


# ---- OpenAI Responses ---------------------------------------------------------------


def test_openai_responses(server: CaptureServer) -> None:
    sid, key = server.new_session()
    reply = openai_client(server, key).responses.create(
        model="m", input="hi there", instructions="be nice"
    )
    assert reply.output_text == "echo: hi there"
    assert server.engine.calls[0]["messages"][0] == {"role": "system", "content": "be nice"}
    doc = assert_one_turn_per_call(server, sid, 1)
    assert doc["turns"][0]["dialect"] == "responses"


def test_openai_responses_stream(server: CaptureServer) -> None:
    sid, key = server.new_session()
    with openai_client(server, key).responses.stream(model="m", input="streamed") as stream:
        deltas = [e.delta for e in stream if e.type == "response.output_text.delta"]
        final = stream.get_final_response()
    assert "".join(deltas) == final.output_text == "echo: streamed"
    assert_one_turn_per_call(server, sid, 1)


def test_openai_responses_tool_call(server: CaptureServer) -> None:
    server.engine.script = weather_script
    sid, key = server.new_session()
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]
    reply = openai_client(server, key).responses.create(model="m", input="w?", tools=tools)
    calls = [item for item in reply.output if item.type == "function_call"]
    assert [c.name for c in calls] == ["get_weather"]
    assert json.loads(calls[0].arguments) == WEATHER_TOOL_ARGS
    assert_one_turn_per_call(server, sid, 1)


def test_openai_responses_input_tokens_is_the_engines_count_and_not_a_turn(
    server: CaptureServer,
) -> None:
    sid, key = server.new_session()
    client = openai_client(server, key)
    counted = client.responses.input_tokens.count(
        model="m", input="how long is this?", instructions="be nice"
    )
    assert counted.object == "response.input_tokens"
    assert server.export(sid)["turns"] == [] and server.engine.calls == []
    reply = client.responses.create(model="m", input="how long is this?", instructions="be nice")
    assert counted.input_tokens == reply.usage.input_tokens
    assert counted.input_tokens == len(render_prompt(server.engine.calls[0]["messages"]))
    assert len(server.export(sid)["turns"]) == 1


# ---- Anthropic Messages -------------------------------------------------------------


def test_anthropic_messages(server: CaptureServer) -> None:
    sid, key = server.new_session()
    reply = anthropic_client(server, key).messages.create(
        model="claude-x",
        max_tokens=64,
        system="sys",
        messages=[{"role": "user", "content": "bonjour"}],
    )
    assert reply.content[0].type == "text" and reply.content[0].text == "echo: bonjour"
    assert reply.stop_reason == "end_turn"
    doc = assert_one_turn_per_call(server, sid, 1)
    assert doc["turns"][0]["dialect"] == "anthropic"


def test_anthropic_stream_with_tool_use(server: CaptureServer) -> None:
    server.engine.script = weather_script
    sid, key = server.new_session()
    tools = [{"name": "get_weather", "description": "w", "input_schema": {"type": "object"}}]
    with anthropic_client(server, key).messages.stream(
        model="claude-x",
        max_tokens=64,
        tools=tools,
        messages=[{"role": "user", "content": "weather?"}],
    ) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content] == ["text", "tool_use"]
    assert final.content[0].text == "Let me check."
    assert final.content[1].name == "get_weather" and final.content[1].input == WEATHER_TOOL_ARGS
    assert final.stop_reason == "tool_use"
    assert_one_turn_per_call(server, sid, 1)


def test_anthropic_stream_text(server: CaptureServer) -> None:
    sid, key = server.new_session()
    with anthropic_client(server, key).messages.stream(
        model="claude-x", max_tokens=64, messages=[{"role": "user", "content": "s"}]
    ) as stream:
        text = "".join(stream.text_stream)
    assert text == "echo: s"
    assert_one_turn_per_call(server, sid, 1)


def test_anthropic_count_tokens_is_the_engines_count_and_not_a_turn(
    server: CaptureServer,
) -> None:
    sid, key = server.new_session()
    client = anthropic_client(server, key)
    request = {
        "model": "claude-x",
        "system": "be brief",
        "messages": [{"role": "user", "content": "count me please"}],
    }
    counted = client.messages.count_tokens(**request)
    assert server.export(sid)["turns"] == [] and server.engine.calls == []
    # The count is the engine's tokenisation of the very prompt the call itself sends.
    reply = client.messages.create(max_tokens=64, **request)
    assert counted.input_tokens == reply.usage.input_tokens
    assert counted.input_tokens == len(render_prompt(server.engine.calls[0]["messages"]))
    assert len(server.export(sid)["turns"]) == 1


def test_count_tokens_without_the_engines_tokenizer_is_estimated(
    server: CaptureServer,
) -> None:
    server.engine.tokenize = False  # an engine without vLLM's /tokenize
    sid, key = server.new_session()
    counted = anthropic_client(server, key).messages.count_tokens(
        model="claude-x", messages=[{"role": "user", "content": "count me please"}]
    )
    assert counted.input_tokens > 0
    assert server.export(sid)["turns"] == [] and server.engine.calls == []


# ---- Google generateContent ---------------------------------------------------------


def test_google_generate_content(server: CaptureServer) -> None:
    sid, key = server.new_session()
    client = google_client(server, key)
    reply = client.models.generate_content(
        model="gemini-x",
        contents="hola",
        config=gtypes.GenerateContentConfig(system_instruction="sys", max_output_tokens=64),
    )
    assert reply.text == "echo: hola"
    doc = assert_one_turn_per_call(server, sid, 1)
    assert doc["turns"][0]["dialect"] == "google"


def test_google_generate_content_stream(server: CaptureServer) -> None:
    sid, key = server.new_session()
    client = google_client(server, key)
    chunks = list(client.models.generate_content_stream(model="gemini-x", contents="flow"))
    assert "".join(c.text or "" for c in chunks) == "echo: flow"
    assert chunks[-1].candidates[0].finish_reason == gtypes.FinishReason.STOP
    assert_one_turn_per_call(server, sid, 1)


def test_google_function_call(server: CaptureServer) -> None:
    server.engine.script = weather_script
    sid, key = server.new_session()
    tool = gtypes.Tool(
        function_declarations=[
            gtypes.FunctionDeclaration(
                name="get_weather",
                description="w",
                parameters=gtypes.Schema(
                    type=gtypes.Type.OBJECT,
                    properties={"city": gtypes.Schema(type=gtypes.Type.STRING)},
                ),
            )
        ]
    )
    client = google_client(server, key)
    reply = client.models.generate_content(
        model="gemini-x",
        contents="weather?",
        config=gtypes.GenerateContentConfig(
            tools=[tool],
            automatic_function_calling=gtypes.AutomaticFunctionCallingConfig(disable=True),
        ),
    )
    (call,) = reply.function_calls
    assert call.name == "get_weather" and call.args == WEATHER_TOOL_ARGS
    assert server.engine.calls[0]["tools"][0]["function"]["name"] == "get_weather"
    assert_one_turn_per_call(server, sid, 1)


def test_google_count_tokens_is_the_engines_count_and_not_a_turn(
    server: CaptureServer,
) -> None:
    sid, key = server.new_session()
    client = google_client(server, key)
    config = gtypes.GenerateContentConfig(system_instruction="sys")
    counted = client.models.count_tokens(model="gemini-x", contents="abc")
    assert server.export(sid)["turns"] == [] and server.engine.calls == []
    reply = client.models.generate_content(model="gemini-x", contents="abc")
    assert counted.total_tokens == reply.usage_metadata.prompt_token_count
    assert counted.total_tokens == len(render_prompt(server.engine.calls[0]["messages"]))
    # The wrapped form, which carries the system instruction, counts it too.
    wrapped = httpx.post(
        f"{server.url}/v1beta/models/gemini-x:countTokens",
        headers={"x-goog-api-key": key},
        json={
            "generateContentRequest": {
                "model": "models/gemini-x",
                "contents": [{"role": "user", "parts": [{"text": "abc"}]}],
                "systemInstruction": {"parts": [{"text": "sys"}]},
            }
        },
    )
    with_system = client.models.generate_content(model="gemini-x", contents="abc", config=config)
    assert wrapped.json() == {"totalTokens": with_system.usage_metadata.prompt_token_count}
    assert len(server.export(sid)["turns"]) == 2


# ---- Session edges, through the SDKs -------------------------------------------------


def test_unknown_key_is_401_in_each_dialect(server: CaptureServer) -> None:
    bad = "hr-0000-nope"
    with pytest.raises(openai.AuthenticationError):
        openai_client(server, bad).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    with pytest.raises(anthropic.AuthenticationError):
        anthropic_client(server, bad).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    gclient = google_client(server, bad)
    with pytest.raises(genai.errors.ClientError) as err:
        gclient.models.generate_content(model="m", contents="x")
    assert err.value.code == 401
    assert server.engine.calls == []


def test_one_sessions_key_cannot_read_another(server: CaptureServer) -> None:
    sid_a, key_a = server.new_session()
    sid_b, _ = server.new_session()
    forged = key_a.replace(sid_a, sid_b)
    with pytest.raises(openai.AuthenticationError):
        openai_client(server, forged).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", ["chat", "responses", "anthropic", "google"])
def test_budget_stop_is_terminal_nonempty_and_unrecorded(
    server: CaptureServer, dialect: str, stream: bool
) -> None:
    sid, key = server.new_session(budget=1)
    assert reply_text(server, key, dialect, stream) == "echo: x"
    assert reply_text(server, key, dialect, stream) == BUDGET_MESSAGE
    assert len(server.engine.calls) == 1
    doc = assert_one_turn_per_call(server, sid, 1)
    assert doc["counts"]["budget_stops"] == 1


def test_engine_failure_is_retryable_and_counted(server: CaptureServer) -> None:
    server.engine.fail_with = 500
    sid, key = server.new_session()
    with pytest.raises(openai.InternalServerError) as err:
        openai_client(server, key).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
    assert err.value.status_code == 502
    with pytest.raises(anthropic.APIStatusError) as aerr:
        anthropic_client(server, key).messages.create(
            model="m", max_tokens=5, messages=[{"role": "user", "content": "x"}]
        )
    assert aerr.value.status_code >= 500
    doc = server.export(sid)
    assert doc["turns"] == [] and doc["counts"]["engine_errors"] == 2
