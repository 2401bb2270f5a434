"""Token-faithful continuation: one trajectory per conversation.

When a request's messages start with an earlier request's messages plus the reply the
proxy returned for it (compared as messages, not strings), its prompt is built from
ids the engine already produced: earlier prompt + earlier sampled ids + the turn's
closing + the engine's own rendering of the new messages. Pure: digests, the match keys
a request offers, and the stitched ids from renderings the edge fetched. Why and how
messages are matched: docs/capture.md, "Continuation".
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import orjson

__all__ = [
    "Continuation",
    "ContinuationBase",
    "Conversation",
    "Fallback",
    "PrefixKey",
    "has_non_text_content",
    "stitch",
    "turn_closing",
]

_DIGEST_BYTES = 16


class Fallback(StrEnum):
    """Why a request that continues an earlier turn was not stitched. The values are
    written to datasets (in findings): never rename."""

    NO_TOKENIZE = "no_tokenize"  # the engine's /tokenize refused or failed
    UNKNOWN_TURN_END = "unknown_turn_end"  # the template's closing of a turn is not known
    RENDER_MISMATCH = "render_mismatch"  # the new rendering does not extend the old one
    NON_TEXT_CONTENT = "non_text_content"  # vLLM renders such messages itself
    ENGINE_IGNORED = "engine_ignored"  # the engine's prompt was not the ids sent

    @property
    def reason(self) -> str:
        return _REASONS[self]


_REASONS = {
    Fallback.NO_TOKENIZE: "the engine's /tokenize refused or failed",
    Fallback.UNKNOWN_TURN_END: "the chat template's end of an assistant turn is unknown",
    Fallback.RENDER_MISMATCH: "the engine's rendering of the new messages does not start "
    "with its rendering of the earlier messages and reply",
    Fallback.NON_TEXT_CONTENT: "a message has non-text content (the engine renders it)",
    Fallback.ENGINE_IGNORED: "the engine's prompt ids were not the stitched ones",
}


@dataclass(frozen=True)
class Continuation:
    """How a turn relates to an earlier one it continues (None on a turn that continues
    none, or when stitching is off). `stitched`: its prompt is the earlier turn's prompt
    + sampled ids + what was added; otherwise `fallback` says why not."""

    turn: int
    stitched: bool
    fallback: Fallback | None = None


@dataclass(frozen=True)
class PrefixKey:
    """A request's first `messages` messages (ending on an assistant message), by digest."""

    messages: int
    digest: bytes


@dataclass(frozen=True, eq=False)
class ContinuationBase:
    """The earlier turn a request continues, as its session's owner holds it: the
    request's first `messages` messages are that turn's request messages + its reply."""

    turn: int
    messages: int
    prompt_ids: np.ndarray
    token_ids: np.ndarray


class Conversation:
    """The digests of a chat request's message prefixes (tools included: they are
    rendered into the prompt), computed once per request as a chain."""

    def __init__(self, messages: Sequence[Any], tools: Any = None) -> None:
        digest = _digest(b"tools", _canonical_bytes(_canonical(tools or [])))
        self._digests = [digest]
        self._roles: list[Any] = []
        for message in messages:
            digest = extend(digest, message)
            self._digests.append(digest)
            self._roles.append(message.get("role") if isinstance(message, dict) else None)

    @property
    def digest(self) -> bytes:
        """The digest of all the request's messages."""
        return self._digests[-1]

    def prefixes(self) -> tuple[PrefixKey, ...]:
        """Every prefix that ends on an assistant message, longest first: the candidates
        for "an earlier request's messages + its reply"."""
        return tuple(
            PrefixKey(end, self._digests[end])
            for end in range(len(self._roles), 0, -1)
            if self._roles[end - 1] == "assistant"
        )


def extend(digest: bytes, message: Any) -> bytes:
    """The digest of a conversation with digest `digest` followed by `message`: a
    recorded turn's key is its request's digest extended by its reply."""
    return _digest(digest, _canonical_bytes(_message_key(message)))


def _digest(*parts: bytes) -> bytes:
    h = hashlib.blake2b(digest_size=_DIGEST_BYTES)
    for part in parts:
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.digest()


def _canonical_bytes(value: Any) -> bytes:
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS)


def _message_key(message: Any) -> Any:
    """What of a chat message a continuation must agree on."""
    if not isinstance(message, dict):
        return _canonical(message)
    key: dict[str, Any] = {
        "role": message.get("role"),
        "content": _content_key(message.get("content")),
    }
    if message.get("name") is not None:
        key["name"] = message["name"]
    calls = message.get("tool_calls") or []
    if calls:
        key["tool_calls"] = [_call_key(call) for call in calls]
    return key


def _content_key(content: Any) -> Any:
    # An absent reply text comes back as null, "" or no field at all; text parts as
    # the same text in a list (vLLM joins them with newlines).
    if content is None:
        return ""
    if isinstance(content, list) and all(
        isinstance(p, dict) and p.get("type", "text") == "text" and isinstance(p.get("text"), str)
        for p in content
    ):
        return "\n".join(p["text"] for p in content)
    return _canonical(content)


def _call_key(call: Any) -> Any:
    if not isinstance(call, dict):
        return _canonical(call)
    function = call.get("function") or {}
    if not isinstance(function, dict):
        return _canonical(function)
    return {"name": function.get("name"), "arguments": _arguments_key(function.get("arguments"))}


def _arguments_key(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return {"json": _canonical(orjson.loads(arguments))}
        except orjson.JSONDecodeError:
            return {"text": arguments}
    return {"json": _canonical(arguments if arguments is not None else {})}


def _canonical(value: Any) -> Any:
    """A JSON value in one spelling: integral floats as ints (JavaScript clients write
    `1.0` as `1`), non-finite floats as text (JSON has none)."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            return repr(value)
        return int(value) if value.is_integer() and abs(value) < 2**63 else value
    if isinstance(value, int):
        # orjson writes only 64-bit integers.
        return value if -(2**63) <= value < 2**64 else str(value)
    if isinstance(value, dict):
        return {str(k): _canonical(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_canonical(v) for v in value]
    return repr(value)


def has_non_text_content(messages: Sequence[Any]) -> bool:
    """Whether any message has a content part other than text: vLLM then renders the
    messages itself and ignores forwarded prompt ids."""
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if isinstance(content, list) and any(
            not isinstance(p, dict) or p.get("type", "text") != "text" for p in content
        ):
            return True
    return False


def turn_closing(open_ids: Sequence[int], closed_ids: Sequence[int]) -> np.ndarray | None:
    """What the chat template puts after an assistant message's content (ChatML: the
    end-of-turn token and a newline), from two renderings of one probe conversation:
    `open_ids` ending with the generation prompt, `closed_ids` with an empty assistant
    message after it. None when the one does not extend the other."""
    n = len(open_ids)
    if len(closed_ids) <= n or list(closed_ids[:n]) != list(open_ids):
        return None
    return np.asarray(closed_ids[n:], dtype=np.int32)


def stitch(
    base: ContinuationBase,
    closing: np.ndarray,
    history_ids: Sequence[int],
    full_ids: Sequence[int],
) -> np.ndarray | Fallback:
    """The stitched prompt, or why there is none.

    `history_ids`: the engine's rendering of the request's first `base.messages`
    messages (the earlier conversation and its reply, the turn closed);
    `full_ids`: its rendering of all of them with the generation prompt. The rendering
    of the new messages must extend the rendering of the old ones, and the old one must
    end by closing the reply's turn, or the ids added since are not known.

    The sampled ids usually end with the end-of-turn token the closing starts with (a
    reply the model ended itself); one cut at the token limit (or by a stop string)
    was closed by nobody, so the whole closing follows it.
    """
    history = np.asarray(history_ids, dtype=np.int32)
    full = np.asarray(full_ids, dtype=np.int32)
    k = len(closing)
    if (
        len(full) < len(history)
        or k == 0
        or len(history) < k
        or not np.array_equal(full[: len(history)], history)
        or not np.array_equal(history[len(history) - k :], closing)
    ):
        return Fallback.RENDER_MISMATCH
    sampled = base.token_ids
    ended = len(sampled) > 0 and int(sampled[-1]) == int(closing[0])
    ids: np.ndarray = np.concatenate(
        (
            base.prompt_ids,
            sampled,
            closing[1:] if ended else closing,
            full[len(history) :],
        )
    )
    return ids.astype(np.int32, copy=False)
