"""OpenAI chat-completions: the engine's own dialect, so translation is nearly identity.

The agent's messages pass through untouched (re-serialising them could change what the
chat template renders, and exact prefix linking depends on byte-identical history);
only the fields the engine must not see are removed, and `normalize.engine_body`
adds model, stream and capture fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harbor_ray.capture.core.completion import Completion
from harbor_ray.capture.core.dialects.base import (
    DialectName,
    EngineCall,
    ErrorKind,
    ReplyContext,
    openai_stream_and_model,
    require_dict,
    require_integer,
    require_list,
    require_number,
    require_string,
)
from harbor_ray.capture.core.sse import KEEPALIVE, sse_event
from harbor_ray.errors import AgentRequestError

# Fields the proxy decides itself; everything else is a sampling setting the engine reads.
_PROXY_FIELDS = frozenset({"model", "stream", "stream_options", "messages"})

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})

ERROR_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    "too_large": "invalid_request_error",
    "engine": "server_error",
    "overloaded": "rate_limit_error",
    "rate_limited": "rate_limit_error",
}


def openai_error_body(message: str, kind: ErrorKind) -> dict[str, Any]:
    """The error document both OpenAI dialects share."""
    return {"error": {"message": message, "type": ERROR_TYPES[kind], "param": None, "code": None}}


class ChatDialect:
    name: DialectName = "chat"
    keepalive = KEEPALIVE

    def to_engine(
        self, body: dict[str, Any], *, url_model: str | None, url_stream: bool
    ) -> EngineCall:
        messages = require_list(body.get("messages"), "messages")
        if not messages:
            raise AgentRequestError("messages must not be empty")
        for i, message in enumerate(messages):
            _check_message(require_dict(message, f"messages[{i}]"), f"messages[{i}]")
        stream, model = openai_stream_and_model(body)
        rest = {k: v for k, v in body.items() if k not in _PROXY_FIELDS}
        _check_fields(rest)
        return EngineCall(body={"messages": messages, **rest}, stream=stream, request_model=model)

    def render(self, completion: Completion, ctx: ReplyContext) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": completion.text or None}
        if completion.tool_calls:
            message["tool_calls"] = _tool_calls(completion)
        if completion.reasoning:
            message["reasoning_content"] = completion.reasoning
        if message["content"] is None and not completion.tool_calls:
            message["content"] = ""
        return {
            "id": ctx.response_id,
            "object": "chat.completion",
            "created": ctx.created,
            "model": ctx.model,
            "choices": [
                {
                    "index": 0,
                    "message": message,
                    "finish_reason": completion.finish_reason,
                    "logprobs": None,
                }
            ],
            "usage": _usage(completion),
        }

    def render_stream(self, completion: Completion, ctx: ReplyContext) -> Iterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse_event(
                {
                    "id": ctx.response_id,
                    "object": "chat.completion.chunk",
                    "created": ctx.created,
                    "model": ctx.model,
                    "choices": [
                        {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
                    ],
                }
            )

        yield chunk({"role": "assistant", "content": ""})
        if completion.reasoning:
            yield chunk({"reasoning_content": completion.reasoning})
        if completion.text:
            yield chunk({"content": completion.text})
        for i, call in enumerate(_tool_calls(completion)):
            yield chunk({"tool_calls": [{"index": i, **call}]})
        yield chunk({}, completion.finish_reason)
        # Usage in a choice-less final chunk, as OpenAI sends it with include_usage.
        yield sse_event(
            {
                "id": ctx.response_id,
                "object": "chat.completion.chunk",
                "created": ctx.created,
                "model": ctx.model,
                "choices": [],
                "usage": _usage(completion),
            }
        )
        yield sse_event("[DONE]")

    def error_body(self, status: int, message: str, kind: ErrorKind) -> dict[str, Any]:
        return openai_error_body(message, kind)

    def error_event(self, status: int, message: str, kind: ErrorKind) -> bytes:
        return sse_event(openai_error_body(message, kind))

    def count_tokens_reply(self, count: int) -> dict[str, Any]:
        return {"object": "token_count", "input_tokens": count}


# The fields the engine reads whose type is known: checked here, so that a wrong one is
# refused as the other dialects refuse theirs (a 4xx, nothing recorded) instead of being
# forwarded, and recorded when the engine lets it pass. Null is OpenAI's "not set".
_NUMBERS = (
    "temperature",
    "top_p",
    "frequency_penalty",
    "presence_penalty",
    "repetition_penalty",
    "min_p",
)
_INTEGERS = {
    "max_tokens": 1,
    "max_completion_tokens": 1,
    "n": 1,
    "top_logprobs": 0,
    "top_k": -1,
    "seed": -(2**63),
}  # name -> smallest value
_TOOL_CHOICES = frozenset({"auto", "none", "required"})


def _check_fields(body: dict[str, Any]) -> None:
    for name in _NUMBERS:
        if body.get(name) is not None:
            require_number(body[name], name)
    for name, minimum in _INTEGERS.items():
        if body.get(name) is not None:
            require_integer(body[name], name, minimum)
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, str):
        for i, item in enumerate(require_list(stop, "stop")):
            require_string(item, f"stop[{i}]")
    if body.get("tools") is not None:
        for i, tool in enumerate(require_list(body["tools"], "tools")):
            _check_tool(require_dict(tool, f"tools[{i}]"), f"tools[{i}]")
    choice = body.get("tool_choice")
    if choice is not None and choice not in _TOOL_CHOICES:
        if not isinstance(choice, dict) or choice.get("type") != "function":
            raise AgentRequestError(
                f"tool_choice must be one of {sorted(_TOOL_CHOICES)} or "
                '{"type": "function", "function": {"name": ...}}'
            )
        require_string(
            require_dict(choice.get("function"), "tool_choice.function").get("name"),
            "tool_choice.function.name",
        )
    if body.get("parallel_tool_calls") is not None and not isinstance(
        body["parallel_tool_calls"], bool
    ):
        raise AgentRequestError("parallel_tool_calls must be a boolean")
    if body.get("response_format") is not None:
        require_dict(body["response_format"], "response_format")


def _check_tool(tool: dict[str, Any], where: str) -> None:
    if tool.get("type") != "function":
        raise AgentRequestError(f"{where}.type must be 'function'")
    function = require_dict(tool.get("function"), f"{where}.function")
    require_string(function.get("name"), f"{where}.function.name")
    if function.get("parameters") is not None:
        require_dict(function["parameters"], f"{where}.function.parameters")


def _check_message(message: dict[str, Any], where: str) -> None:
    role = message.get("role")
    if not isinstance(role, str) or role not in _ROLES:
        raise AgentRequestError(f"{where}.role must be one of {sorted(_ROLES)}")
    content = message.get("content")
    if content is not None and not isinstance(content, str):
        for j, part in enumerate(require_list(content, f"{where}.content")):
            require_string(
                require_dict(part, f"{where}.content[{j}]").get("type"),
                f"{where}.content[{j}].type",
            )
    if message.get("tool_calls") is not None:
        for j, call in enumerate(require_list(message["tool_calls"], f"{where}.tool_calls")):
            function = require_dict(
                require_dict(call, f"{where}.tool_calls[{j}]").get("function"),
                f"{where}.tool_calls[{j}].function",
            )
            require_string(function.get("name"), f"{where}.tool_calls[{j}].function.name")
    for name in ("name", "tool_call_id"):
        if message.get(name) is not None:
            require_string(message[name], f"{where}.{name}")


def _tool_calls(completion: Completion) -> list[dict[str, Any]]:
    return [
        {
            "id": call.id,
            "type": "function",
            "function": {"name": call.name, "arguments": call.arguments},
        }
        for call in completion.tool_calls
    ]


def _usage(completion: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "total_tokens": completion.prompt_tokens + completion.completion_tokens,
    }


CHAT = ChatDialect()
