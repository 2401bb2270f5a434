"""Aux token-count routes (Anthropic `count_tokens`, Google `countTokens`, OpenAI
`responses/input_tokens`): translated like a model call, answered without becoming one."""

from __future__ import annotations

from typing import Any

from harbor_ray.capture.core.detect import CallRoute
from harbor_ray.capture.core.dialects import DIALECTS, anthropic, google
from harbor_ray.capture.core.dialects.base import EngineCall


def count_call(route: CallRoute, body: dict[str, Any]) -> EngineCall:
    """The engine request whose prompt is being counted. Raises AgentRequestError."""
    if route.dialect == "anthropic":
        return anthropic.count_tokens_call(body)
    if route.dialect == "google":
        return google.count_tokens_call(body, route.url_model)
    return DIALECTS[route.dialect].to_engine(body, url_model=route.url_model, url_stream=False)
