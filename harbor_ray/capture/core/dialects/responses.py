"""OpenAI Responses (`POST /v1/responses`), the wire of codex and other newer agents.

`to_engine` rebuilds, byte-identically each time, the chat history the typed input
items describe; replies are a `response` whose `output` lists reasoning, the assistant
message and function calls as items, streamed as the event sequence the official SDK
checks. No response state is kept: `previous_response_id`, `conversation` and item
references are refused. Which tools reach the engine: docs/proxy.md, "OpenAI Responses".
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from harbor_ray.capture.core.completion import Completion
from harbor_ray.capture.core.dialects.base import (
    DialectName,
    EngineCall,
    ErrorKind,
    ReplyContext,
    openai_stream_and_model,
    require_dict,
    require_list,
)
from harbor_ray.capture.core.dialects.chat import openai_error_body
from harbor_ray.capture.core.sse import KEEPALIVE, sse_event
from harbor_ray.errors import AgentRequestError

# vLLM itself joins a message's text parts with a newline when it flattens them for the
# chat template; joining the same way keeps what the model sees unchanged.
_PART_SEPARATOR = "\n"

_TEXT_PARTS = frozenset({"input_text", "output_text"})
_CHAT_ROLES = {"user": "user", "assistant": "assistant", "system": "system", "developer": "system"}
_TOOL_CHOICE_MODES = frozenset({"auto", "none", "required"})
# Request fields that would make the answer depend on state this proxy does not keep.
_STATEFUL_FIELDS = ("previous_response_id", "conversation")

_INCOMPLETE_REASONS = {"length": "max_output_tokens", "content_filter": "content_filter"}


class ResponsesDialect:
    name: DialectName = "responses"
    keepalive = KEEPALIVE

    def to_engine(
        self, body: dict[str, Any], *, url_model: str | None, url_stream: bool
    ) -> EngineCall:
        for name in _STATEFUL_FIELDS:
            if body.get(name) is not None:
                raise AgentRequestError(
                    f"{name} is not supported: this proxy keeps no response state; "
                    "send the full conversation in input"
                )
        stream, model = openai_stream_and_model(body)

        messages = _instructions(body.get("instructions")) + _messages(body.get("input"))
        if not messages:
            raise AgentRequestError("input must not be empty")
        engine: dict[str, Any] = {"messages": messages}
        tools = _Tools()
        if body.get("tools") is not None:
            tools = _tools(body["tools"])
            engine["tools"] = tools.engine
        if body.get("tool_choice") is not None:
            engine["tool_choice"] = _tool_choice(body["tool_choice"])
        if body.get("parallel_tool_calls") is not None:
            engine["parallel_tool_calls"] = _typed(body, "parallel_tool_calls", bool, "a boolean")
        if body.get("max_output_tokens") is not None:
            engine["max_tokens"] = _typed(body, "max_output_tokens", int, "an integer")
        for key in ("temperature", "top_p"):
            if body.get(key) is not None:
                engine[key] = _typed(body, key, int | float, "a number")
        return EngineCall(
            body=engine,
            stream=stream,
            request_model=model,
            not_forwarded=tuple(tools.left_out),
            tool_namespaces=tuple(tools.namespaces.items()),
        )

    def render(self, completion: Completion, ctx: ReplyContext) -> dict[str, Any]:
        return _response(ctx, completion, _output_items(completion, ctx))

    def render_stream(self, completion: Completion, ctx: ReplyContext) -> Iterator[bytes]:
        for number, event in enumerate(_stream_events(completion, ctx)):
            yield sse_event({**event, "sequence_number": number}, event=event["type"])

    def error_body(self, status: int, message: str, kind: ErrorKind) -> dict[str, Any]:
        return openai_error_body(message, kind)

    def error_event(self, status: int, message: str, kind: ErrorKind) -> bytes:
        # The SDK types an `error` event with flat code/message/param, while its stream
        # reader (and most non-Python clients) raise on a nested `error` object; carry
        # both. It is the first event of the stream: a synthetic replay starts only after
        # the engine answered, so nothing has been numbered before it.
        body = openai_error_body(message, kind)
        flat = {"code": body["error"]["code"], "message": message, "param": None}
        return sse_event({"type": "error", "sequence_number": 0, **flat, **body}, event="error")

    def count_tokens_reply(self, count: int) -> dict[str, Any]:
        return {"object": "response.input_tokens", "input_tokens": count}


# --- request -------------------------------------------------------------------------


def _instructions(value: Any) -> list[dict[str, Any]]:
    if value is None or value == "":
        return []
    if not isinstance(value, str):
        raise AgentRequestError("instructions must be a string")
    return [{"role": "system", "content": value}]


def _messages(value: Any) -> list[dict[str, Any]]:
    """The chat history the input items describe, in order.

    A function call joins the assistant message just before it (reasoning items in
    between are dropped, so they do not separate them): the model wrote text and calls
    in one turn, and one chat message is how the engine's template renders that turn.
    """
    if isinstance(value, str):
        return [{"role": "user", "content": value}]
    if not isinstance(value, list):
        raise AgentRequestError("input must be a string or a JSON array of items")
    messages: list[dict[str, Any]] = []
    for i, raw in enumerate(value):
        where = f"input[{i}]"
        item = require_dict(raw, where)
        kind = item.get("type", "message" if "role" in item else None)
        if kind == "message":
            messages.append(_message(item, where))
        elif kind == "function_call":
            call = _function_call(item, where)
            last = messages[-1] if messages else None
            if last is not None and last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": _string(item, "call_id", where),
                    "content": _output_text(item.get("output"), f"{where}.output"),
                }
            )
        elif kind == "reasoning":
            continue  # earlier turns' reasoning is not part of the prompt the engine sees
        else:
            raise AgentRequestError(f"{where}.type {kind!r} is not supported")
    return messages


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if not isinstance(role, str) or role not in _CHAT_ROLES:
        raise AgentRequestError(f"{where}.role must be one of {sorted(_CHAT_ROLES)}")
    return {"role": _CHAT_ROLES[role], "content": _text(item.get("content"), f"{where}.content")}


def _text(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    parts = require_list(content, where)
    texts = []
    for j, raw in enumerate(parts):
        part = require_dict(raw, f"{where}[{j}]")
        kind = part.get("type")
        if not isinstance(kind, str) or kind not in _TEXT_PARTS:
            raise AgentRequestError(
                f"{where}[{j}].type {kind!r} is not supported: the engine reads text only"
            )
        texts.append(_string(part, "text", f"{where}[{j}]"))
    return _PART_SEPARATOR.join(texts)


def _output_text(output: Any, where: str) -> str:
    if output is None:
        raise AgentRequestError(f"{where} is required")
    return _text(output, where)


def _function_call(item: dict[str, Any], where: str) -> dict[str, Any]:
    return {
        "id": _string(item, "call_id", where),
        "type": "function",
        "function": {
            "name": _string(item, "name", where),
            "arguments": _string(item, "arguments", where),
        },
    }


@dataclass
class _Tools:
    """The agent's tools as the engine sees them, and what stayed out."""

    engine: list[dict[str, Any]] = field(default_factory=list)
    namespaces: dict[str, str] = field(default_factory=dict)  # engine name -> namespace
    left_out: list[str] = field(default_factory=list)
    _where: dict[str, str] = field(default_factory=dict)  # engine name -> where declared

    def add(self, tool: dict[str, Any], where: str, namespace: str | None) -> None:
        name = tool["function"]["name"]
        if name in self._where:
            raise AgentRequestError(
                f"{where}.name {name!r} is also the name of {self._where[name]}: "
                "the engine sees every function under its own name"
            )
        self._where[name] = where
        self.engine.append(tool)
        if namespace is not None:
            self.namespaces[name] = namespace


def _tools(value: Any) -> _Tools:
    tools = _Tools()
    for i, raw in enumerate(require_list(value, "tools")):
        where = f"tools[{i}]"
        tool = require_dict(raw, where)
        kind = _string(tool, "type", where)
        if kind == "function":
            tools.add(_function_tool(tool, where), where, None)
        elif kind == "namespace":
            namespace = _string(tool, "name", where)
            for j, raw_child in enumerate(require_list(tool.get("tools"), f"{where}.tools")):
                child_where = f"{where}.tools[{j}]"
                child = require_dict(raw_child, child_where)
                if child.get("type") == "function":
                    tools.add(_function_tool(child, child_where), child_where, namespace)
                else:
                    tools.left_out.append(f"{child_where} ({_tool_label(child)})")
        else:
            tools.left_out.append(f"{where} ({_tool_label(tool)})")
    return tools


def _function_tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    function: dict[str, Any] = {"name": _string(tool, "name", where)}
    if tool.get("description") is not None:
        function["description"] = _string(tool, "description", where)
    if tool.get("parameters") is not None:
        function["parameters"] = require_dict(tool["parameters"], f"{where}.parameters")
    return {"type": "function", "function": function}


def _tool_label(tool: dict[str, Any]) -> str:
    """A left-out tool as the record names it: its type, and its name if it has one."""
    name = tool.get("name") or tool.get("server_label")
    return f"{tool.get('type')} {name!r}" if isinstance(name, str) else str(tool.get("type"))


def _tool_choice(value: Any) -> str | dict[str, Any]:
    if isinstance(value, str) and value in _TOOL_CHOICE_MODES:
        return value
    if isinstance(value, dict) and value.get("type") == "function":
        return {"type": "function", "function": {"name": _string(value, "name", "tool_choice")}}
    raise AgentRequestError(
        f"tool_choice must be one of {sorted(_TOOL_CHOICE_MODES)} "
        'or {"type": "function", "name": ...}'
    )


def _string(obj: dict[str, Any], key: str, where: str) -> str:
    value = obj.get(key)
    if not isinstance(value, str):
        raise AgentRequestError(f"{where}.{key} must be a string")
    return value


def _typed(body: dict[str, Any], key: str, kind: Any, what: str) -> Any:
    value = body[key]
    # bool is an int subclass; `true` is never a valid token count or temperature.
    if (isinstance(value, bool) and kind is not bool) or not isinstance(value, kind):
        raise AgentRequestError(f"{key} must be {what}")
    return value


# --- reply ---------------------------------------------------------------------------


def _output_items(completion: Completion, ctx: ReplyContext) -> list[dict[str, Any]]:
    """The finished output items, in the order the model produced them.

    Item ids derive from the response id, so a reply renders identically every time.
    """
    suffix = ctx.response_id.removeprefix("resp_")
    items: list[dict[str, Any]] = []
    if completion.reasoning:
        items.append(
            {
                "type": "reasoning",
                "id": f"rs_{suffix}",
                "summary": [{"type": "summary_text", "text": completion.reasoning}],
            }
        )
    if completion.text:
        items.append(
            {
                "type": "message",
                "id": f"msg_{suffix}",
                "role": "assistant",
                "status": "incomplete" if _incomplete_reason(completion) else "completed",
                "content": [{"type": "output_text", "text": completion.text, "annotations": []}],
            }
        )
    namespaces = dict(ctx.tool_namespaces)
    for i, call in enumerate(completion.tool_calls):
        item = {
            "type": "function_call",
            "id": f"fc_{suffix}_{i}",
            "call_id": call.id,
            "name": call.name,
            "arguments": call.arguments,
            "status": "completed",
        }
        if call.name in namespaces:
            item["namespace"] = namespaces[call.name]
        items.append(item)
    return items


def _incomplete_reason(completion: Completion) -> str | None:
    return _INCOMPLETE_REASONS.get(completion.finish_reason)


def _response(
    ctx: ReplyContext, completion: Completion | None, output: list[dict[str, Any]]
) -> dict[str, Any]:
    """The `response` object; `completion=None` gives the in-progress snapshot.

    `tools`, `tool_choice` and `parallel_tool_calls` are required by the SDK's type
    but the reply does not see the request, so they carry the API's defaults.
    """
    if completion is None:
        status, reason, usage = "in_progress", None, None
    else:
        reason = _incomplete_reason(completion)
        status = "incomplete" if reason else "completed"
        usage = _usage(completion)
    return {
        "id": ctx.response_id,
        "object": "response",
        "created_at": ctx.created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": reason} if reason else None,
        "instructions": None,
        "model": ctx.model,
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def _usage(completion: Completion) -> dict[str, Any]:
    return {
        "input_tokens": completion.prompt_tokens,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
        "output_tokens": completion.completion_tokens,
        # The engine reports one completion count; reasoning is not split out of it.
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": completion.prompt_tokens + completion.completion_tokens,
    }


def _stream_events(completion: Completion, ctx: ReplyContext) -> Iterator[dict[str, Any]]:
    """Every event of the replay, unnumbered; each item's content goes in one delta."""
    opening = _response(ctx, None, [])
    yield {"type": "response.created", "response": opening}
    yield {"type": "response.in_progress", "response": opening}
    output = _output_items(completion, ctx)
    for index, item in enumerate(output):
        yield from _item_events(index, item)
    final = _response(ctx, completion, output)
    terminal = "response.completed" if final["status"] == "completed" else "response.incomplete"
    yield {"type": terminal, "response": final}


def _item_events(index: int, item: dict[str, Any]) -> Iterator[dict[str, Any]]:
    at = {"item_id": item["id"], "output_index": index}
    if item["type"] == "reasoning":
        yield _item_added(index, {**item, "summary": []})
        for n, part in enumerate(item["summary"]):
            summary_at = {**at, "summary_index": n}
            yield {
                "type": "response.reasoning_summary_part.added",
                **summary_at,
                "part": {**part, "text": ""},
            }
            yield {
                "type": "response.reasoning_summary_text.delta",
                **summary_at,
                "delta": part["text"],
            }
            yield {
                "type": "response.reasoning_summary_text.done",
                **summary_at,
                "text": part["text"],
            }
            yield {"type": "response.reasoning_summary_part.done", **summary_at, "part": part}
    elif item["type"] == "message":
        yield _item_added(index, {**item, "status": "in_progress", "content": []})
        for n, part in enumerate(item["content"]):
            part_at = {**at, "content_index": n}
            yield {"type": "response.content_part.added", **part_at, "part": {**part, "text": ""}}
            yield {
                "type": "response.output_text.delta",
                **part_at,
                "delta": part["text"],
                "logprobs": [],
            }
            yield {
                "type": "response.output_text.done",
                **part_at,
                "text": part["text"],
                "logprobs": [],
            }
            yield {"type": "response.content_part.done", **part_at, "part": part}
    else:
        yield _item_added(index, {**item, "status": "in_progress", "arguments": ""})
        yield {"type": "response.function_call_arguments.delta", **at, "delta": item["arguments"]}
        yield {
            "type": "response.function_call_arguments.done",
            **at,
            "name": item["name"],
            "arguments": item["arguments"],
        }
    yield {"type": "response.output_item.done", "output_index": index, "item": item}


def _item_added(index: int, item: dict[str, Any]) -> dict[str, Any]:
    return {"type": "response.output_item.added", "output_index": index, "item": item}


RESPONSES = ResponsesDialect()
