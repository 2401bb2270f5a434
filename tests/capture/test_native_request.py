"""A chat body in a hosted API's own format, and what each conversion refuses by name."""

from __future__ import annotations

from typing import Any

import pytest

from harbor_ray.capture.core.native_reply import as_chat_completion, listed_models
from harbor_ray.capture.core.native_request import (
    DEFAULT_MAX_TOKENS,
    converted,
    passthrough,
)
from harbor_ray.errors import AgentRequestError, EngineReplyError

CALL = {"id": "c1", "type": "function", "function": {"name": "look", "arguments": '{"at":"x"}'}}
TOOL = {"type": "function", "function": {"name": "look", "parameters": {"type": "object"}}}
CONVERSATION = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "hi"},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "c1", "content": "seen"},
]


def chat(**fields: Any) -> dict[str, Any]:
    return {"model": "served", "stream": False, "messages": CONVERSATION, **fields}


def test_anthropic_gets_messages_with_tool_use_and_results() -> None:
    native = converted(
        "anthropic",
        chat(tools=[TOOL], tool_choice="required", parallel_tool_calls=False, stop="END"),
    )
    assert native.path == "/v1/messages"
    assert native.body == {
        "model": "served",
        "system": "be brief",
        "max_tokens": DEFAULT_MAX_TOKENS,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}]},
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "c1", "name": "look", "input": {"at": "x"}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "seen"}],
            },
        ],
        "stop_sequences": ["END"],
        "tools": [{"name": "look", "description": "", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
    }


def test_google_gets_contents_with_function_parts() -> None:
    native = converted(
        "google",
        chat(
            tools=[TOOL],
            max_tokens=9,
            temperature=0.5,
            tool_choice={"type": "function", "function": {"name": "look"}},
        ),
    )
    assert native.path == "/v1/models/served:generateContent"
    assert native.body["systemInstruction"] == {"parts": [{"text": "be brief"}]}
    assert native.body["contents"][1:] == [
        {
            "role": "model",
            "parts": [{"functionCall": {"id": "c1", "name": "look", "args": {"at": "x"}}}],
        },
        {
            "role": "user",
            "parts": [
                {"functionResponse": {"id": "c1", "name": "look", "response": {"result": "seen"}}}
            ],
        },
    ]
    assert native.body["generationConfig"] == {"temperature": 0.5, "maxOutputTokens": 9}
    assert native.body["toolConfig"] == {
        "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["look"]}
    }


def test_responses_gets_input_items() -> None:
    native = converted("responses", chat(max_tokens=9))
    assert native.path == "/v1/responses"
    assert native.body == {
        "model": "served",
        "instructions": "be brief",
        "store": False,
        "max_output_tokens": 9,
        "input": [
            {"role": "user", "content": "hi"},
            {"type": "function_call", "call_id": "c1", "name": "look", "arguments": '{"at":"x"}'},
            {"type": "function_call_output", "call_id": "c1", "output": "seen"},
        ],
    }


IMAGE = {
    "role": "user",
    "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AA=="}}],
}


@pytest.mark.parametrize(
    ("dialect", "fields", "named"),
    [
        # A content part that is not text (an image, audio, a file).
        ("anthropic", {"messages": [IMAGE]}, "'image_url' part"),
        ("google", {"messages": [IMAGE]}, "'image_url' part"),
        ("responses", {"messages": [IMAGE]}, "'image_url' part"),
        # A system message after the conversation started: each takes instructions first.
        (
            "anthropic",
            {"messages": [*CONVERSATION, {"role": "system", "content": "late"}]},
            "a system message after",
        ),
        # Tool call arguments that are not a JSON object: Messages and Gemini take objects.
        (
            "anthropic",
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [{**CALL, "function": {"name": "look", "arguments": "[1]"}}],
                    }
                ]
            },
            "not a JSON object",
        ),
        (
            "google",
            {
                "messages": [
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {**CALL, "function": {"name": "look", "arguments": "{oops"}}
                        ],
                    }
                ]
            },
            "not JSON",
        ),
        # A tool result Gemini cannot name (its function is in no earlier call).
        (
            "google",
            {"messages": [{"role": "tool", "tool_call_id": "zz", "content": "r"}]},
            "no earlier call",
        ),
        # A tool choice the target lacks: Gemini cannot forbid parallel calls.
        ("google", {"parallel_tool_calls": False}, "parallel_tool_calls"),
        # Parameters the target lacks.
        ("anthropic", {"seed": 1}, "seed"),
        ("anthropic", {"frequency_penalty": 0.5}, "frequency_penalty"),
        ("anthropic", {"response_format": {"type": "json_object"}}, "response_format"),
        ("google", {"logit_bias": {"1": 2}}, "logit_bias"),
        ("responses", {"stop": ["END"]}, "stop"),
        ("responses", {"seed": 1}, "seed"),
    ],
)
def test_what_a_conversion_cannot_carry_is_refused_by_name(
    dialect: str, fields: dict[str, Any], named: str
) -> None:
    with pytest.raises(AgentRequestError, match=named) as refused:
        converted(dialect, chat(**fields))  # type: ignore[arg-type]
    assert refused.value.status == 400
    target = "openai-responses" if dialect == "responses" else dialect
    assert f"the {target} upstream" in refused.value.message


def test_defaults_nulls_and_capture_fields_are_not_refused() -> None:
    native = converted(
        "anthropic", chat(logprobs=False, parallel_tool_calls=True, seed=None, top_logprobs=None)
    )
    assert "seed" not in native.body and "logprobs" not in native.body
    # Harbor's agents ask for logprobs and ids themselves: the proxy never relays them,
    # and what is recorded is the capture level's, so they are not the upstream's.
    asked = converted("responses", chat(logprobs=True, top_logprobs=2, return_token_ids=True))
    assert not {"logprobs", "top_logprobs", "return_token_ids"} & set(asked.body)


def test_passthrough_changes_only_model_stream_and_imposed_sampling() -> None:
    body = {
        "model": "agent",
        "stream": True,
        "max_tokens": 5,
        "metadata": {"u": 1},
        "messages": [{"role": "user", "content": "x"}],
    }
    native = passthrough(
        "anthropic", body, {"model": "served", "temperature": 0.2, "max_tokens": 5}
    )
    assert native.body == {
        "model": "served",
        "max_tokens": 5,
        "metadata": {"u": 1},
        "temperature": 0.2,
        "messages": body["messages"],
    }
    google = passthrough("google", {"contents": []}, {"model": "g", "max_tokens": 3})
    assert google.path == "/v1/models/g:generateContent"
    assert google.body == {"contents": [], "generationConfig": {"maxOutputTokens": 3}}


def test_replies_read_back_as_chat_completions() -> None:
    anthropic = as_chat_completion(
        "anthropic",
        {
            "type": "message",
            "stop_reason": "tool_use",
            "content": [
                {"type": "thinking", "thinking": "hm", "signature": "s"},
                {"type": "text", "text": "ok"},
                {"type": "tool_use", "id": "t1", "name": "look", "input": {"a": 1}},
            ],
            "usage": {"input_tokens": 3, "output_tokens": 4},
        },
        "anthropic",
    )
    assert anthropic["choices"][0] == {
        "index": 0,
        "finish_reason": "tool_calls",
        "message": {
            "role": "assistant",
            "content": "ok",
            "reasoning_content": "hm",
            "tool_calls": [
                {
                    "id": "t1",
                    "type": "function",
                    "function": {"name": "look", "arguments": '{"a":1}'},
                }
            ],
        },
    }
    assert anthropic["usage"]["total_tokens"] == 7
    google = as_chat_completion(
        "google",
        {
            "candidates": [
                {
                    "content": {"parts": [{"text": "a", "thought": True}, {"text": "b"}]},
                    "finishReason": "MAX_TOKENS",
                }
            ],
            "usageMetadata": {"promptTokenCount": 2, "candidatesTokenCount": 1},
        },
        "google",
    )
    assert google["choices"][0]["finish_reason"] == "length"
    assert google["choices"][0]["message"]["content"] == "b"
    responses = as_chat_completion(
        "responses",
        {
            "object": "response",
            "output": [{"type": "message", "content": [{"type": "output_text", "text": "hi"}]}],
            "usage": {"input_tokens": 1, "output_tokens": 1},
        },
        "openai-responses",
    )
    assert responses["choices"][0]["message"]["content"] == "hi"
    assert listed_models("google", {"models": [{"name": "models/g"}]}) == {"data": [{"id": "g"}]}


@pytest.mark.parametrize(
    ("dialect", "profile"),
    [("anthropic", "anthropic"), ("google", "google"), ("responses", "openai-responses")],
)
def test_a_reply_in_another_shape_names_the_profile(dialect: str, profile: str) -> None:
    chat_reply = {"object": "chat.completion", "choices": [{"message": {"content": "x"}}]}
    with pytest.raises(EngineReplyError, match=f"the {profile} upstream"):
        as_chat_completion(dialect, chat_reply, profile)  # type: ignore[arg-type]
