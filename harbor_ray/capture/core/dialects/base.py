"""What every wire dialect provides, and the errors a translation may raise.

A dialect is a stateless object with pure methods: it turns the agent's request into
one OpenAI chat-completions body for the engine (`to_engine`), and the engine's parsed
reply (`Completion`) back into the agent's wire format, as one JSON document
(`render`) or as the dialect's real SSE event sequence (`render_stream`). It never
sees HTTP objects, sockets or clocks: the app passes in what it needs (`ReplyContext`).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from harbor_ray.capture.core.completion import Completion
from harbor_ray.errors import AgentRequestError

DialectName = Literal["chat", "responses", "anthropic", "google"]
ErrorKind = Literal[
    "invalid_request",
    "authentication",
    "not_found",
    "too_large",
    "engine",
    "overloaded",
    "rate_limited",
]


@dataclass(frozen=True)
class EngineCall:
    """One engine request made from an agent's request.

    `body` is an OpenAI chat-completions body: `messages` and, where the agent sent
    them, `tools`, `tool_choice`, `max_tokens`, `temperature`, `top_p`, `stop`, `seed`,
    and any other sampling fields. It carries no `model`, `stream` or capture fields:
    `normalize.engine_body` adds those, so every dialect gets them right once.

    `not_forwarded` names, by where they were in the agent's request, the parts the
    engine cannot take and the translation left out (tools that are not functions,
    images in a text-only prompt); the turn records them. `tool_namespaces` maps an
    engine function name to the namespace the agent declared it in, so the reply can
    name the namespace again.
    """

    body: dict[str, Any]
    stream: bool
    request_model: str
    not_forwarded: tuple[str, ...] = ()
    tool_namespaces: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class ReplyContext:
    """Values the reply needs that the pure core must not make up itself."""

    response_id: str
    created: int  # unix seconds, supplied by the edge
    model: str  # the model name the agent asked for, echoed back to it
    tool_namespaces: tuple[tuple[str, str], ...] = ()  # EngineCall.tool_namespaces


class Dialect(Protocol):
    name: DialectName
    # Sent on a streamed call's open stream while the engine works (sse.KEEPALIVE, an SSE
    # comment), or b"" where the dialect's clients take a comment for a bad chunk.
    keepalive: bytes

    def to_engine(
        self, body: dict[str, Any], *, url_model: str | None, url_stream: bool
    ) -> EngineCall:
        """Translate the agent's request. Raises AgentRequestError on malformed input.

        `url_model` / `url_stream` come from the route (Google puts both in the URL);
        other dialects ignore them and read `model` / `stream` from the body.
        """
        ...

    def render(self, completion: Completion, ctx: ReplyContext) -> dict[str, Any]:
        """The non-streamed reply body."""
        ...

    def render_stream(self, completion: Completion, ctx: ReplyContext) -> Iterator[bytes]:
        """The full SSE event sequence of a streamed reply (frames from `sse.sse_event`)."""
        ...

    def error_body(self, status: int, message: str, kind: ErrorKind) -> dict[str, Any]:
        """The dialect's JSON error document."""
        ...

    def error_event(self, status: int, message: str, kind: ErrorKind) -> bytes:
        """An error as an SSE frame, for failures after the stream's headers went out."""
        ...

    def count_tokens_reply(self, count: int) -> dict[str, Any]:
        """The aux `count_tokens` / `countTokens` reply body (ignored where it has none)."""
        ...


def require_dict(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise AgentRequestError(f"{what} must be a JSON object")
    return value


def require_list(value: Any, what: str) -> list[Any]:
    if not isinstance(value, list):
        raise AgentRequestError(f"{what} must be a JSON array")
    return value


def require_string(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise AgentRequestError(f"{what} must be a string")
    return value


def require_number(value: Any, what: str) -> int | float:
    # bool is an int subclass; `true` is never a valid temperature or token count.
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise AgentRequestError(f"{what} must be a number")
    return value


def require_integer(value: Any, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise AgentRequestError(f"{what} must be an integer >= {minimum}")
    return value


def loads_arguments(arguments: str) -> dict[str, Any]:
    """A tool call's JSON arguments as an object, for dialects whose wire wants one.

    The model may write invalid JSON; those dialects' SDKs require an object, so we
    answer with {} rather than fail the agent. The recorded token ids stay exact.
    """
    try:
        value = json.loads(arguments) if arguments else {}
    except json.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def openai_stream_and_model(body: dict[str, Any]) -> tuple[bool, str]:
    """`stream` and `model` of an OpenAI request (both APIs): OpenAI takes null for false."""
    stream = body.get("stream")
    stream = False if stream is None else stream
    if not isinstance(stream, bool):
        raise AgentRequestError("stream must be a boolean")
    model = body.get("model", "")
    if not isinstance(model, str):
        raise AgentRequestError("model must be a string")
    return stream, model
