"""The Anthropic Messages dialect, checked against the official SDK's own types and parser."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterable
from itertools import pairwise
from typing import Any

import anthropic
import httpx2
import pytest
from anthropic.types import Message, MessageTokensCount, RawMessageStreamEvent
from anthropic.types.shared import ErrorResponse
from pydantic import TypeAdapter

from harbor_ray.capture.core.completion import Completion, ToolCall
from harbor_ray.capture.core.dialects.anthropic import ANTHROPIC, count_tokens_call
from harbor_ray.capture.core.dialects.base import ErrorKind, ReplyContext
from harbor_ray.errors import AgentRequestError

CTX = ReplyContext(response_id="msg_0001", created=1_700_000_000, model="claude-test")
EVENT = TypeAdapter(RawMessageStreamEvent)

TEXT_ONLY = Completion(
    text="Hello there.", finish_reason="stop", prompt_tokens=11, completion_tokens=3
)
FULL = Completion(
    text="Let me look.",
    finish_reason="tool_calls",
    tool_calls=(
        # Spaced JSON, as a model writes it: the client must still get the object.
        ToolCall("toolu_1", "bash", '{"command": "ls -la", "cwd": "/tmp"}'),
        ToolCall("toolu_2", "read", '{"path":"ü.txt","lines":[1,2]}'),
    ),
    reasoning="I should list the files first.",
    prompt_tokens=120,
    completion_tokens=34,
)
EMPTY = Completion(text="", finish_reason="stop", prompt_tokens=5, completion_tokens=1)


def request(**fields: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": "claude-test",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
    }
    body.update(fields)
    return body


def engine_body(**fields: Any) -> dict[str, Any]:
    return ANTHROPIC.to_engine(request(**fields), url_model=None, url_stream=False).body


def sdk_client(
    reply: bytes | dict[str, Any], seen: list[dict[str, Any]] | None = None, status: int = 200
) -> anthropic.Anthropic:
    """A real SDK client whose transport answers with `reply` and records request bodies.

    The SDK runs on httpx2 (it rejects plain httpx objects), hence its MockTransport.
    """

    def handler(req: httpx2.Request) -> httpx2.Response:
        if seen is not None:
            seen.append(json.loads(req.content))
        if isinstance(reply, bytes):
            return httpx2.Response(
                status, content=reply, headers={"content-type": "text/event-stream"}
            )
        return httpx2.Response(status, json=reply)

    return anthropic.Anthropic(
        api_key="session-key",
        base_url="http://127.0.0.1",
        max_retries=0,
        http_client=httpx2.Client(transport=httpx2.MockTransport(handler)),
    )


def frames(stream: Iterable[bytes]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for frame in stream:
        event_line, data_line, *rest = frame.decode().split("\n")
        assert rest == ["", ""], frame
        assert event_line.startswith("event: ") and data_line.startswith("data: "), frame
        out.append((event_line.removeprefix("event: "), json.loads(data_line[len("data: ") :])))
    return out


# ---- requests -------------------------------------------------------------------------


def test_text_request_with_system_string() -> None:
    call = ANTHROPIC.to_engine(request(system="Be brief."), url_model=None, url_stream=False)
    assert call.body == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
        "max_tokens": 64,
    }
    assert call.stream is False
    assert call.request_model == "claude-test"


def test_system_blocks_are_joined_and_cache_control_ignored() -> None:
    system = [
        {"type": "text", "text": "You are an agent.", "cache_control": {"type": "ephemeral"}},
        {"type": "text", "text": "Work in /app."},
    ]
    assert engine_body(system=system)["messages"][0] == {
        "role": "system",
        "content": "You are an agent.\nWork in /app.",
    }


@pytest.mark.parametrize("system", ["", [], None])
def test_empty_system_adds_no_message(system: Any) -> None:
    assert engine_body(system=system)["messages"] == [{"role": "user", "content": "hi"}]


def test_user_text_blocks_are_joined() -> None:
    content = [{"type": "text", "text": "<reminder>x</reminder>"}, {"type": "text", "text": "go"}]
    assert engine_body(messages=[{"role": "user", "content": content}])["messages"] == [
        {"role": "user", "content": "<reminder>x</reminder>\ngo"}
    ]


def test_tool_history_translates_to_chat_tool_messages() -> None:
    messages = [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "Looking."},
                {"type": "tool_use", "id": "toolu_1", "name": "bash", "input": {"command": "ls"}},
                {"type": "tool_use", "id": "toolu_2", "name": "read", "input": {"path": "a"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "here you go"},
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "a\nb"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "is_error": True,
                    "content": [
                        {"type": "text", "text": "no such"},
                        {"type": "text", "text": "file"},
                    ],
                },
                {"type": "text", "text": "continue"},
            ],
        },
        {
            "role": "assistant",
            "content": [{"type": "tool_use", "id": "toolu_3", "name": "bash", "input": {}}],
        },
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_3"}]},
    ]
    assert engine_body(messages=messages)["messages"] == [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": "Looking.",
            "tool_calls": [
                {
                    "id": "toolu_1",
                    "type": "function",
                    "function": {"name": "bash", "arguments": '{"command":"ls"}'},
                },
                {
                    "id": "toolu_2",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"a"}'},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_1", "content": "a\nb"},
        {"role": "tool", "tool_call_id": "toolu_2", "content": "no such\nfile"},
        {"role": "user", "content": "here you go\ncontinue"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "toolu_3",
                    "type": "function",
                    "function": {"name": "bash", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "toolu_3", "content": ""},
    ]


def test_assistant_with_only_thinking_is_an_empty_turn() -> None:
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": ""}]},
        {"role": "user", "content": "again"},
    ]
    assert engine_body(messages=messages)["messages"][1] == {"role": "assistant", "content": ""}


def test_tool_input_is_compact_in_agent_key_order_and_keeps_unicode() -> None:
    block = {"type": "tool_use", "id": "t", "name": "w", "input": {"z": 1, "a": "é", "m": [1, 2]}}
    body = engine_body(messages=[{"role": "assistant", "content": [block]}])
    assert body["messages"][0]["tool_calls"][0]["function"]["arguments"] == (
        '{"z":1,"a":"é","m":[1,2]}'
    )


def test_identical_history_gives_byte_identical_engine_body() -> None:
    messages = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "t1", "name": "f", "input": {"y": {"b": 2, "a": 1}}}
            ],
        },
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
        },
    ]
    body = request(system=[{"type": "text", "text": "s"}], messages=messages)
    first = json.dumps(ANTHROPIC.to_engine(body, url_model=None, url_stream=False).body)
    # The agent re-sends its history through JSON on every call.
    again = json.loads(json.dumps(copy.deepcopy(body)))
    assert json.dumps(ANTHROPIC.to_engine(again, url_model=None, url_stream=False).body) == first


def test_tools_become_functions() -> None:
    tools = [
        {
            "name": "bash",
            "description": "Run a command.",
            "cache_control": {"type": "ephemeral"},
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
        },
        {"type": "custom", "name": "noop", "input_schema": {"type": "object"}},
    ]
    assert engine_body(tools=tools)["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "bash",
                "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
            },
        },
        {"type": "function", "function": {"name": "noop", "parameters": {"type": "object"}}},
    ]


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        ({"type": "auto"}, {"tool_choice": "auto"}),
        ({"type": "any"}, {"tool_choice": "required"}),
        ({"type": "none"}, {"tool_choice": "none"}),
        (
            {"type": "tool", "name": "bash"},
            {"tool_choice": {"type": "function", "function": {"name": "bash"}}},
        ),
        (
            {"type": "auto", "disable_parallel_tool_use": True},
            {"tool_choice": "auto", "parallel_tool_calls": False},
        ),
    ],
)
def test_tool_choice(choice: dict[str, Any], expected: dict[str, Any]) -> None:
    body = engine_body(tool_choice=choice)
    assert {k: body[k] for k in ("tool_choice", "parallel_tool_calls") if k in body} == expected


def test_sampling_fields_and_ignored_fields() -> None:
    body = engine_body(
        temperature=0.7,
        top_p=0.9,
        top_k=20,
        stop_sequences=["END", "\n\nHuman:"],
        metadata={"user_id": "u"},
        thinking={"type": "enabled", "budget_tokens": 1024},
        stream=True,
    )
    assert body == {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 64,
        "temperature": 0.7,
        "top_p": 0.9,
        "top_k": 20,
        "stop": ["END", "\n\nHuman:"],
    }


def test_stream_flag_comes_from_the_body() -> None:
    call = ANTHROPIC.to_engine(request(stream=True), url_model="other", url_stream=False)
    assert call.stream is True
    assert call.request_model == "claude-test"


def test_request_built_by_the_sdk_translates() -> None:
    seen: list[dict[str, Any]] = []
    client = sdk_client(ANTHROPIC.render(TEXT_ONLY, CTX), seen)
    reply = client.messages.create(
        # This SDK release dropped the sampling kwargs; older ones and agents still send them.
        model="claude-test",
        max_tokens=100,
        extra_body={"temperature": 0.2},
        system=[{"type": "text", "text": "sys", "cache_control": {"type": "ephemeral"}}],
        tools=[{"name": "bash", "input_schema": {"type": "object"}}],
        tool_choice={"type": "any"},
        messages=[
            {"role": "user", "content": "run it"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "toolu_9", "name": "bash", "input": {"cmd": "pwd"}}
                ],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "/app"}],
            },
        ],
    )
    assert reply.content[0].type == "text" and reply.content[0].text == "Hello there."
    assert ANTHROPIC.to_engine(seen[0], url_model=None, url_stream=False).body == {
        "messages": [
            {"role": "system", "content": "sys"},
            {"role": "user", "content": "run it"},
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "toolu_9",
                        "type": "function",
                        "function": {"name": "bash", "arguments": '{"cmd":"pwd"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "toolu_9", "content": "/app"},
        ],
        "tools": [
            {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
        ],
        "tool_choice": "required",
        "max_tokens": 100,
        "temperature": 0.2,
    }


def test_count_tokens_call_translates_without_max_tokens() -> None:
    seen: list[dict[str, Any]] = []
    client = sdk_client(ANTHROPIC.count_tokens_reply(42), seen)
    counted = client.messages.count_tokens(
        model="claude-test", system="s", messages=[{"role": "user", "content": "hi"}]
    )
    assert isinstance(counted, MessageTokensCount) and counted.input_tokens == 42
    assert "max_tokens" not in seen[0]
    with pytest.raises(AgentRequestError, match="max_tokens is required"):
        ANTHROPIC.to_engine(seen[0], url_model=None, url_stream=False)
    call = count_tokens_call(seen[0])
    assert call.body == {
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "hi"}]
    }
    assert call.stream is False and call.request_model == "claude-test"


def _with_user_block(block: dict[str, Any]) -> dict[str, Any]:
    return request(messages=[{"role": "user", "content": [block]}])


def _with_assistant_block(block: dict[str, Any]) -> dict[str, Any]:
    return request(messages=[{"role": "assistant", "content": [block]}])


_IMAGE = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x"}}


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ({"model": "m", "messages": [{"role": "user", "content": "hi"}]}, "max_tokens is required"),
        (request(max_tokens="10"), "max_tokens"),
        (request(max_tokens=0), "max_tokens"),
        (request(max_tokens=True), "max_tokens"),
        (request(messages=None), "messages"),
        (request(messages=[]), "messages must not be empty"),
        (request(messages=["hi"]), "messages[0]"),
        (request(messages=[{"role": "tool", "content": "x"}]), "messages[0].role"),
        (request(messages=[{"role": "system", "content": "x"}]), "a user or an assistant message"),
        (
            request(messages=[{"role": "system", "content": [_IMAGE]}]),
            "messages[0].content[0]: image",
        ),
        (request(messages=[{"role": "user"}]), "messages[0].content"),
        (request(messages=[{"role": "user", "content": 5}]), "messages[0].content"),
        (_with_user_block({"text": "no type"}), "messages[0].content[0].type"),
        (_with_user_block({"type": "text", "text": 3}), "messages[0].content[0].text"),
        (_with_user_block(_IMAGE), "messages[0].content[0]: image"),
        (_with_user_block({"type": "document", "source": {}}), "messages[0].content[0]: document"),
        (
            _with_user_block(
                {"type": "tool_result", "tool_use_id": "t", "content": [{"type": "search_result"}]}
            ),
            "messages[0].content[0].content[0]: block type 'search_result'",
        ),
        (_with_user_block({"type": "tool_use", "id": "t", "name": "f", "input": {}}), "'tool_use'"),
        (
            _with_user_block({"type": "tool_result", "content": "x"}),
            "messages[0].content[0].tool_use_id",
        ),
        (
            _with_user_block({"type": "tool_result", "tool_use_id": "t", "is_error": "yes"}),
            "messages[0].content[0].is_error",
        ),
        (_with_assistant_block({"type": "tool_result", "tool_use_id": "t"}), "'tool_result'"),
        (
            _with_assistant_block({"type": "tool_use", "id": "t", "name": "f", "input": "{}"}),
            "messages[0].content[0].input",
        ),
        (
            _with_assistant_block({"type": "tool_use", "name": "f", "input": {}}),
            "messages[0].content[0].id",
        ),
        (
            _with_assistant_block({"type": "server_tool_use", "id": "s", "name": "web_search"}),
            "'server_tool_use'",
        ),
        (request(system=5), "system"),
        (request(system=[_IMAGE]), "system[0]: image"),
        (request(tools={"name": "f"}), "tools"),
        (request(tools=[{"name": "f"}]), "tools[0].input_schema"),
        (request(tools=[{"input_schema": {}}]), "tools[0].name"),
        (request(tool_choice={"type": "sometimes"}), "tool_choice.type"),
        (request(tool_choice={"type": "tool"}), "tool_choice.name"),
        (request(tool_choice="auto"), "tool_choice"),
        (request(temperature="hot"), "temperature"),
        (request(top_k=1.5), "top_k"),
        (request(stop_sequences="END"), "stop_sequences"),
        (request(stop_sequences=[1]), "stop_sequences[0]"),
        (request(stream="yes"), "stream"),
        (request(model=5), "model"),
        ([], "request body"),
    ],
)
def test_malformed_request_names_the_field(body: Any, named: str) -> None:
    with pytest.raises(AgentRequestError) as info:
        ANTHROPIC.to_engine(body, url_model=None, url_stream=False)
    assert named in info.value.message
    assert info.value.status == 400


# ---- replies --------------------------------------------------------------------------


def test_render_text() -> None:
    reply = ANTHROPIC.render(TEXT_ONLY, CTX)
    assert reply == {
        "id": "msg_0001",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": [{"type": "text", "text": "Hello there."}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 11, "output_tokens": 3},
    }
    Message.model_validate(reply)


def test_render_thinking_text_and_tool_use() -> None:
    reply = ANTHROPIC.render(FULL, CTX)
    message = Message.model_validate(reply)
    assert reply["content"] == [
        {"type": "thinking", "thinking": "I should list the files first.", "signature": ""},
        {"type": "text", "text": "Let me look."},
        {
            "type": "tool_use",
            "id": "toolu_1",
            "name": "bash",
            "input": {"command": "ls -la", "cwd": "/tmp"},
        },
        {
            "type": "tool_use",
            "id": "toolu_2",
            "name": "read",
            "input": {"path": "ü.txt", "lines": [1, 2]},
        },
    ]
    assert message.stop_reason == "tool_use"
    assert message.usage.input_tokens == 120 and message.usage.output_tokens == 34


@pytest.mark.parametrize("arguments", ["not json", "[1, 2]", "", '"text"'])
def test_render_gives_non_object_arguments_as_empty_input(arguments: str) -> None:
    completion = Completion(
        text="", finish_reason="tool_calls", tool_calls=(ToolCall("toolu_x", "f", arguments),)
    )
    reply = ANTHROPIC.render(completion, CTX)
    Message.model_validate(reply)
    assert reply["content"] == [{"type": "tool_use", "id": "toolu_x", "name": "f", "input": {}}]


@pytest.mark.parametrize(
    ("completion", "stop_reason"),
    [
        (TEXT_ONLY, "end_turn"),
        (Completion(text="cut", finish_reason="length"), "max_tokens"),
        (Completion(text="", finish_reason="content_filter"), "refusal"),
        (FULL, "tool_use"),
        # The engine claimed a tool call but produced none: the turn just ended.
        (Completion(text="done", finish_reason="tool_calls"), "end_turn"),
    ],
)
def test_stop_reasons(completion: Completion, stop_reason: str) -> None:
    assert ANTHROPIC.render(completion, CTX)["stop_reason"] == stop_reason
    events = frames(ANTHROPIC.render_stream(completion, CTX))
    assert events[-2][1]["delta"] == {"stop_reason": stop_reason, "stop_sequence": None}


def test_render_empty_completion_has_no_blocks() -> None:
    reply = ANTHROPIC.render(EMPTY, CTX)
    Message.model_validate(reply)
    assert reply["content"] == []


@pytest.mark.parametrize("completion", [TEXT_ONLY, FULL, EMPTY], ids=["text", "full", "empty"])
def test_stream_is_the_real_event_sequence(completion: Completion) -> None:
    events = frames(ANTHROPIC.render_stream(completion, CTX))
    for name, data in events:
        assert name == data["type"]
        if name != "ping":  # the SDK skips pings before parsing; they are not in its union
            EVENT.validate_python(data)
    names = [name for name, _ in events]
    assert names[:2] == ["message_start", "ping"]
    assert names[-2:] == ["message_delta", "message_stop"]
    start = events[0][1]["message"]
    assert start["content"] == [] and start["stop_reason"] is None
    assert start["usage"]["input_tokens"] == completion.prompt_tokens
    assert events[-2][1]["usage"] == {"output_tokens": completion.completion_tokens}

    # Each block: start, its deltas, stop, all at one index, indices counting from 0.
    blocks = events[2:-2]
    starts = [i for i, (name, _) in enumerate(blocks) if name == "content_block_start"]
    assert [blocks[i][1]["index"] for i in starts] == list(range(len(starts)))
    for n, (begin, end) in enumerate(pairwise([*starts, len(blocks)])):
        kinds = [name for name, _ in blocks[begin:end]]
        assert kinds[-1] == "content_block_stop"
        assert set(kinds[1:-1]) == {"content_block_delta"}
        assert {data["index"] for _, data in blocks[begin:end]} == {n}
    assert len(starts) == len(ANTHROPIC.render(completion, CTX)["content"])


def test_stream_block_deltas_match_the_real_api() -> None:
    events = [data for _, data in frames(ANTHROPIC.render_stream(FULL, CTX))]
    shape = []
    for data in events:
        if data["type"] == "content_block_start":
            shape.append((data["content_block"]["type"], []))
        elif data["type"] == "content_block_delta":
            shape[-1][1].append(data["delta"]["type"])
    assert shape == [
        ("thinking", ["thinking_delta", "signature_delta"]),
        ("text", ["text_delta"]),
        ("tool_use", ["input_json_delta"]),
        ("tool_use", ["input_json_delta"]),
    ]
    # Tool input starts empty and arrives as JSON text, as the real API streams it.
    tool_start = next(
        d
        for d in events
        if d["type"] == "content_block_start" and d["content_block"]["type"] == "tool_use"
    )
    assert tool_start["content_block"]["input"] == {}


@pytest.mark.parametrize("completion", [TEXT_ONLY, FULL, EMPTY], ids=["text", "full", "empty"])
def test_sdk_stream_accumulator_rebuilds_the_rendered_message(completion: Completion) -> None:
    client = sdk_client(b"".join(ANTHROPIC.render_stream(completion, CTX)))
    with client.messages.stream(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        final = stream.get_final_message()
    assert final.model_dump(exclude_none=True) == Message.model_validate(
        ANTHROPIC.render(completion, CTX)
    ).model_dump(exclude_none=True)
    # And against the Completion itself, not only against render().
    assert "".join(b.text for b in final.content if b.type == "text") == completion.text
    assert [(b.id, b.name, b.input) for b in final.content if b.type == "tool_use"] == [
        (c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls
    ]
    assert [b.thinking for b in final.content if b.type == "thinking"] == (
        [completion.reasoning] if completion.reasoning else []
    )


def test_sdk_stream_text_events() -> None:
    client = sdk_client(b"".join(ANTHROPIC.render_stream(FULL, CTX)))
    with client.messages.stream(
        model="claude-test", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        assert "".join(stream.text_stream) == FULL.text


# ---- errors and aux -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "wire_type"),
    [
        ("invalid_request", "invalid_request_error"),
        ("authentication", "authentication_error"),
        ("not_found", "not_found_error"),
        ("too_large", "request_too_large"),
        ("engine", "api_error"),
        ("overloaded", "overloaded_error"),
    ],
)
def test_error_body(kind: ErrorKind, wire_type: str) -> None:
    body = ANTHROPIC.error_body(400, "bad thing", kind)
    assert body == {"type": "error", "error": {"type": wire_type, "message": "bad thing"}}
    if kind != "too_large":  # documented (413), but absent from the SDK's error union
        ErrorResponse.model_validate(body)


def test_error_body_reaches_the_sdk_as_its_status_error() -> None:
    client = sdk_client(
        ANTHROPIC.error_body(400, "max_tokens is required", "invalid_request"), status=400
    )
    with pytest.raises(anthropic.BadRequestError) as info:
        client.messages.create(model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}])
    assert info.value.body == {
        "type": "error",
        "error": {"type": "invalid_request_error", "message": "max_tokens is required"},
    }


def test_error_event_mid_stream_raises_in_the_sdk() -> None:
    frames_out = [
        *list(ANTHROPIC.render_stream(TEXT_ONLY, CTX))[:2],
        ANTHROPIC.error_event(529, "engine overloaded", "overloaded"),
    ]
    assert frames_out[-1].startswith(b"event: error\n")
    client = sdk_client(b"".join(frames_out))
    with (
        pytest.raises(anthropic.APIStatusError) as info,
        client.messages.stream(
            model="m", max_tokens=1, messages=[{"role": "user", "content": "x"}]
        ) as stream,
    ):
        stream.get_final_message()
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "engine overloaded"},
    }


def _tool_use(call_id: str) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": call_id, "name": "f", "input": {}}],
    }


def _tool_result(call_id: str) -> dict[str, Any]:
    return {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": call_id, "content": "r"}],
    }


@pytest.mark.parametrize(
    ("messages", "expected"),
    [
        # Before the conversation: part of the system prompt, after the `system` field.
        (
            [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
            [("system", "P\ns"), ("user", "u")],
        ),
        # Right after a user message: joined to its end.
        (
            [
                {"role": "user", "content": "u"},
                {
                    "role": "system",
                    "content": [{"type": "text", "text": "s1"}, {"type": "text", "text": "s2"}],
                },
                {"role": "system", "content": "s3"},
            ],
            [("system", "P"), ("user", "u\ns1\ns2\ns3")],
        ),
        # After an assistant message, before a user one: joined to the start of its text.
        (
            [
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "a"},
                {"role": "system", "content": "s"},
                {"role": "user", "content": "v"},
            ],
            [("system", "P"), ("user", "u"), ("assistant", "a"), ("user", "s\nv")],
        ),
        # After tool results, before the results of the next call: its own user message
        # follows the results.
        (
            [
                {"role": "user", "content": "u"},
                _tool_use("t1"),
                {"role": "system", "content": "s"},
                _tool_result("t1"),
            ],
            [("system", "P"), ("user", "u"), ("assistant", None), ("tool", "r"), ("user", "s")],
        ),
        # At the end, after an assistant message: a user message of its own.
        (
            [
                {"role": "user", "content": "u"},
                {"role": "assistant", "content": "a"},
                {"role": "system", "content": "s"},
            ],
            [("system", "P"), ("user", "u"), ("assistant", "a"), ("user", "s")],
        ),
    ],
)
def test_system_messages_fold_into_user_text_at_their_position(
    messages: list[dict[str, Any]],
    expected: list[tuple[str, str | None]],
) -> None:
    body = engine_body(system="P", messages=messages)
    assert [(m["role"], m["content"]) for m in body["messages"]] == expected


def test_server_tools_are_left_out_and_named() -> None:
    call = ANTHROPIC.to_engine(
        request(
            tools=[
                {"type": "web_search_20250305", "name": "web_search", "max_uses": 5},
                {
                    "name": "f",
                    "input_schema": {"type": "object"},
                    "cache_control": {"type": "ephemeral"},
                },
            ]
        ),
        url_model=None,
        url_stream=False,
    )
    assert [t["function"]["name"] for t in call.body["tools"]] == ["f"]
    assert call.not_forwarded == ("tools[0] (web_search_20250305 'web_search')",)


def test_images_in_tool_results_are_left_out_and_named() -> None:
    call = ANTHROPIC.to_engine(
        request(
            messages=[
                {"role": "user", "content": "u"},
                _tool_use("t1"),
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": "t1",
                            "content": [
                                {"type": "text", "text": "a"},
                                _IMAGE,
                                {"type": "text", "text": "b"},
                            ],
                        }
                    ],
                },
            ]
        ),
        url_model=None,
        url_stream=False,
    )
    assert call.body["messages"][-1] == {"role": "tool", "tool_call_id": "t1", "content": "a\nb"}
    assert call.not_forwarded == ("messages[2].content[0].content[1] (image)",)
