"""The Responses dialect, checked against the official openai SDK's own types and parser."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from harbor_ray.capture.core.completion import Completion, ToolCall
from harbor_ray.capture.core.dialects.base import ReplyContext
from harbor_ray.capture.core.dialects.responses import RESPONSES
from harbor_ray.capture.core.normalize import engine_body
from harbor_ray.errors import AgentRequestError

CTX = ReplyContext(response_id="resp_abc", created=1_700_000_000, model="agent-model")
STREAM_EVENT = TypeAdapter(ResponseStreamEvent)

TEXT = Completion(text="Hello there.", finish_reason="stop", prompt_tokens=11, completion_tokens=4)
CALLS = Completion(
    text="Let me look.",
    finish_reason="tool_calls",
    reasoning="The user wants a listing.",
    tool_calls=(
        ToolCall(id="call_1", name="shell", arguments='{"cmd": "ls"}'),
        ToolCall(id="call_2", name="read", arguments='{"path": "a.txt"}'),
    ),
    prompt_tokens=30,
    completion_tokens=20,
)
TRUNCATED = Completion(
    text="It was a dark and", finish_reason="length", prompt_tokens=5, completion_tokens=8
)


def engine(body: dict[str, Any]) -> dict[str, Any]:
    return RESPONSES.to_engine(body, url_model=None, url_stream=False).body


def messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    return engine({"model": "m", **body})["messages"]


# --- request -------------------------------------------------------------------------


def test_string_input_and_instructions():
    call = RESPONSES.to_engine(
        {"model": "gpt-x", "instructions": "Be brief.", "input": "hi", "stream": True},
        url_model=None,
        url_stream=False,
    )
    assert call.body == {
        "messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    }
    assert call.stream is True
    assert call.request_model == "gpt-x"


def test_message_items_and_parts():
    assert messages(
        {
            "input": [
                {"role": "developer", "content": "rules"},
                {
                    "type": "message",
                    "role": "system",
                    "content": [{"type": "input_text", "text": "s"}],
                },
                {
                    "role": "user",
                    "content": [
                        {"type": "input_text", "text": "a"},
                        {"type": "input_text", "text": "b"},
                    ],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "ok", "annotations": []}],
                },
            ]
        }
    ) == [
        {"role": "system", "content": "rules"},
        {"role": "system", "content": "s"},
        {"role": "user", "content": "a\nb"},
        {"role": "assistant", "content": "ok"},
    ]


def test_function_calls_merge_into_the_assistant_turn_across_reasoning():
    got = messages(
        {
            "input": [
                {"role": "user", "content": "list"},
                {
                    "type": "reasoning",
                    "id": "rs_1",
                    "summary": [{"type": "summary_text", "text": "t"}],
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "x"}],
                },
                {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": '{"a":1}'},
                {"type": "function_call", "call_id": "c2", "name": "read", "arguments": "{}"},
                {"type": "function_call_output", "call_id": "c1", "output": "file.txt"},
                {
                    "type": "function_call_output",
                    "call_id": "c2",
                    "output": [
                        {"type": "input_text", "text": "l1"},
                        {"type": "input_text", "text": "l2"},
                    ],
                },
                {"type": "function_call", "call_id": "c3", "name": "shell", "arguments": "{}"},
            ]
        }
    )
    call = {"type": "function", "function": {"name": "shell", "arguments": '{"a":1}'}}
    assert got == [
        {"role": "user", "content": "list"},
        {
            "role": "assistant",
            "content": "x",
            "tool_calls": [
                {"id": "c1", **call},
                {"id": "c2", "type": "function", "function": {"name": "read", "arguments": "{}"}},
            ],
        },
        {"role": "tool", "tool_call_id": "c1", "content": "file.txt"},
        {"role": "tool", "tool_call_id": "c2", "content": "l1\nl2"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "c3", "type": "function", "function": {"name": "shell", "arguments": "{}"}},
            ],
        },
    ]


def test_tools_tool_choice_and_sampling():
    body = engine(
        {
            "model": "m",
            "input": "hi",
            "tools": [
                {
                    "type": "function",
                    "name": "shell",
                    "description": "run",
                    "parameters": {"type": "object", "properties": {}},
                    "strict": True,
                },
                {"type": "function", "name": "noop"},
            ],
            "tool_choice": {"type": "function", "name": "shell"},
            "parallel_tool_calls": False,
            "max_output_tokens": 64,
            "temperature": 0.5,
            "top_p": 1,
            "store": False,
            "include": [],
            "reasoning": {"effort": "low"},
        }
    )
    assert body == {
        "messages": [{"role": "user", "content": "hi"}],
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": "shell",
                    "description": "run",
                    "parameters": {"type": "object", "properties": {}},
                },
            },
            {"type": "function", "function": {"name": "noop"}},
        ],
        "tool_choice": {"type": "function", "function": {"name": "shell"}},
        "parallel_tool_calls": False,
        "max_tokens": 64,
        "temperature": 0.5,
        "top_p": 1,
    }


@pytest.mark.parametrize("mode", ["auto", "none", "required"])
def test_tool_choice_modes_pass_through(mode):
    assert engine({"input": "x", "tool_choice": mode})["tool_choice"] == mode


def test_same_history_gives_byte_identical_messages():
    history = {
        "model": "m",
        "instructions": "sys",
        "input": [
            {
                "role": "user",
                "content": [
                    {"type": "input_text", "text": "a"},
                    {"type": "input_text", "text": "b"},
                ],
            },
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c", "output": "r"},
        ],
    }
    first = json.dumps(engine(json.loads(json.dumps(history))))
    second = json.dumps(engine(json.loads(json.dumps(history))))
    assert first == second


def test_rendered_reply_echoed_back_is_the_engine_turn():
    """What the agent resends of our reply rebuilds the assistant turn the engine wrote."""
    echoed = RESPONSES.render(CALLS, CTX)["output"]
    got = messages({"input": [{"role": "user", "content": "go"}, *echoed]})
    assert got[1] == {
        "role": "assistant",
        "content": "Let me look.",
        "tool_calls": [
            {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in CALLS.tool_calls
        ],
    }
    assert len(got) == 2


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"model": "m"}, "input"),
        ({"model": "m", "input": 5}, "input"),
        ({"model": "m", "input": []}, "input"),
        ({"model": "m", "input": ["hi"]}, "input[0]"),
        ({"model": "m", "input": [{"role": "tool", "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"role": ["user"], "content": "x"}]}, "input[0].role"),
        ({"model": "m", "input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
        ({"model": "m", "input": [{"type": "local_shell_call"}]}, "local_shell_call"),
        ({"model": "m", "input": [{"role": "user", "content": 3}]}, "input[0].content"),
        (
            {
                "model": "m",
                "input": [
                    {"role": "user", "content": [{"type": "input_image", "image_url": "data:"}]}
                ],
            },
            "input_image",
        ),
        (
            {"model": "m", "input": [{"role": "user", "content": [{"type": "input_text"}]}]},
            "input[0].content[0].text",
        ),
        (
            {"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]},
            "input[0].call_id",
        ),
        (
            {
                "model": "m",
                "input": [
                    {"type": "function_call", "call_id": "c", "name": "f", "arguments": {"a": 1}}
                ],
            },
            "input[0].arguments",
        ),
        (
            {"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]},
            "input[0].output",
        ),
        (
            {
                "model": "m",
                "input": [
                    {
                        "type": "function_call_output",
                        "call_id": "c",
                        "output": [{"type": "input_file", "file_id": "f"}],
                    }
                ],
            },
            "input_file",
        ),
        ({"model": "m", "input": "x", "tools": [{"name": "f"}]}, "tools[0].type"),
        (
            {"model": "m", "input": "x", "tools": [{"type": "namespace", "name": "n"}]},
            "tools[0].tools",
        ),
        (
            {
                "model": "m",
                "input": "x",
                "tools": [
                    {"type": "function", "name": "f"},
                    {
                        "type": "namespace",
                        "name": "n",
                        "tools": [{"type": "function", "name": "f"}],
                    },
                ],
            },
            "tools[1].tools[0].name 'f' is also the name of tools[0]",
        ),
        ({"model": "m", "input": "x", "tools": {"type": "function"}}, "tools"),
        ({"model": "m", "input": "x", "tools": [{"type": "function"}]}, "tools[0].name"),
        (
            {
                "model": "m",
                "input": "x",
                "tools": [{"type": "function", "name": "f", "parameters": "{}"}],
            },
            "tools[0].parameters",
        ),
        ({"model": "m", "input": "x", "tool_choice": "any"}, "tool_choice"),
        ({"model": "m", "input": "x", "tool_choice": {"type": "web_search"}}, "tool_choice"),
        ({"model": "m", "input": "x", "temperature": "hot"}, "temperature"),
        ({"model": "m", "input": "x", "max_output_tokens": True}, "max_output_tokens"),
        ({"model": "m", "input": "x", "max_output_tokens": 1.5}, "max_output_tokens"),
        ({"model": "m", "input": "x", "parallel_tool_calls": "yes"}, "parallel_tool_calls"),
        ({"model": "m", "input": "x", "stream": "true"}, "stream"),
        ({"model": 3, "input": "x"}, "model"),
        ({"model": "m", "input": "x", "instructions": ["a"]}, "instructions"),
        ({"model": "m", "input": "x", "previous_response_id": "resp_1"}, "previous_response_id"),
    ],
)
def test_malformed_requests_name_the_field(body, field):
    with pytest.raises(AgentRequestError) as caught:
        engine(body)
    assert field in caught.value.message
    assert caught.value.status == 400


# --- reply ---------------------------------------------------------------------------


def test_render_text():
    doc = RESPONSES.render(TEXT, CTX)
    parsed = Response.model_validate(doc)
    assert parsed.id == "resp_abc" and parsed.model == "agent-model"
    assert parsed.created_at == 1_700_000_000
    assert parsed.status == "completed" and parsed.incomplete_details is None
    assert parsed.output_text == "Hello there."
    assert doc["output"] == [
        {
            "type": "message",
            "id": "msg_abc",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "Hello there.", "annotations": []}],
        }
    ]
    assert doc["usage"] == {
        "input_tokens": 11,
        "output_tokens": 4,
        "total_tokens": 15,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens_details": {"reasoning_tokens": 0},
    }


def test_render_reasoning_text_and_tool_calls_in_order():
    doc = RESPONSES.render(CALLS, CTX)
    Response.model_validate(doc)
    assert [item["type"] for item in doc["output"]] == [
        "reasoning",
        "message",
        "function_call",
        "function_call",
    ]
    assert doc["output"][0]["summary"] == [
        {"type": "summary_text", "text": "The user wants a listing."}
    ]
    assert doc["output"][2:] == [
        {
            "type": "function_call",
            "id": "fc_abc_0",
            "call_id": "call_1",
            "name": "shell",
            "arguments": '{"cmd": "ls"}',
            "status": "completed",
        },
        {
            "type": "function_call",
            "id": "fc_abc_1",
            "call_id": "call_2",
            "name": "read",
            "arguments": '{"path": "a.txt"}',
            "status": "completed",
        },
    ]
    assert doc["status"] == "completed"


def test_render_tool_calls_without_text_have_no_message_item():
    only_call = Completion(text="", finish_reason="tool_calls", tool_calls=CALLS.tool_calls[:1])
    assert [i["type"] for i in RESPONSES.render(only_call, CTX)["output"]] == ["function_call"]


@pytest.mark.parametrize(
    ("completion", "reason"),
    [
        (TRUNCATED, "max_output_tokens"),
        (Completion(text="no", finish_reason="content_filter"), "content_filter"),
    ],
)
def test_render_incomplete(completion, reason):
    doc = RESPONSES.render(completion, CTX)
    parsed = Response.model_validate(doc)
    assert parsed.status == "incomplete"
    assert parsed.incomplete_details is not None
    assert parsed.incomplete_details.reason == reason
    assert doc["output"][0]["status"] == "incomplete"


def test_render_is_deterministic():
    assert json.dumps(RESPONSES.render(CALLS, CTX)) == json.dumps(RESPONSES.render(CALLS, CTX))


# --- stream --------------------------------------------------------------------------


def frames(completion: Completion) -> list[tuple[str, dict[str, Any]]]:
    """Each SSE frame as (event name, data), checked to be well-formed on the way."""
    out = []
    for frame in RESPONSES.render_stream(completion, CTX):
        text = frame.decode()
        assert text.endswith("\n\n")
        head, data = text[:-2].split("\n")
        assert head.startswith("event: ") and data.startswith("data: ")
        out.append((head.removeprefix("event: "), json.loads(data.removeprefix("data: "))))
    return out


@pytest.mark.parametrize("completion", [TEXT, CALLS, TRUNCATED])
def test_stream_events_are_valid_sdk_events_in_order(completion):
    events = frames(completion)
    for name, data in events:
        assert name == data["type"]
        STREAM_EVENT.validate_python(data)
    assert [data["sequence_number"] for _, data in events] == list(range(len(events)))
    assert [name for name, _ in events[:2]] == ["response.created", "response.in_progress"]
    assert events[0][1]["response"]["status"] == "in_progress"
    final = Response.model_validate(events[-1][1]["response"])
    assert final == Response.model_validate(RESPONSES.render(completion, CTX))


def test_stream_event_sequence_for_every_item_kind():
    assert [name for name, _ in frames(CALLS)] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]


def test_stream_on_length_ends_incomplete():
    name, data = frames(TRUNCATED)[-1]
    assert name == "response.incomplete"
    assert data["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def sdk_client(reply: httpx.Response) -> openai.OpenAI:
    transport = httpx.MockTransport(lambda request: reply)
    return openai.OpenAI(
        api_key="k",
        base_url="http://127.0.0.1/v1",
        max_retries=0,
        http_client=httpx.Client(transport=transport),
    )


def sse_reply(completion: Completion) -> httpx.Response:
    body = b"".join(RESPONSES.render_stream(completion, CTX))
    return httpx.Response(200, content=body, headers={"content-type": "text/event-stream"})


@pytest.mark.parametrize("completion", [TEXT, CALLS])
def test_sdk_stream_accumulator_rebuilds_the_completion(completion):
    client = sdk_client(sse_reply(completion))
    with client.responses.stream(model="agent-model", input="hi") as stream:
        deltas = "".join(e.delta for e in stream if e.type == "response.output_text.delta")
        final = stream.get_final_response()
    assert deltas == completion.text
    assert final.output_text == completion.text
    calls = [(o.call_id, o.name, o.arguments) for o in final.output if o.type == "function_call"]
    assert calls == [(c.id, c.name, c.arguments) for c in completion.tool_calls]
    reasoning = [s.text for o in final.output if o.type == "reasoning" for s in o.summary]
    assert reasoning == ([completion.reasoning] if completion.reasoning else [])
    assert final.usage is not None
    assert final.usage.input_tokens == completion.prompt_tokens
    assert final.usage.output_tokens == completion.completion_tokens


def test_sdk_raw_stream_reads_an_incomplete_reply():
    client = sdk_client(sse_reply(TRUNCATED))
    events = list(client.responses.create(model="agent-model", input="hi", stream=True))
    assert events[-1].type == "response.incomplete"
    assert events[-1].response.output_text == TRUNCATED.text


def test_sdk_reads_the_plain_reply():
    client = sdk_client(httpx.Response(200, json=RESPONSES.render(CALLS, CTX)))
    reply = client.responses.create(model="agent-model", input="hi")
    assert reply.output_text == CALLS.text
    assert [o.call_id for o in reply.output if o.type == "function_call"] == ["call_1", "call_2"]


# --- errors and aux ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "status", "error_class", "error_type"),
    [
        ("invalid_request", 400, openai.BadRequestError, "invalid_request_error"),
        ("authentication", 401, openai.AuthenticationError, "authentication_error"),
        ("engine", 502, openai.InternalServerError, "server_error"),
        ("overloaded", 429, openai.RateLimitError, "rate_limit_error"),
    ],
)
def test_error_body_is_what_the_sdk_raises(kind, status, error_class, error_type):
    body = RESPONSES.error_body(status, "nope", kind)
    assert body == {"error": {"message": "nope", "type": error_type, "code": None, "param": None}}
    client = sdk_client(httpx.Response(status, json=body))
    with pytest.raises(error_class) as caught:
        client.responses.create(model="m", input="hi")
    assert caught.value.message == f"Error code: {status} - nope"
    assert caught.value.type == error_type


def test_error_event_is_a_valid_event_the_sdk_raises():
    frame = RESPONSES.error_event(502, "engine down", "engine")
    assert frame.startswith(b"event: error\ndata: ")
    data = json.loads(frame.decode().split("data: ", 1)[1])
    event = STREAM_EVENT.validate_python(data)
    assert event.type == "error" and event.message == "engine down"
    client = sdk_client(
        httpx.Response(200, content=frame, headers={"content-type": "text/event-stream"})
    )
    with pytest.raises(openai.APIError) as caught:
        list(client.responses.create(model="m", input="hi", stream=True))
    assert caught.value.message == "engine down"
    assert caught.value.type == "server_error"


def test_count_tokens_reply():
    assert RESPONSES.count_tokens_reply(42) == {
        "object": "response.input_tokens",
        "input_tokens": 42,
    }


def test_namespace_functions_reach_the_engine_and_other_tools_are_left_out():
    call = RESPONSES.to_engine(
        {
            "input": "x",
            "tools": [
                {"type": "function", "name": "shell"},
                {
                    "type": "namespace",
                    "name": "agents",
                    "description": "sub-agents",
                    "tools": [
                        {"type": "function", "name": "spawn", "parameters": {"type": "object"}},
                        {"type": "web_search"},
                    ],
                },
                {"type": "web_search", "external_web_access": False},
                {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}},
                {"type": "local_shell"},
                {"type": "mcp", "server_label": "docs", "server_url": "http://x"},
            ],
        },
        url_model=None,
        url_stream=False,
    )
    assert call.body["tools"] == [
        {"type": "function", "function": {"name": "shell"}},
        {"type": "function", "function": {"name": "spawn", "parameters": {"type": "object"}}},
    ]
    assert call.tool_namespaces == (("spawn", "agents"),)
    assert call.not_forwarded == (
        "tools[1].tools[1] (web_search)",
        "tools[2] (web_search)",
        "tools[3] (custom 'apply_patch')",
        "tools[4] (local_shell)",
        "tools[5] (mcp 'docs')",
    )


def test_a_call_of_a_namespaced_function_names_its_namespace():
    ctx = ReplyContext(
        response_id="resp_1", created=0, model="m", tool_namespaces=(("read", "files"),)
    )
    calls = [
        item for item in RESPONSES.render(CALLS, ctx)["output"] if item["type"] == "function_call"
    ]
    assert [(c["name"], c.get("namespace")) for c in calls] == [("shell", None), ("read", "files")]
    # As history, the call is the engine's function of that name again.
    history = messages(
        {
            "input": [
                {"type": "message", "role": "user", "content": "x"},
                calls[1],
                {"type": "function_call_output", "call_id": "call_2", "output": "ok"},
            ]
        }
    )
    assert history[1]["tool_calls"][0]["function"]["name"] == "read"


def test_when_every_tool_is_left_out_the_engine_gets_no_tool_fields():
    # vLLM answers 400 to `tools: []`.
    call = RESPONSES.to_engine(
        {
            "input": "x",
            "tools": [{"type": "web_search"}],
            "tool_choice": "auto",
            "parallel_tool_calls": True,
        },
        url_model=None,
        url_stream=False,
    )
    payload = engine_body(call, "served")
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(payload)
