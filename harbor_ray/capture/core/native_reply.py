"""A hosted upstream's reply, in its own format, as the OpenAI chat completion the rest of
the proxy reads (`completion.parse_engine_reply`) and records.

Hosted APIs return no token ids and (these ones) no logprobs, so what is kept is the
reply's text, reasoning, tool calls, finish reason and usage counts: a `text` capture.
A reply that is not in the profile's shape raises EngineReplyError naming the profile.
"""

from __future__ import annotations

import json
from typing import Any

from harbor_ray.capture.core.dialects.base import DialectName
from harbor_ray.errors import EngineReplyError

__all__ = ["as_chat_completion", "listed_models"]

_ANTHROPIC_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
    "pause_turn": "stop",
    "model_context_window_exceeded": "length",
}
_GOOGLE_FINISH = {"STOP": "stop", "MAX_TOKENS": "length"}  # any other: content_filter


def as_chat_completion(dialect: DialectName, reply: dict[str, Any], profile: str) -> dict[str, Any]:
    """`reply` (from an upstream speaking `dialect`) as a chat completion."""
    try:
        if dialect == "anthropic":
            message, finish, usage = _anthropic(reply)
        elif dialect == "google":
            message, finish, usage = _google(reply)
        elif dialect == "responses":
            message, finish, usage = _responses(reply)
        else:
            return reply
    except (KeyError, IndexError, TypeError, AttributeError) as exc:
        raise EngineReplyError(
            f"the {profile} upstream answered a reply that is not in its "
            f"API's shape ({type(exc).__name__}: {exc})"
        ) from exc
    return {
        "object": "chat.completion",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": int(usage[0] or 0),
            "completion_tokens": int(usage[1] or 0),
            "total_tokens": int(usage[0] or 0) + int(usage[1] or 0),
        },
    }


def listed_models(dialect: DialectName, reply: dict[str, Any]) -> dict[str, Any]:
    """A model listing in the OpenAI shape (`data[].id`); Google's names drop `models/`."""
    if dialect == "google":
        return {
            "data": [
                {"id": str(m["name"]).removeprefix("models/")} for m in reply.get("models") or []
            ]
        }
    return {"data": [{"id": str(m["id"])} for m in reply.get("data") or []]}


def _message(texts: list[str], reasoning: list[str], calls: list[dict[str, Any]]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) or None}
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    return message


def _call(call_id: str, name: str, arguments: Any) -> dict[str, Any]:
    text = (
        arguments
        if isinstance(arguments, str)
        else json.dumps(arguments, separators=(",", ":"), ensure_ascii=False)
    )
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def _anthropic(reply: dict[str, Any]) -> tuple[dict[str, Any], str, tuple[Any, Any]]:
    if reply["type"] != "message":
        raise EngineReplyError(
            f"the anthropic upstream answered type {reply['type']!r}, not a 'message'"
        )
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in reply["content"]:
        if block["type"] == "text":
            texts.append(block["text"])
        elif block["type"] == "thinking":
            reasoning.append(block["thinking"])
        elif block["type"] == "tool_use":
            calls.append(_call(block["id"], block["name"], block["input"]))
    usage = reply["usage"]
    finish = _ANTHROPIC_FINISH.get(reply.get("stop_reason") or "end_turn", "stop")
    return (
        _message(texts, reasoning, calls),
        finish,
        (usage["input_tokens"], usage["output_tokens"]),
    )


def _google(reply: dict[str, Any]) -> tuple[dict[str, Any], str, tuple[Any, Any]]:
    candidate = reply["candidates"][0]
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for i, part in enumerate((candidate.get("content") or {}).get("parts") or []):
        if "functionCall" in part:
            call = part["functionCall"]
            calls.append(_call(call.get("id") or f"call_{i}", call["name"], call.get("args") or {}))
        elif "text" in part:
            (reasoning if part.get("thought") else texts).append(part["text"])
    usage = reply.get("usageMetadata") or {}
    reason = candidate.get("finishReason") or "STOP"
    finish = _GOOGLE_FINISH.get(reason, "content_filter")
    return (
        _message(texts, reasoning, calls),
        finish,
        (usage.get("promptTokenCount"), usage.get("candidatesTokenCount")),
    )


def _responses(reply: dict[str, Any]) -> tuple[dict[str, Any], str, tuple[Any, Any]]:
    if reply["object"] != "response":
        raise EngineReplyError(
            f"the openai-responses upstream answered object {reply['object']!r}, not a 'response'"
        )
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in reply["output"]:
        if item["type"] == "message":
            texts.extend(part["text"] for part in item["content"] if part["type"] == "output_text")
        elif item["type"] == "reasoning":
            reasoning.extend(part["text"] for part in item.get("summary") or [])
        elif item["type"] == "function_call":
            calls.append(_call(item["call_id"], item["name"], item["arguments"]))
    incomplete = (reply.get("incomplete_details") or {}).get("reason")
    finish = (
        "length"
        if incomplete == "max_output_tokens"
        else ("content_filter" if incomplete else "stop")
    )
    usage = reply.get("usage") or {}
    return (
        _message(texts, reasoning, calls),
        finish,
        (usage.get("input_tokens"), usage.get("output_tokens")),
    )
