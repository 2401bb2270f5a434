"""Which dialect and which kind of call a request is, decided before any parsing.

Path first, then headers, then body shape (docs/lessons.md: a misdetected route is parsed by
the wrong translator). Google puts streaming in the URL (`:streamGenerateContent`,
capital G), so paths are compared case-insensitively.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harbor_ray.capture.core.dialects.base import DialectName

CallKind = Literal["generate", "count_tokens", "models"]


@dataclass(frozen=True)
class CallRoute:
    dialect: DialectName
    kind: CallKind
    url_model: str | None = None
    url_stream: bool = False


_GOOGLE = re.compile(
    r"^(?:/v1beta|/v1alpha|/v1)?/models/(?P<model>[^/:]+):(?P<method>[a-z]+)$", re.IGNORECASE
)
_GOOGLE_METHODS: dict[str, tuple[CallKind, bool]] = {
    "generatecontent": ("generate", False),
    "streamgeneratecontent": ("generate", True),
    "counttokens": ("count_tokens", False),
}
_PATHS: dict[str, CallRoute] = {
    "/v1/chat/completions": CallRoute("chat", "generate"),
    "/chat/completions": CallRoute("chat", "generate"),
    "/v1/responses": CallRoute("responses", "generate"),
    "/responses": CallRoute("responses", "generate"),
    "/v1/responses/input_tokens": CallRoute("responses", "count_tokens"),
    "/v1/messages": CallRoute("anthropic", "generate"),
    "/messages": CallRoute("anthropic", "generate"),
    "/v1/messages/count_tokens": CallRoute("anthropic", "count_tokens"),
    "/messages/count_tokens": CallRoute("anthropic", "count_tokens"),
}
_MODELS_PATHS = frozenset({"/v1/models", "/models", "/v1beta/models"})


def detect(
    path: str,
    headers: Mapping[str, str],
    query: Mapping[str, str],
    body: Any = None,
) -> CallRoute | None:
    """The route of a request, or None when nothing identifies it.

    `body` is only consulted for paths that do not say the dialect themselves (a bare
    POST to the proxy root); pass None when it has not been parsed.
    """
    clean = "/" + path.strip("/").lower() if path.strip("/") else "/"
    google = _GOOGLE.match(path.rstrip("/"))
    if google:
        found = _GOOGLE_METHODS.get(google.group("method").lower())
        if found is None:
            return None
        kind, stream = found
        stream = stream or query.get("alt", "").lower() == "sse"
        return CallRoute("google", kind, url_model=google.group("model"), url_stream=stream)
    if clean in _MODELS_PATHS:
        dialect: DialectName = (
            "google"
            if clean.startswith("/v1beta")
            else ("anthropic" if _has_anthropic_header(headers) else "chat")
        )
        return CallRoute(dialect, "models")
    if clean in _PATHS:
        return _PATHS[clean]
    if clean in ("/", "/v1") and isinstance(body, dict):
        return _from_body(body, headers)
    return None


def answering_dialect(path: str, headers: Mapping[str, str]) -> DialectName:
    """The dialect to answer a request in when `detect` finds no call we serve (an
    unknown Google method, a method the route does not take): the caller's SDK reads
    errors only in its own shape."""
    clean = path.lower()
    if _GOOGLE.match(path.rstrip("/")) or clean.startswith(("/v1beta/", "/v1alpha/")):
        return "google"
    if "/messages" in clean or _has_anthropic_header(headers):
        return "anthropic"
    return "responses" if "/responses" in clean else "chat"


def _has_anthropic_header(headers: Mapping[str, str]) -> bool:
    return any(k.lower() == "anthropic-version" for k in headers)


def _from_body(body: dict[str, Any], headers: Mapping[str, str]) -> CallRoute | None:
    if _has_anthropic_header(headers):
        return CallRoute("anthropic", "generate")
    if "contents" in body:
        return CallRoute("google", "generate", url_model=body.get("model"))
    if "input" in body or "instructions" in body:
        return CallRoute("responses", "generate")
    if "messages" in body:
        return CallRoute("chat", "generate")
    return None
