"""Which API the proxy forwards model calls to: an upstream profile.

`openai-chat` is an engine's OpenAI-compatible chat completions (vLLM, SGLang): the
default, and the only profile that can return token ids, so the only one training can
use. The others are hosted APIs, reached in their own wire format for evaluation:
`openai-responses` (OpenAI's Responses API), `anthropic` (Messages), `google`
(generateContent) and `hf` (a Hugging Face inference provider: OpenAI chat behind its
router, with a token). A profile names the dialect it speaks, so a request in that
dialect goes as it came (native_request.py), and how its credential is sent.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from harbor_ray.capture.core.dialects.base import DialectName

__all__ = ["PROFILES", "UpstreamName", "UpstreamProfile"]

UpstreamName = Literal["openai-chat", "openai-responses", "anthropic", "google", "hf"]

# The Messages API version every request names (Anthropic requires the header).
ANTHROPIC_VERSION = "2023-06-01"


@dataclass(frozen=True)
class UpstreamProfile:
    """One upstream API: the dialect it speaks, where it lives unless told, and how it
    takes its key."""

    name: UpstreamName
    dialect: DialectName
    default_url: str | None  # None: there is no default (an engine the user runs)
    key_header: str  # the header that carries the key
    key_prefix: str = ""  # before the key in that header ("Bearer ")
    fixed_headers: tuple[tuple[str, str], ...] = ()  # sent with every request

    @property
    def native(self) -> bool:
        """Whether the proxy speaks the API in its own format (not as an engine)."""
        return self.dialect != "chat"

    def headers(self, key: str | None) -> dict[str, str]:
        """The headers every request to the upstream carries (none for no key)."""
        headers = dict(self.fixed_headers)
        if key is not None:
            headers[self.key_header] = f"{self.key_prefix}{key}"
        return headers


PROFILES: dict[UpstreamName, UpstreamProfile] = {
    "openai-chat": UpstreamProfile("openai-chat", "chat", None, "authorization", "Bearer "),
    "openai-responses": UpstreamProfile(
        "openai-responses", "responses", "https://api.openai.com", "authorization", "Bearer "
    ),
    "anthropic": UpstreamProfile(
        "anthropic",
        "anthropic",
        "https://api.anthropic.com",
        "x-api-key",
        fixed_headers=(("anthropic-version", ANTHROPIC_VERSION),),
    ),
    "google": UpstreamProfile(
        "google", "google", "https://generativelanguage.googleapis.com", "x-goog-api-key"
    ),
    "hf": UpstreamProfile(
        "hf", "chat", "https://router.huggingface.co", "authorization", "Bearer "
    ),
}
