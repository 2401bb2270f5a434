"""Google generateContent (Gemini API): `contents` of parts in, GenerateContentResponse out.

The model and streaming are named by the URL, never by the body; camelCase and
snake_case field names are both accepted (both spellings in one object are refused).
Every translation is a pure function of the request, so the same history gives
byte-identical engine messages. What is ignored, left out or refused, and how parts
and function calls are translated: docs/proxy.md, "Google".
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from harbor_ray.capture.core.completion import Completion, FinishReason
from harbor_ray.capture.core.dialects.base import (
    DialectName,
    EngineCall,
    ErrorKind,
    ReplyContext,
    loads_arguments,
    require_dict,
    require_list,
)
from harbor_ray.capture.core.dialects.google_fields import (
    read_camel,
    read_name,
    read_text,
    read_tools,
)
from harbor_ray.capture.core.sse import sse_event
from harbor_ray.errors import AgentRequestError

# Keys of a Part that carry content the engine reads; exactly one per part.
_PART_CONTENT = ("text", "functionCall", "functionResponse")
# Keys of a Part that only annotate it. A thought signature is opaque to the engine.
_PART_METADATA = frozenset(
    {"thought", "thoughtSignature", "partMetadata", "videoMetadata", "mediaResolution"}
)

# generationConfig fields that become engine sampling fields: (engine name, integer?).
_SAMPLING: dict[str, tuple[str, bool]] = {
    "maxOutputTokens": ("max_tokens", True),
    "temperature": ("temperature", False),
    "topP": ("top_p", False),
    # The SDK types topK as a float; the engine wants an integer.
    "topK": ("top_k", True),
    "seed": ("seed", True),
    "presencePenalty": ("presence_penalty", False),
    "frequencyPenalty": ("frequency_penalty", False),
}

_FINISH: dict[FinishReason, str] = {
    "stop": "STOP",
    "length": "MAX_TOKENS",
    "tool_calls": "STOP",  # Gemini has no tool-call finish: the calls are the parts
    "content_filter": "SAFETY",
}

_STATUS: dict[ErrorKind, str] = {
    "invalid_request": "INVALID_ARGUMENT",
    "authentication": "UNAUTHENTICATED",
    "not_found": "NOT_FOUND",
    "too_large": "INVALID_ARGUMENT",
    "engine": "UNAVAILABLE",
    "overloaded": "RESOURCE_EXHAUSTED",
    "rate_limited": "RESOURCE_EXHAUSTED",
}


class GoogleDialect:
    name: DialectName = "google"
    # Gemini's API sends no SSE comments, and antigravity-sdk's Go harness (0.1.22)
    # fails the stream on one ("invalid stream chunk: : keepalive"): nothing is sent
    # until the reply.
    keepalive = b""

    def to_engine(
        self, body: dict[str, Any], *, url_model: str | None, url_stream: bool
    ) -> EngineCall:
        request = read_camel(body, "request")
        if "cachedContent" in request:
            raise AgentRequestError(
                "cachedContent is not supported: the proxy cannot read its text"
            )
        messages = _system(request.get("systemInstruction")) + _messages(request.get("contents"))
        engine: dict[str, Any] = {"messages": messages}
        left_out: list[str] = []
        engine.update(read_tools(request.get("tools"), request.get("toolConfig"), left_out))
        engine.update(_sampling(request.get("generationConfig")))
        return EngineCall(
            body=engine,
            stream=url_stream,
            request_model=url_model or "",
            not_forwarded=tuple(left_out),
        )

    def render(self, completion: Completion, ctx: ReplyContext) -> dict[str, Any]:
        parts = [part for group in _part_groups(completion) for part in group]
        return _response(parts, ctx, completion)

    def render_stream(self, completion: Completion, ctx: ReplyContext) -> Iterator[bytes]:
        # One chunk per kind of part, function calls in a chunk of their own; the last
        # chunk carries finishReason and usage, as Gemini's own streams end.
        groups = _part_groups(completion)
        for i, group in enumerate(groups):
            final = completion if i == len(groups) - 1 else None
            yield sse_event(_response(group, ctx, final))

    def error_body(self, status: int, message: str, kind: ErrorKind) -> dict[str, Any]:
        return {"error": {"code": status, "message": message, "status": _STATUS[kind]}}

    def error_event(self, status: int, message: str, kind: ErrorKind) -> bytes:
        # The SDK raises APIError on a stream chunk that starts with {"error":.
        return sse_event(self.error_body(status, message, kind))

    def count_tokens_reply(self, count: int) -> dict[str, Any]:
        return {"totalTokens": count}


GOOGLE = GoogleDialect()


def count_tokens_call(body: dict[str, Any], url_model: str | None) -> EngineCall:
    """The engine call whose prompt a `:countTokens` request asks to count.

    The body is either a bare `{contents, ...}` or `{generateContentRequest: {...}}`;
    both are translated exactly as generateContent would be, so the count matches the
    prompt the engine would see.
    """
    request = read_camel(body, "request")
    inner = request.get("generateContentRequest")
    if inner is None:
        return GOOGLE.to_engine(request, url_model=url_model, url_stream=False)
    if "contents" in request:
        raise AgentRequestError("send either contents or generateContentRequest, not both")
    return GOOGLE.to_engine(
        require_dict(inner, "generateContentRequest"), url_model=url_model, url_stream=False
    )


# ---- request -------------------------------------------------------------------------


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


@dataclass(frozen=True)
class _Call:
    id: str | None
    name: str
    arguments: str


@dataclass(frozen=True)
class _Reply:
    id: str | None
    name: str
    content: str


_Part = str | _Call | _Reply


def _part(value: Any, what: str) -> _Part | None:
    """A part's content, or None for a part the engine never sees (thoughts, bare metadata)."""
    part = read_camel(value, what)
    for key in part:
        if key not in _PART_CONTENT and key not in _PART_METADATA:
            raise AgentRequestError(
                f"{what}.{key} is not supported: the engine takes text and function calls only"
            )
    present = [key for key in _PART_CONTENT if key in part]
    if len(present) > 1:
        raise AgentRequestError(f"{what} must hold one of {', '.join(_PART_CONTENT)}, not several")
    thought = part.get("thought", False)
    if not isinstance(thought, bool):
        raise AgentRequestError(f"{what}.thought must be a boolean")
    if thought or not present:
        return None
    key = present[0]
    if key == "text":
        return read_text(part["text"], f"{what}.text")
    body = read_camel(part[key], f"{what}.{key}")
    name = read_name(body.get("name"), f"{what}.{key}.name")
    call_id = body.get("id")
    if call_id is not None and not isinstance(call_id, str):
        raise AgentRequestError(f"{what}.{key}.id must be a string")
    if key == "functionCall":
        args = require_dict(body.get("args", {}), f"{what}.functionCall.args")
        return _Call(call_id or None, name, _compact(args))
    response = require_dict(body.get("response"), f"{what}.functionResponse.response")
    return _Reply(call_id or None, name, _compact(response))


def _parts(content: dict[str, Any], what: str) -> list[tuple[int, _Part]]:
    """The engine-visible parts of a content, each with its index in `parts`."""
    parts = require_list(content.get("parts"), f"{what}.parts")
    found = ((j, _part(p, f"{what}.parts[{j}]")) for j, p in enumerate(parts))
    return [(j, part) for j, part in found if part is not None]


def _system(value: Any) -> list[dict[str, Any]]:
    if value is None:
        return []
    texts = []
    for j, part in _parts(read_camel(value, "systemInstruction"), "systemInstruction"):
        if not isinstance(part, str):
            raise AgentRequestError(f"systemInstruction.parts[{j}] must be a text part")
        texts.append(part)
    return [{"role": "system", "content": "".join(texts)}]


def _messages(value: Any) -> list[dict[str, Any]]:
    contents = require_list(value, "contents")
    if not contents:
        raise AgentRequestError("contents must not be empty")
    # Calls not yet answered, in order, for matching functionResponses that have no id.
    pending: list[tuple[str, str]] = []
    messages: list[dict[str, Any]] = []
    for i, raw in enumerate(contents):
        what = f"contents[{i}]"
        content = read_camel(raw, what)
        # The API lets a lone content omit its role; it is then the user's. "function"
        # is the role older Gemini clients put on function responses.
        role = content.get("role", "user")
        parts = _parts(content, what)
        if role == "model" and parts and all(isinstance(p, _Reply) for _, p in parts):
            # antigravity-sdk 0.1.22's harness sends its function responses under the
            # model's role, in a content of their own: the results of the calls before
            # them, as under "user". Mixed with the model's own parts they stay refused.
            messages.extend(_user(parts, i, what, pending))
        elif role == "model":
            messages.append(_assistant(parts, i, what, pending))
        elif role in ("user", "function"):
            messages.extend(_user(parts, i, what, pending))
        else:
            raise AgentRequestError(f"{what}.role must be 'user' or 'model'")
    return messages


def _assistant(
    parts: list[tuple[int, _Part]], i: int, what: str, pending: list[tuple[str, str]]
) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, part in parts:
        if isinstance(part, _Reply):
            raise AgentRequestError(
                f"{what}.parts[{j}]: a functionResponse belongs to a user content"
            )
        if isinstance(part, str):
            texts.append(part)
            continue
        call_id = part.id or f"call_{i}_{j}"
        pending.append((call_id, part.name))
        calls.append(
            {
                "id": call_id,
                "type": "function",
                "function": {"name": part.name, "arguments": part.arguments},
            }
        )
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
    }
    if calls:
        message["tool_calls"] = calls
    return message


def _user(
    parts: list[tuple[int, _Part]], i: int, what: str, pending: list[tuple[str, str]]
) -> list[dict[str, Any]]:
    """Consecutive text parts become one user message; each response one tool message."""
    messages: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, part in parts:
        if isinstance(part, _Call):
            raise AgentRequestError(f"{what}.parts[{j}]: a functionCall belongs to a model content")
        if isinstance(part, str):
            texts.append(part)
            continue
        if texts:
            messages.append({"role": "user", "content": "".join(texts)})
            texts = []
        messages.append(
            {"role": "tool", "tool_call_id": _answer(part, i, j, pending), "content": part.content}
        )
    if texts or not messages:
        messages.append({"role": "user", "content": "".join(texts)})
    return messages


def _answer(reply: _Reply, i: int, j: int, pending: list[tuple[str, str]]) -> str:
    """The id of the call a functionResponse answers, and that call marked answered.

    A response that matches no earlier call (a history the agent trimmed) keeps its own
    id, or one from its position, rather than failing the agent's loop.
    """
    for k, (call_id, name) in enumerate(pending):
        if call_id == reply.id or (reply.id is None and name == reply.name):
            del pending[k]
            return call_id
    return reply.id or f"call_{i}_{j}"


def _sampling(value: Any) -> dict[str, Any]:
    if value is None:
        return {}
    config = read_camel(value, "generationConfig")
    out: dict[str, Any] = {}
    for key, (engine_key, integer) in _SAMPLING.items():
        if config.get(key) is not None:
            out[engine_key] = _number(config[key], f"generationConfig.{key}", integer)
    if config.get("stopSequences") is not None:
        stops = require_list(config["stopSequences"], "generationConfig.stopSequences")
        out["stop"] = [
            read_text(s, f"generationConfig.stopSequences[{k}]") for k, s in enumerate(stops)
        ]
    count = config.get("candidateCount")
    if count is not None and _number(count, "generationConfig.candidateCount", True) > 1:
        raise AgentRequestError(
            "generationConfig.candidateCount > 1 is not supported: each model "
            "call must be one recorded turn; send separate requests instead"
        )
    return out


def _number(value: Any, what: str, integer: bool) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise AgentRequestError(f"{what} must be a number")
    if not integer:
        return value
    if value != int(value):
        raise AgentRequestError(f"{what} must be an integer")
    return int(value)


# ---- response ------------------------------------------------------------------------


def _part_groups(completion: Completion) -> list[list[dict[str, Any]]]:
    """The reply's parts, grouped as they are streamed: thought, text, function calls.

    A text part is always present unless the model only called functions, so a reply
    has content even when the model wrote nothing.
    """
    groups: list[list[dict[str, Any]]] = []
    if completion.reasoning:
        groups.append([{"text": completion.reasoning, "thought": True}])
    if completion.text or not completion.tool_calls:
        groups.append([{"text": completion.text}])
    if completion.tool_calls:
        # Gemini's args is an object; invalid or non-object JSON is rendered as {}.
        groups.append(
            [
                {
                    "functionCall": {
                        "id": call.id,
                        "name": call.name,
                        "args": loads_arguments(call.arguments),
                    }
                }
                for call in completion.tool_calls
            ]
        )
    return groups


def _response(
    parts: list[dict[str, Any]], ctx: ReplyContext, final: Completion | None
) -> dict[str, Any]:
    """One GenerateContentResponse; `final` adds the finish reason and usage."""
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}}
    if final is not None:
        candidate["finishReason"] = _FINISH[final.finish_reason]
    candidate["index"] = 0
    response: dict[str, Any] = {"candidates": [candidate]}
    if final is not None:
        response["usageMetadata"] = {
            "promptTokenCount": final.prompt_tokens,
            "candidatesTokenCount": final.completion_tokens,
            "totalTokenCount": final.prompt_tokens + final.completion_tokens,
        }
    response["modelVersion"] = ctx.model
    response["responseId"] = ctx.response_id
    return response
