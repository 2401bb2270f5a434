"""What a capture app needs to know besides its session store and its engine."""

from __future__ import annotations

from dataclasses import dataclass

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.host_names import LOOPBACK_NAMES

__all__ = ["CaptureSettings"]


@dataclass(frozen=True)
class CaptureSettings:
    """What the app needs to know besides its store and engine."""

    served_model: str
    admin_key: str | None = None
    max_body_bytes: int = 32 * 1024 * 1024
    # The request head: the URL (path and query), and the request line and headers
    # together. The servers of this package refuse a larger one while reading it
    # (server.py); the app checks again for servers that do not (Serve's HTTP proxy).
    max_url_bytes: int = 16 * 1024
    max_header_bytes: int = 64 * 1024
    keepalive_s: float = 10.0
    default_budget: int | None = None
    # A call that continues a recorded turn's conversation gets that turn's prompt +
    # sampled ids as the start of its prompt (continuation.py); False: the engine
    # renders every prompt from the messages.
    stitch: bool = True
    # What each call records (capture_level.py). Below `tokens` the engine sends no ids,
    # so nothing is stitched whatever `stitch` says, and no turn is trainable.
    capture: CaptureLevel = "tokens"
    # Which logprobs the engine returns (`Certification.logprobs_mode`), recorded with
    # every turn; None: not known (the engine was not certified here).
    logprobs_mode: str | None = None
    # The Host names answered besides any IP address (agents reach the proxy by
    # address); `*`: any. A name agents use (a tunnel's, a service's) must be listed.
    allowed_hosts: tuple[str, ...] = LOOPBACK_NAMES
