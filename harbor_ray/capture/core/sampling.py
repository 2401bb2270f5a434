"""Sampling settings a rollout imposes on every model call its agent makes.

RL needs the trainer's sampling, not whatever each harness defaults to: temperature,
top_p, top_k, min_p and seed replace the agent's values; max_tokens caps the agent's (an
agent asking for fewer keeps its smaller limit). `TurnSampling` is what one engine
request carried, recorded with its turn: a trainer re-scores at that temperature.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

_REPLACED = ("temperature", "top_p", "top_k", "min_p", "seed")
_LIMIT_KEYS = ("max_tokens", "max_completion_tokens")


# What the engine request's encoder (and the engine) take: a 64-bit signed integer.
INT64_MAX = 2**63 - 1
_INT64_MIN = -(2**63)


class Sampling(BaseModel):
    # Bounded, so that every value accepted can be sent to the engine and shown back.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature: float | None = Field(None, ge=0, description="Replaces the agent's value.")
    top_p: float | None = Field(None, gt=0, le=1, description="Replaces the agent's value.")
    top_k: int | None = Field(
        None, ge=-1, le=INT64_MAX, description="Replaces the agent's value (-1: off)."
    )
    min_p: float | None = Field(None, ge=0, le=1, description="Replaces the agent's value.")
    seed: int | None = Field(
        None, ge=_INT64_MIN, le=INT64_MAX, description="Replaces the agent's value."
    )
    max_tokens: int | None = Field(
        None, gt=0, le=INT64_MAX, description="Caps the agent's max tokens."
    )

    def apply(self, body: dict[str, Any]) -> None:
        """Impose these settings on an engine request body, in place."""
        for name in _REPLACED:
            value = getattr(self, name)
            if value is not None:
                body[name] = value
        if self.max_tokens is not None:
            asked = [body.pop(k) for k in _LIMIT_KEYS if isinstance(body.get(k), int)]
            body["max_tokens"] = min([self.max_tokens, *asked])


@dataclass(frozen=True)
class TurnSampling:
    """The settings that shape the distribution a turn's tokens were drawn from, as its
    engine request carried them. None: the request did not set it, so the engine's
    default applied (vLLM's: the model's generation config, else temperature 1, no
    top-p/top-k/min-p)."""

    temperature: float | None = None
    top_p: float | None = None
    top_k: int | None = None
    min_p: float | None = None

    @staticmethod
    def of(body: dict[str, Any]) -> TurnSampling:
        """What `body` (an engine request) asks for; a value of the wrong type (which the
        engine would refuse) counts as unset. Calls sampled alike share one instance: a
        session holds its turns for the rollout's life, and an object per turn would be
        one more for every pass of the garbage collector to walk."""
        return _shared(
            _number(body.get("temperature")),
            _number(body.get("top_p")),
            _integer(body.get("top_k")),
            _number(body.get("min_p")),
        )


@functools.lru_cache(maxsize=256)
def _shared(
    temperature: float | None, top_p: float | None, top_k: int | None, min_p: float | None
) -> TurnSampling:
    return TurnSampling(temperature, top_p, top_k, min_p)


def _number(value: Any) -> float | None:
    # bool is an int subclass; `true` is no temperature.
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _integer(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and _INT64_MIN <= value <= INT64_MAX
    return value if ok else None
