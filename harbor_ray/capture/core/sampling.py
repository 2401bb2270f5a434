"""Sampling settings a rollout imposes on every model call its agent makes.

RL needs the trainer's sampling, not whatever each harness defaults to: temperature,
top_p, top_k and seed replace the agent's values; max_tokens caps the agent's (an agent
asking for fewer keeps its smaller limit).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_REPLACED = ("temperature", "top_p", "top_k", "seed")
_LIMIT_KEYS = ("max_tokens", "max_completion_tokens")


# What the engine request's encoder (and the engine) take: a 64-bit signed integer.
INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


class Sampling(BaseModel):
    # Bounded, so that every value accepted can be sent to the engine and shown back.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature: float | None = Field(None, ge=0, description="Replaces the agent's value.")
    top_p: float | None = Field(None, gt=0, le=1, description="Replaces the agent's value.")
    top_k: int | None = Field(None, ge=-1, le=INT64_MAX,
                              description="Replaces the agent's value (-1: off).")
    seed: int | None = Field(None, ge=_INT64_MIN, le=INT64_MAX,
                             description="Replaces the agent's value.")
    max_tokens: int | None = Field(None, gt=0, le=INT64_MAX,
                                   description="Caps the agent's max tokens.")

    def apply(self, body: dict[str, Any]) -> None:
        """Impose these settings on an engine request body, in place."""
        for name in _REPLACED:
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if self.max_tokens is not None:
            asked = [body.pop(k) for k in _LIMIT_KEYS if isinstance(body.get(k), int)]
            body["max_tokens"] = min([self.max_tokens, *asked])
