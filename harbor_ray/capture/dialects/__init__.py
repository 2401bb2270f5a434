"""The four wire dialects agents speak, by name."""

from __future__ import annotations

from harbor_ray.capture.dialects.anthropic import ANTHROPIC
from harbor_ray.capture.dialects.base import Dialect, DialectName
from harbor_ray.capture.dialects.chat import CHAT
from harbor_ray.capture.dialects.google import GOOGLE
from harbor_ray.capture.dialects.responses import RESPONSES

DIALECTS: dict[DialectName, Dialect] = {
    "chat": CHAT,
    "responses": RESPONSES,
    "anthropic": ANTHROPIC,
    "google": GOOGLE,
}

__all__ = ["DIALECTS", "Dialect", "DialectName"]
