"""A run's model calls as the capture proxy records them, for the run view: each turn
becomes a call's view once, when it arrives, and the page reads the calls after a
cursor (the count it holds), so a poll sends only what is new.

A turn's request holds the whole conversation so far, so a call shows only the
messages its rollout's previous call did not: those it repeats (the previous request,
and its reply when the agent sent it back) are counted in `earlier`, not sent again; a
200-call rollout would otherwise send its conversation 200 times. A message repeats
another when its role, content and tool calls are the same (`same_message`): an engine's
reply carries null fields (`annotations`, `refusal`, `reasoning`...) that an agent
drops when it sends the reply back, and the reply is still the one it sent.
Plain state, no I/O.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import orjson

from harbor_ray.capture.core.turn import TurnRecord

__all__ = ["PAGE", "RunCalls", "TokenPieces", "call_view", "same_message"]

PAGE = 50  # calls per read at most: a long run reaches the page in pieces

# (served model, sampled ids) -> the page's token text for them: {"pieces": the table of
# report/token_text.pieces_table, or None without a tokenizer; "note": what the page says}
TokenPieces = Callable[[str, list[int]], dict[str, Any]]


def call_view(
    turn: TurnRecord,
    rollout: int,
    previous: list[Any] | None,
    token_pieces: TokenPieces | None = None,
) -> tuple[dict[str, Any], list[Any]]:
    """(the call's view, the conversation it continues the next call from: its request
    messages and its reply). `rollout`: which of the run's rollouts made it (1, 2...);
    `previous`: what the rollout's previous call returned here; `token_pieces`: the
    sampled ids' text for display (the ids stay what the view holds)."""
    messages = _json(turn.request_messages_json, [])
    reply = _json(turn.response_message_json, {})
    earlier = _repeated(messages, previous or [])
    token_ids = None if turn.token_ids is None else turn.token_ids.tolist()
    text = (
        token_pieces(turn.request_model, token_ids)
        if token_pieces is not None and token_ids is not None
        else {}
    )
    view = {
        "rollout": rollout,
        "index": turn.index,
        "messages": messages[earlier:],
        "earlier": earlier,
        "reply": reply,
        "finish_reason": turn.finish_reason,
        "prompt_tokens": turn.prompt_tokens,
        "completion_tokens": turn.completion_tokens,
        "latency_s": round(turn.ended_at - turn.started_at, 3) if turn.ended_at else None,
        "auxiliary": turn.auxiliary,
        "token_ids": token_ids,
        "pieces": text.get("pieces"),
        "tokens_note": text.get("note"),
        "logprobs": None
        if turn.logprobs is None
        else [None if math.isnan(x) else round(x, 4) for x in turn.logprobs.tolist()],
    }
    return view, [*messages, reply]


def _repeated(messages: list[Any], previous: list[Any]) -> int:
    """How many leading messages repeat the previous call's request (with its reply, or
    without it when the agent rewrote the reply before sending it back)."""
    for count in (len(previous), len(previous) - 1):
        if 0 < count <= len(messages) and all(
            same_message(a, b) for a, b in zip(messages[:count], previous, strict=False)
        ):
            return count
    return 0


def same_message(a: Any, b: Any) -> bool:
    """Whether two chat messages say the same: the same role, content and tool calls,
    a field that is null (or an empty list, or absent) being no field at all."""
    if not (isinstance(a, dict) and isinstance(b, dict)):
        return bool(a == b)
    return all(
        _meaning(a.get(key)) == _meaning(b.get(key))
        for key in ("role", "content", "tool_calls", "tool_call_id", "name")
    )


def _meaning(value: Any) -> Any:
    """`value` with its null fields dropped, at every depth; an empty list or string as
    None (an agent sends a reply with no text back as "" or null, with no tool calls as
    [] or none)."""
    if isinstance(value, dict):
        kept = {k: _meaning(v) for k, v in value.items()}
        return {k: v for k, v in kept.items() if v is not None}
    if isinstance(value, list):
        return [_meaning(v) for v in value] or None
    return None if value == "" else value


def _json(data: bytes, default: Any) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:  # recorded by the proxy from JSON, so not expected
        return default


class RunCalls:
    """One run's calls in arrival order, each numbered by its place (`seq`)."""

    def __init__(self, token_pieces: TokenPieces | None = None) -> None:
        self._token_pieces = token_pieces
        self._calls: list[dict[str, Any]] = []
        self._rollouts: dict[str, int] = {}  # session id -> 1, 2... in order first heard
        self._conversations: dict[str, list[Any]] = {}

    def add(self, session_id: str, turn: TurnRecord) -> None:
        rollout = self._rollouts.setdefault(session_id, len(self._rollouts) + 1)
        view, conversation = call_view(
            turn, rollout, self._conversations.get(session_id), self._token_pieces
        )
        self._conversations[session_id] = conversation
        self._calls.append({"seq": len(self._calls), **view})

    def __len__(self) -> int:
        return len(self._calls)

    def after(self, cursor: int, limit: int = PAGE) -> tuple[list[dict[str, Any]], int]:
        """(the calls from `cursor` on, at most `limit`; the cursor after them)."""
        start = max(0, cursor)
        found = self._calls[start : start + limit]
        return found, start + len(found)
