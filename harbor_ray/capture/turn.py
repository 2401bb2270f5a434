"""One recorded model call: the unit the rollout graph is built from."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass(frozen=True, eq=False)
class TurnRecord:
    """Exactly what the engine saw and produced for one admitted model call.

    Ids are the engine's own (int32); `logprobs` is float32 aligned with `token_ids`,
    NaN where the engine gave none. A field the engine did not send is None, never
    filled in, so validation can report it. Times are supplied by the edge (seconds).
    """

    index: int  # admission order within the session, 0-based, assigned by the owner
    dialect: str
    prompt_ids: np.ndarray | None
    token_ids: np.ndarray | None
    logprobs: np.ndarray | None
    finish_reason: str
    request_messages: tuple[dict[str, Any], ...] = ()
    response_message: dict[str, Any] = field(default_factory=dict)
    request_model: str = ""
    started_at: float = 0.0
    ended_at: float = 0.0
    # Set by the edge when it knows the call is not part of the agent's own loop
    # (e.g. a title or summary call); such trees get the role "auxiliary".
    auxiliary: bool = False
