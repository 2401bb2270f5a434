"""OpenAI chat-completions: the engine's own dialect, so translation is nearly identity.

The agent's messages pass through untouched (re-serialising them could change what the
chat template renders, and exact prefix linking depends on byte-identical history);
only the fields the engine must not see are removed, and `normalize.engine_body`
adds model, stream and capture fields.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from harbor_ray.capture.completion import Completion
from harbor_ray.capture.dialects.base import (
    DialectName,
    EngineCall,
    ErrorKind,
    ReplyContext,
    RequestError,
    require_dict,
    require_list,
)
from harbor_ray.capture.sse import sse_event

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
}


def openai_error_body(message: str, kind: ErrorKind) -> dict[str, Any]:
    """The error document both OpenAI dialects share."""
    return {"error": {"message": message, "type": ERROR_TYPES[kind], "param": None, "code": None}}


class ChatDialect:
    name: DialectName = "chat"

    def to_engine(
        self, body: dict[str, Any], *, url_model: str | None, url_stream: bool
    ) -> EngineCall:
        messages = require_list(body.get("messages"), "messages")
        if not messages:
            raise RequestError("messages must not be empty")
        for i, message in enumerate(messages):
            message = require_dict(message, f"messages[{i}]")
            role = message.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise RequestError(f"messages[{i}].role must be one of {sorted(_ROLES)}")
        stream = body.get("stream", False)
        if not isinstance(stream, bool):
            raise RequestError("stream must be a boolean")
        model = body.get("model", "")
        if not isinstance(model, str):
            raise RequestError("model must be a string")
        rest = {k: v for k, v in body.items() if k not in _PROXY_FIELDS}
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
                {"index": 0, "message": message, "finish_reason": completion.finish_reason,
                 "logprobs": None}
            ],
            "usage": _usage(completion),
        }

    def render_stream(self, completion: Completion, ctx: ReplyContext) -> Iterator[bytes]:
        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return sse_event({
                "id": ctx.response_id,
                "object": "chat.completion.chunk",
                "created": ctx.created,
                "model": ctx.model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish,
                             "logprobs": None}],
            })

        yield chunk({"role": "assistant", "content": ""})
        if completion.reasoning:
            yield chunk({"reasoning_content": completion.reasoning})
        if completion.text:
            yield chunk({"content": completion.text})
        for i, call in enumerate(_tool_calls(completion)):
            yield chunk({"tool_calls": [{"index": i, **call}]})
        yield chunk({}, completion.finish_reason)
        # Usage in a choice-less final chunk, as OpenAI sends it with include_usage.
        yield sse_event({
            "id": ctx.response_id,
            "object": "chat.completion.chunk",
            "created": ctx.created,
            "model": ctx.model,
            "choices": [],
            "usage": _usage(completion),
        })
        yield sse_event("[DONE]")

    def error_body(self, status: int, message: str, kind: ErrorKind) -> dict[str, Any]:
        return openai_error_body(message, kind)

    def error_event(self, status: int, message: str, kind: ErrorKind) -> bytes:
        return sse_event(openai_error_body(message, kind))

    def count_tokens_reply(self, count: int) -> dict[str, Any]:
        return {"object": "token_count", "input_tokens": count}


def _tool_calls(completion: Completion) -> list[dict[str, Any]]:
    return [
        {"id": call.id, "type": "function",
         "function": {"name": call.name, "arguments": call.arguments}}
        for call in completion.tool_calls
    ]


def _usage(completion: Completion) -> dict[str, int]:
    return {
        "prompt_tokens": completion.prompt_tokens,
        "completion_tokens": completion.completion_tokens,
        "total_tokens": completion.prompt_tokens + completion.completion_tokens,
    }


CHAT = ChatDialect()
