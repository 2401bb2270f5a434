"""The one place that decides what the engine is asked, whatever the agent's dialect.

docs/lessons.md: some agents send `tools: []` once their loop has no tools left and vLLM
answers 400, truncating the trajectory; the capture fields must always be requested,
or a rollout looks normal and carries no token ids.
"""

from __future__ import annotations

from typing import Any

from harbor_ray.capture.core.capture_level import CaptureLevel, ask_for
from harbor_ray.capture.core.dialects.base import EngineCall
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.errors import AgentRequestError

# Streaming is synthesised by the proxy, so the engine never streams.
_DROPPED = ("stream", "stream_options", "model")


def engine_body(
    call: EngineCall,
    served_model: str,
    sampling: Sampling | None = None,
    capture: CaptureLevel = "tokens",
) -> dict[str, Any]:
    """The exact chat-completions body sent to the engine for one agent call, asking
    for what the `capture` level records."""
    body = {k: v for k, v in call.body.items() if k not in _DROPPED}
    n = body.pop("n", 1)
    if n not in (1, None):
        raise AgentRequestError(
            f"n={n} is not supported: each model call must be one recorded turn; "
            "send n separate requests instead"
        )
    if not body.get("tools"):
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            body.pop(key, None)
    if sampling is not None:
        sampling.apply(body)
    body["model"] = served_model
    body["stream"] = False
    ask_for(body, capture)
    return body
