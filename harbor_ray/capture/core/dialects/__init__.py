"""The four wire dialects agents speak, by name."""

from __future__ import annotations

from harbor_ray.capture.core.dialects.anthropic import ANTHROPIC
from harbor_ray.capture.core.dialects.base import Dialect, DialectName
from harbor_ray.capture.core.dialects.chat import CHAT
from harbor_ray.capture.core.dialects.google import GOOGLE
from harbor_ray.capture.core.dialects.responses import RESPONSES

DIALECTS: dict[DialectName, Dialect] = {
    "chat": CHAT,
    "responses": RESPONSES,
    "anthropic": ANTHROPIC,
    "google": GOOGLE,
}

__all__ = ["DIALECTS", "Dialect", "DialectName"]
