"""Server-sent events framing, shared by every dialect's synthetic stream."""

from __future__ import annotations

import json
from typing import Any

KEEPALIVE: bytes = b": keepalive\n\n"


def sse_event(data: Any, event: str | None = None) -> bytes:
    """One SSE frame. `data` is JSON-encoded unless it is already text (e.g. `[DONE]`)."""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {payload}\n\n".encode()
