"""`/v1/models` in each dialect's shape: agents probe it at start-up; it lists the one
model the proxy serves, whatever name the agent will ask for."""

from __future__ import annotations

from typing import Any

from harbor_ray.capture.core.dialects.base import DialectName


def models_reply(dialect: DialectName, served_model: str) -> dict[str, Any]:
    if dialect == "anthropic":
        return {
            "data": [
                {
                    "type": "model",
                    "id": served_model,
                    "display_name": served_model,
                    "created_at": "1970-01-01T00:00:00Z",
                }
            ],
            "has_more": False,
            "first_id": served_model,
            "last_id": served_model,
        }
    if dialect == "google":
        return {
            "models": [
                {
                    "name": f"models/{served_model}",
                    "displayName": served_model,
                    "supportedGenerationMethods": ["generateContent", "countTokens"],
                }
            ]
        }
    return {
        "object": "list",
        "data": [{"id": served_model, "object": "model", "created": 0, "owned_by": "harbor_ray"}],
    }
