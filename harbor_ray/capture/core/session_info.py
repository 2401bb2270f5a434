"""What opening a capture session gives its rollout: the session's id, the key its agent
sends, and the limits every call in it obeys. A plain record, so the trial layer that
wires an agent to the proxy needs nothing of the proxy's session stores."""

from __future__ import annotations

from dataclasses import dataclass

from harbor_ray.capture.core.sampling import Sampling

__all__ = ["SessionInfo"]


@dataclass(frozen=True)
class SessionInfo:
    session_id: str
    key: str
    budget: int | None  # model calls the session admits; None: no limit
    sampling: Sampling | None = None
