"""The engine body of a call that continues a recorded turn: the turn's prompt and
sampled ids as the start of its prompt (capture.core.continuation), so the engine sees
exactly the tokens it saw, rather than a re-rendering of them.

`Stitcher` asks the engine's /tokenize for the renderings the stitch needs, and learns
once, from a probe conversation, how the chat template closes an assistant turn. It
never fails a call: when the prompt cannot be stitched, the call goes with its messages
and the record says why (`Fallback`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import numpy as np

from harbor_ray.capture.core.completion import Completion
from harbor_ray.capture.core.continuation import (
    Continuation,
    ContinuationBase,
    Fallback,
    has_non_text_content,
    stitch,
    turn_closing,
)
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.errors import EngineError, EngineReplyError


@dataclass(frozen=True)
class StitchedPrompt:
    """What the engine is sent for one call, and how its prompt came about."""

    payload: dict[str, Any]
    continuation: Continuation | None = None
    stitched_ids: np.ndarray | None = None

    @classmethod
    def fallback(
        cls, payload: dict[str, Any], base: ContinuationBase, why: Fallback
    ) -> StitchedPrompt:
        return cls(payload, Continuation(base.turn, False, why))

    def checked(self, completion: Completion) -> Continuation | None:
        """The continuation as it happened: an engine that rendered the messages
        itself (vLLM does for some requests) did not take the stitched prompt."""
        if (
            self.stitched_ids is None
            or self.continuation is None
            or (
                completion.prompt_ids is not None
                and np.array_equal(completion.prompt_ids, self.stitched_ids)
            )
        ):
            return self.continuation
        return Continuation(self.continuation.turn, False, Fallback.ENGINE_IGNORED)


class Stitcher:
    """Stitched prompts for one engine, with the chat template's turn ending it learned."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        # The chat template's end of an assistant turn, learned from the engine once:
        # (ids,) when known, (None,) when its renderings do not show it.
        self._closing: tuple[np.ndarray | None] | None = None

    async def prompt(
        self, payload: dict[str, Any], base: ContinuationBase | None
    ) -> StitchedPrompt:
        """The engine body: the stitched prompt ids in it when the call continues the
        recorded turn `base` and the engine's renderings allow (else why not). Never
        raises but for cancellation: a failed stitch is a fallback, not a failed call."""
        if base is None:
            return StitchedPrompt(payload)
        messages = payload["messages"]
        if has_non_text_content(messages):
            return StitchedPrompt.fallback(payload, base, Fallback.NON_TEXT_CONTENT)
        try:
            closing = await self._turn_closing(payload)
            if closing is None:
                return StitchedPrompt.fallback(payload, base, Fallback.UNKNOWN_TURN_END)
            history, full = await asyncio.gather(
                self._tokenize(payload, messages[: base.messages], generation=False),
                self._tokenize(payload, messages, generation=True),
            )
        except (EngineError, KeyError, TypeError, ValueError):
            return StitchedPrompt.fallback(payload, base, Fallback.NO_TOKENIZE)
        ids = stitch(base, closing, history, full)
        if isinstance(ids, Fallback):
            return StitchedPrompt.fallback(payload, base, ids)
        stitched = {**payload, "kv_transfer_params": {"prompt_token_ids": ids.tolist()}}
        return StitchedPrompt(stitched, Continuation(base.turn, True), ids)

    async def _turn_closing(self, payload: dict[str, Any]) -> np.ndarray | None:
        """What the template puts after an assistant message (learned once, from a
        probe conversation rendered open and with an empty reply)."""
        if self._closing is None:
            probe: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
            open_ids, closed_ids = await asyncio.gather(
                self._tokenize(payload, probe, generation=True, tools=False),
                self._tokenize(
                    payload,
                    [*probe, {"role": "assistant", "content": ""}],
                    generation=False,
                    tools=False,
                ),
            )
            self._closing = (turn_closing(open_ids, closed_ids),)
        return self._closing[0]

    async def _tokenize(
        self, payload: dict[str, Any], messages: list[Any], *, generation: bool, tools: bool = True
    ) -> list[int]:
        """The engine's rendering of `messages` with the template the call uses."""
        request: dict[str, Any] = {
            "model": payload["model"],
            "messages": messages,
            "add_generation_prompt": generation,
        }
        for key in ("tools", "chat_template_kwargs") if tools else ():
            if payload.get(key) is not None:
                request[key] = payload[key]
        tokens = (await self.engine.request("POST", "/tokenize", request))["tokens"]
        # Every id's type at C speed: a genexpr's frame per id was a visible share of a
        # host's CPU per call (two renderings of the whole conversation per stitched call).
        if not isinstance(tokens, list) or not set(map(type, tokens)) <= {int}:
            raise EngineReplyError("/tokenize answered no token list")
        return tokens
