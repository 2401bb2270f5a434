"""How much of each model call an engine lets the proxy record: its capture level.

`tokens`: the prompt and sampled token ids and their logprobs (vLLM's
`return_token_ids`), everything training needs. `logprobs`: per-token logprobs but no
ids (a hosted model's `logprobs: true`). `text`: neither, only the conversation and the
usage counts. Only `tokens` can be trained on; the others evaluate a model.
"""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["CAPTURE_LEVELS", "CaptureLevel", "ask_for", "capture_fields", "covers", "lowest"]

CaptureLevel = Literal["tokens", "logprobs", "text"]

# Most first: a level records everything the ones after it do.
CAPTURE_LEVELS: tuple[CaptureLevel, ...] = ("tokens", "logprobs", "text")


def covers(offered: CaptureLevel, wanted: CaptureLevel) -> bool:
    """Whether an engine at `offered` records all that `wanted` asks for."""
    return CAPTURE_LEVELS.index(offered) <= CAPTURE_LEVELS.index(wanted)


def lowest(levels: list[CaptureLevel]) -> CaptureLevel:
    """The level all of `levels` reach (`tokens` for none)."""
    return max(levels, key=CAPTURE_LEVELS.index, default="tokens")


def capture_fields(level: CaptureLevel) -> dict[str, Any]:
    """The request fields that ask the engine for what `level` records, and no more: a
    hosted API refuses a field it does not know (`return_token_ids`)."""
    if level == "tokens":
        return {"return_token_ids": True, "logprobs": True}
    if level == "logprobs":
        return {"logprobs": True}
    return {}


def ask_for(body: dict[str, Any], level: CaptureLevel) -> None:
    """Set `body`'s capture fields for `level`. Below `tokens` an agent's own
    `return_token_ids` (Harbor's agents ask for ids) is dropped: the engine cannot honour
    it, and a hosted API refuses the whole call for it."""
    if level != "tokens":
        body.pop("return_token_ids", None)
    body.update(capture_fields(level))
