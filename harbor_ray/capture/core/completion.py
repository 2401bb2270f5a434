"""The engine's reply, parsed once into a dialect-neutral record.

Every dialect renders its response (plain JSON or a synthetic SSE stream) from a
`Completion`; the capture data (prompt ids, sampled ids, logprobs) travels beside it
so that the recorded turn holds exactly what the engine returned. Nothing here
tokenises: the ids are vLLM's own (`return_token_ids: true`).
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from harbor_ray.errors import EngineReplyError

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]
_FINISH_REASONS: frozenset[str] = frozenset({"stop", "length", "tool_calls", "content_filter"})


@dataclass(frozen=True)
class ToolCall:
    """One function call the model made. `arguments` is the JSON text the model wrote."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    """What the model produced for one call, independent of any wire dialect."""

    text: str
    finish_reason: FinishReason
    tool_calls: tuple[ToolCall, ...] = ()
    reasoning: str | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # The engine's own token data (int32 ids; float32 logprobs, NaN where the engine
    # gave none). None when the engine sent no such field, and for replies that did
    # not come from the engine (the budget stop), which are never recorded.
    prompt_ids: np.ndarray | None = field(default=None, compare=False)
    token_ids: np.ndarray | None = field(default=None, compare=False)
    logprobs: np.ndarray | None = field(default=None, compare=False)
    engine_model: str = ""
    raw_finish_reason: str | None = field(default=None, compare=False)
    # The engine's `weight_versions` spans on the choice as sent (which weights sampled
    # which tokens; policy_segments.py reads them); None when it sent none.
    weight_versions: Any = field(default=None, compare=False)


def parse_engine_reply(body: dict[str, Any]) -> Completion:
    """Parse a vLLM `/v1/chat/completions` reply (non-streamed, n=1).

    vLLM puts `prompt_token_ids` at the top level and `token_ids` plus
    `logprobs.content[i].logprob` on the choice. Missing capture fields are kept as
    None here so that validation can report them instead of this parser guessing.
    """
    choices = body.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise EngineReplyError("engine reply has no choices")
    choice = choices[0]
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise EngineReplyError("engine reply choice has no message object")

    tool_calls = tuple(
        ToolCall(
            id=str(call.get("id") or f"call_{i}"),
            name=str((call.get("function") or {}).get("name") or ""),
            arguments=_arguments_text((call.get("function") or {}).get("arguments")),
        )
        for i, call in enumerate(message.get("tool_calls") or [])
        if isinstance(call, dict)
    )
    raw_finish = choice.get("finish_reason")
    finish: FinishReason
    if tool_calls:
        finish = "tool_calls"
    elif raw_finish in _FINISH_REASONS:
        finish = raw_finish
    else:
        finish = "stop"

    usage = body.get("usage") or {}
    prompt_ids = body.get("prompt_token_ids")
    if prompt_ids is None:
        prompt_ids = choice.get("prompt_token_ids")
    token_ids = choice.get("token_ids")
    reasoning = message.get("reasoning_content") or message.get("reasoning")
    return Completion(
        text=message.get("content") or "",
        finish_reason=finish,
        tool_calls=tool_calls,
        reasoning=reasoning if isinstance(reasoning, str) and reasoning else None,
        prompt_tokens=int(usage.get("prompt_tokens") or len(prompt_ids or ())),
        completion_tokens=int(usage.get("completion_tokens") or len(token_ids or ())),
        prompt_ids=_ids_array(prompt_ids),
        token_ids=_ids_array(token_ids),
        logprobs=_logprobs(choice.get("logprobs")),
        engine_model=str(body.get("model") or ""),
        raw_finish_reason=raw_finish if isinstance(raw_finish, str) else None,
        weight_versions=choice.get("weight_versions"),
    )


def _arguments_text(arguments: Any) -> str:
    if isinstance(arguments, str):
        return arguments
    import json

    return json.dumps(arguments if arguments is not None else {})


_INT32_MAX = 2**31 - 1


def _ids_array(values: Any) -> np.ndarray | None:
    if not isinstance(values, list):
        return None
    try:
        # array('i') takes only ints that fit int32 and is about twice as fast as
        # np.array(values, int64) on a reply's few hundred ids (this is per model call);
        # np.array would also truncate a float id silently. The copy (cheap at this size) leaves the
        # kept ids without the array/memoryview chain, three objects per array that the
        # garbage collector would otherwise walk for as long as the session lives.
        ids = np.frombuffer(array("i", values), dtype=np.int32).copy()
    except (TypeError, OverflowError):
        # Keep the length; mark what is not an int32 id as -1 so validation names it.
        return np.array(
            [
                v if isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= _INT32_MAX else -1
                for v in values
            ],
            dtype=np.int32,
        )
    ids[ids < 0] = -1
    return ids


def _logprobs(block: Any) -> np.ndarray | None:
    if not isinstance(block, dict):
        return None
    content = block.get("content")
    if not isinstance(content, list):
        return None
    values = [entry.get("logprob") if isinstance(entry, dict) else None for entry in content]
    try:
        # None becomes NaN here; the fast path for the vLLM shape.
        out = np.array(values, dtype=np.float32)
    except (TypeError, ValueError):
        out = np.array(
            [v if isinstance(v, int | float) and not isinstance(v, bool) else None for v in values],
            dtype=np.float32,
        )
    if out.ndim != 1:
        return None
    finite = np.isfinite(out)
    if not finite.all():
        out[~finite] = np.nan
    return out
