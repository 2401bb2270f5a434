"""Anthropic Messages (`/v1/messages`): content blocks in, content blocks out.

Requests are flattened into OpenAI chat messages for the engine. Exact prefix linking
of turns needs the same history to give byte-identical messages every time, so every
choice here is fixed: text parts are joined with "\\n" (as vLLM joins a chat message's
text parts, so the same words reach the chat template whichever dialect carried them),
tool inputs are re-serialised compactly in the key order the agent sent, and a user
message's tool results come first, in order, because chat templates expect tool
messages right after the assistant message that called the tools.

Replies are content blocks (thinking, text, tool_use); a streamed reply is the full
event sequence the real API sends, so the official SDK's accumulator rebuilds exactly
the message `render` returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from harbor_ray.capture.core.completion import Completion, FinishReason
from harbor_ray.capture.core.dialects.base import (
    DialectName,
    EngineCall,
    ErrorKind,
    ReplyContext,
    loads_arguments,
    require_dict,
    require_integer,
    require_list,
    require_number,
    require_string,
)
from harbor_ray.capture.core.sse import KEEPALIVE, sse_event
from harbor_ray.errors import AgentRequestError

_JOIN = "\n"

ERROR_TYPES: dict[ErrorKind, str] = {
    "invalid_request": "invalid_request_error",
    "authentication": "authentication_error",
    "not_found": "not_found_error",
    "too_large": "request_too_large",
    "engine": "api_error",
    "overloaded": "overloaded_error",
    "rate_limited": "rate_limit_error",
}

_STOP_REASONS: dict[FinishReason, str] = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "content_filter": "refusal",
}

_TOOL_CHOICES = {"auto": "auto", "any": "required", "none": "none"}

# Earlier turns' reasoning is not part of the prompt: the real API strips it too, and
# its signature is opaque to the engine.
_DROPPED_BLOCKS = frozenset({"thinking", "redacted_thinking"})

# Blocks a text-only engine cannot read; in a tool result they are left out, not refused.
_MEDIA_BLOCKS = frozenset({"image", "document"})

# Sampling fields copied to the engine body: Anthropic name -> chat name.
_SAMPLING = {"temperature": "temperature", "top_p": "top_p", "top_k": "top_k"}


class AnthropicDialect:
    name: DialectName = "anthropic"
    keepalive = KEEPALIVE

    def to_engine(
        self, body: dict[str, Any], *, url_model: str | None, url_stream: bool
    ) -> EngineCall:
        if require_dict(body, "request body").get("max_tokens") is None:
            raise AgentRequestError("max_tokens is required")
        return _engine_call(body)

    def render(self, completion: Completion, ctx: ReplyContext) -> dict[str, Any]:
        return {
            "id": ctx.response_id,
            "type": "message",
            "role": "assistant",
            "model": ctx.model,
            "content": _content(completion),
            "stop_reason": _stop_reason(completion),
            "stop_sequence": None,
            "usage": {
                "input_tokens": completion.prompt_tokens,
                "output_tokens": completion.completion_tokens,
            },
        }

    def render_stream(self, completion: Completion, ctx: ReplyContext) -> Iterator[bytes]:
        # Derived from `render` so that a streamed and a plain reply can never disagree.
        reply = self.render(completion, ctx)
        start = {
            **reply,
            "content": [],
            "stop_reason": None,
            # Nothing is generated yet; message_delta carries the final count.
            "usage": {"input_tokens": completion.prompt_tokens, "output_tokens": 0},
        }
        yield _event({"type": "message_start", "message": start})
        yield _event({"type": "ping"})
        for index, block in enumerate(reply["content"]):
            empty, deltas = _block_events(block)
            yield _event({"type": "content_block_start", "index": index, "content_block": empty})
            for delta in deltas:
                yield _event({"type": "content_block_delta", "index": index, "delta": delta})
            yield _event({"type": "content_block_stop", "index": index})
        yield _event(
            {
                "type": "message_delta",
                "delta": {"stop_reason": reply["stop_reason"], "stop_sequence": None},
                "usage": {"output_tokens": completion.completion_tokens},
            }
        )
        yield _event({"type": "message_stop"})

    def error_body(self, status: int, message: str, kind: ErrorKind) -> dict[str, Any]:
        return {"type": "error", "error": {"type": ERROR_TYPES[kind], "message": message}}

    def error_event(self, status: int, message: str, kind: ErrorKind) -> bytes:
        return sse_event(self.error_body(status, message, kind), event="error")

    def count_tokens_reply(self, count: int) -> dict[str, Any]:
        return {"input_tokens": count}


def count_tokens_call(body: dict[str, Any]) -> EngineCall:
    """The engine call for `/v1/messages/count_tokens`.

    That route sends a Messages body without `max_tokens`; counting must tokenise the
    prompt exactly as the real call would, so it shares the whole translation and only
    drops the one requirement.
    """
    return _engine_call(require_dict(body, "request body"))


def _engine_call(body: dict[str, Any]) -> EngineCall:
    model = body.get("model", "")
    if not isinstance(model, str):
        raise AgentRequestError("model must be a string")
    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise AgentRequestError("stream must be a boolean")

    left_out: list[str] = []
    engine: dict[str, Any] = {"messages": _messages(body, left_out)}
    if body.get("tools") is not None:
        engine["tools"] = _tools(body["tools"], left_out)
    if "tool_choice" in body:
        engine.update(_tool_choice(body["tool_choice"]))
    if body.get("max_tokens") is not None:
        engine["max_tokens"] = require_integer(body["max_tokens"], "max_tokens", minimum=1)
    for name, engine_name in _SAMPLING.items():
        if body.get(name) is not None:
            check = require_integer if name == "top_k" else require_number
            engine[engine_name] = check(body[name], name)
    if body.get("stop_sequences") is not None:
        engine["stop"] = [
            require_string(s, f"stop_sequences[{i}]")
            for i, s in enumerate(require_list(body["stop_sequences"], "stop_sequences"))
        ]
    return EngineCall(
        body=engine, stream=stream, request_model=model, not_forwarded=tuple(left_out)
    )


def _messages(body: dict[str, Any], left_out: list[str]) -> list[dict[str, Any]]:
    """The chat history, system prompt first; see `_SystemFold` for `system` messages."""
    system = body.get("system")
    prompt = [] if system is None else [_joined_text(system, "system")]
    messages = require_list(body.get("messages"), "messages")
    if not messages:
        raise AgentRequestError("messages must not be empty")
    out: list[dict[str, Any]] = []
    fold = _SystemFold(out)
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        role = require_dict(message, where).get("role")
        if role == "system":
            text = _joined_text(message.get("content"), f"{where}.content")
            if out or fold.pending:
                fold.add(text)
            else:
                prompt.append(text)
            continue
        blocks = _blocks(message.get("content"), f"{where}.content")
        if role == "user":
            out.extend(fold.into_user(_user(blocks, f"{where}.content", left_out)))
        elif role == "assistant":
            fold.flush()
            out.append(_assistant(blocks, f"{where}.content"))
        else:
            raise AgentRequestError(f"{where}.role must be 'user', 'assistant' or 'system'")
    fold.flush()
    if not out:
        raise AgentRequestError("messages must hold a user or an assistant message")
    system_text = _JOIN.join(t for t in prompt if t)
    return [{"role": "system", "content": system_text}, *out] if system_text else out


class _SystemFold:
    """Where a `system` message inside `messages` goes (claude-code sends them there).

    Before the first user or assistant message it joins the system prompt (after the
    `system` field's text). Later, its text becomes user text at its position: joined
    ("\n") to the end of the user message just before it; else to the start of the
    user message just after it; else a user message of its own. Every chat template
    renders user text, while many refuse a system message after the first one, and
    strictly alternating ones refuse two user messages in a row. No marker is added,
    for the reason given in `_tool_result`.
    """

    def __init__(self, out: list[dict[str, Any]]) -> None:
        self.out = out
        self.pending: list[str] = []

    def add(self, text: str) -> None:
        last = self.out[-1] if self.out else None
        if not self.pending and last is not None and last["role"] == "user":
            last["content"] = _JOIN.join([last["content"], text])
        else:
            self.pending.append(text)

    def into_user(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """A user message's chat messages, pending system text at the start of its text."""
        if self.pending:
            last = messages[-1]
            if last["role"] == "user":
                last["content"] = _JOIN.join([*self.pending, last["content"]])
            else:
                messages.append({"role": "user", "content": _JOIN.join(self.pending)})
            self.pending = []
        return messages

    def flush(self) -> None:
        if self.pending:
            self.out.append({"role": "user", "content": _JOIN.join(self.pending)})
            self.pending = []


def _user(
    blocks: list[tuple[str, dict[str, Any]]], where: str, left_out: list[str]
) -> list[dict[str, Any]]:
    results: list[dict[str, Any]] = []
    texts: list[str] = []
    for j, (kind, block) in enumerate(blocks):
        if kind == "text":
            texts.append(_block_text(block, f"{where}[{j}]"))
        elif kind == "tool_result":
            results.append(_tool_result(block, f"{where}[{j}]", left_out))
        else:
            raise _unsupported(kind, f"{where}[{j}]", "user")
    if texts or not results:
        return [*results, {"role": "user", "content": _JOIN.join(texts)}]
    return results


def _assistant(blocks: list[tuple[str, dict[str, Any]]], where: str) -> dict[str, Any]:
    texts: list[str] = []
    calls: list[dict[str, Any]] = []
    for j, (kind, block) in enumerate(blocks):
        if kind == "text":
            texts.append(_block_text(block, f"{where}[{j}]"))
        elif kind == "tool_use":
            calls.append(_tool_use(block, f"{where}[{j}]"))
        elif kind not in _DROPPED_BLOCKS:
            raise _unsupported(kind, f"{where}[{j}]", "assistant")
    if not calls:
        return {"role": "assistant", "content": _JOIN.join(texts)}
    return {
        "role": "assistant",
        "content": _JOIN.join(texts) if texts else None,
        "tool_calls": calls,
    }


def _tool_use(block: dict[str, Any], where: str) -> dict[str, Any]:
    arguments = require_dict(block.get("input"), f"{where}.input")
    return {
        "id": require_string(block.get("id"), f"{where}.id"),
        "type": "function",
        "function": {
            "name": require_string(block.get("name"), f"{where}.name"),
            # Compact, and in the agent's key order: that is the model's own order.
            "arguments": json.dumps(arguments, separators=(",", ":"), ensure_ascii=False),
        },
    }


def _tool_result(block: dict[str, Any], where: str, left_out: list[str]) -> dict[str, Any]:
    # A chat tool message has no error flag, and agents already say "error" in the
    # result text; adding our own marker would put words in the prompt no agent wrote.
    if not isinstance(block.get("is_error", False), bool):
        raise AgentRequestError(f"{where}.is_error must be a boolean")
    content = block.get("content")
    parts = [] if content is None else _blocks(content, f"{where}.content")
    texts = []
    for k, (kind, part) in enumerate(parts):
        if kind == "text":
            texts.append(_block_text(part, f"{where}.content[{k}]"))
        elif kind in _MEDIA_BLOCKS:
            # A tool's screenshot or file (claude-code's Read of an image): the engine
            # is text-only, so the result keeps its text and the turn records the rest.
            left_out.append(f"{where}.content[{k}] ({kind})")
        else:
            raise _unsupported(kind, f"{where}.content[{k}]", "tool_result")
    return {
        "role": "tool",
        "tool_call_id": require_string(block.get("tool_use_id"), f"{where}.tool_use_id"),
        "content": _JOIN.join(texts),
    }


def _joined_text(content: Any, where: str) -> str:
    """Content that may only hold text: a string, or text blocks joined."""
    texts = []
    for j, (kind, block) in enumerate(_blocks(content, where)):
        if kind != "text":
            raise _unsupported(kind, f"{where}[{j}]", "text-only")
        texts.append(_block_text(block, f"{where}[{j}]"))
    return _JOIN.join(texts)


def _blocks(content: Any, where: str) -> list[tuple[str, dict[str, Any]]]:
    """Content as (type, block) pairs; a plain string is one text block."""
    if isinstance(content, str):
        return [("text", {"type": "text", "text": content})]
    if not isinstance(content, list):
        raise AgentRequestError(f"{where} must be a string or an array of content blocks")
    pairs = []
    for j, block in enumerate(content):
        kind = require_dict(block, f"{where}[{j}]").get("type")
        pairs.append((require_string(kind, f"{where}[{j}].type"), block))
    return pairs


def _block_text(block: dict[str, Any], where: str) -> str:
    return require_string(block.get("text"), f"{where}.text")


def _unsupported(kind: str, where: str, context: str) -> AgentRequestError:
    if kind in ("image", "document"):
        return AgentRequestError(
            f"{where}: {kind} blocks are not supported (the engine is text-only)"
        )
    return AgentRequestError(f"{where}: block type {kind!r} is not supported in {context} content")


def _tools(value: Any, left_out: list[str]) -> list[dict[str, Any]]:
    out = []
    for i, tool in enumerate(require_list(value, "tools")):
        where = f"tools[{i}]"
        kind = require_dict(tool, where).get("type")
        if kind not in (None, "custom"):
            # A server tool (web search, code execution, ...) or a versioned built-in
            # whose schema only Anthropic's models know: nothing the engine can call.
            left_out.append(f"{where} ({kind} {tool.get('name')!r})")
            continue
        function: dict[str, Any] = {"name": require_string(tool.get("name"), f"{where}.name")}
        if tool.get("description") is not None:
            function["description"] = require_string(tool["description"], f"{where}.description")
        function["parameters"] = require_dict(tool.get("input_schema"), f"{where}.input_schema")
        out.append({"type": "function", "function": function})
    return out


def _tool_choice(value: Any) -> dict[str, Any]:
    """The chat fields for a tool_choice: `tool_choice`, and `parallel_tool_calls`."""
    choice = require_dict(value, "tool_choice")
    kind = choice.get("type")
    out: dict[str, Any] = {}
    if kind == "tool":
        name = require_string(choice.get("name"), "tool_choice.name")
        out["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif kind in _TOOL_CHOICES:
        out["tool_choice"] = _TOOL_CHOICES[kind]
    else:
        raise AgentRequestError("tool_choice.type must be one of 'auto', 'any', 'tool', 'none'")
    disable = choice.get("disable_parallel_tool_use")
    if disable is not None:
        if not isinstance(disable, bool):
            raise AgentRequestError("tool_choice.disable_parallel_tool_use must be a boolean")
        out["parallel_tool_calls"] = not disable
    return out


def _content(completion: Completion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if completion.reasoning:
        # The engine signs nothing; an empty signature is what a client can echo back.
        blocks.append({"type": "thinking", "thinking": completion.reasoning, "signature": ""})
    if completion.text:
        blocks.append({"type": "text", "text": completion.text})
    blocks.extend(
        {
            "type": "tool_use",
            "id": call.id,
            "name": call.name,
            "input": loads_arguments(call.arguments),
        }
        for call in completion.tool_calls
    )
    return blocks


def _stop_reason(completion: Completion) -> str:
    # An engine may say tool_calls without producing one; agents that see tool_use
    # look for tool_use blocks to run, so with none the turn simply ended.
    if completion.finish_reason == "tool_calls" and not completion.tool_calls:
        return "end_turn"
    return _STOP_REASONS[completion.finish_reason]


def _block_events(block: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A rendered block as its stream form: the empty start block, then its deltas."""
    kind = block["type"]
    if kind == "text":
        return {"type": "text", "text": ""}, [{"type": "text_delta", "text": block["text"]}]
    if kind == "thinking":
        return {"type": "thinking", "thinking": "", "signature": ""}, [
            {"type": "thinking_delta", "thinking": block["thinking"]},
            {"type": "signature_delta", "signature": block["signature"]},
        ]
    start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
    partial = json.dumps(block["input"], separators=(",", ":"), ensure_ascii=False)
    return start, [{"type": "input_json_delta", "partial_json": partial}]


def _event(data: dict[str, Any]) -> bytes:
    return sse_event(data, event=data["type"])


ANTHROPIC = AnthropicDialect()
