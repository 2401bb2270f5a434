"""Which model calls are an agent's side calls, not its own loop: pure.

Coding agents make calls besides their main loop: a session title, a topic check, a
memory or summary manager, classifiers on a small model. Recorded as agent turns, each
would become a root of its own among the agent's trees. The session knows the agent's
main model name (the rollout opens it with `MainLoop`), and harbor_ray wires every
small/fast slot to a different name (trials.agents.AUX_MODEL), so most side calls are
told apart by the model they ask for. Some agents make side calls on the main model
itself; those are told by a per-agent rule on what the request says, each found in the
CLI's recorded request bodies (tests/agent_bodies/).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

__all__ = ["RULES", "MainLoop", "is_auxiliary"]


@dataclass(frozen=True)
class MainLoop:
    """What a session knows of its agent's own loop."""

    model: str | None = None  # the model name the agent's main slot asks for
    agent: str | None = None  # the Harbor agent name, for its own rules (RULES)


def _bare(model: str) -> str:
    """A model name without the provider or resource prefix a client may add
    (`models/gemini-x`, `openai/x`): served names may hold a `/` themselves
    (`org/model`), so only the last segment is compared."""
    return model.rsplit("/", 1)[-1]


def _system_text(body: Mapping[str, Any]) -> str:
    """The text of the leading system messages of an engine (chat) body."""
    parts: list[str] = []
    for message in body.get("messages") or ():
        if not isinstance(message, Mapping) or message.get("role") != "system":
            break
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            parts += [
                p["text"]
                for p in content
                if isinstance(p, Mapping) and isinstance(p.get("text"), str)
            ]
    return "\n".join(parts)


Rule = Callable[[Mapping[str, Any]], bool]


def _system_starts_with(*markers: str) -> Rule:
    def rule(body: Mapping[str, Any]) -> bool:
        text = _system_text(body).lstrip()
        return any(text.startswith(marker) for marker in markers)

    return rule


# Side calls made on the main model, by agent (Harbor names). What each rule looks for
# is in the recorded body it is tested on.
RULES: Mapping[str, Rule] = MappingProxyType(
    {
        # Its title generator runs on `small_model` when set (then the model rule applies),
        # else on the main model, with this system prompt.
        "opencode": _system_starts_with("You are a title generator"),
        # Its managed-memory extractor runs in the background on the main model.
        "qwen-coder": _system_starts_with(
            "You are now acting as the managed memory extraction subagent"
        ),
    }
)


def is_auxiliary(main: MainLoop | None, request_model: str, body: Mapping[str, Any]) -> bool:
    """Whether a call (its requested model, its engine body) is a side call."""
    if main is None:
        return False
    if main.model and request_model and _bare(request_model) != _bare(main.model):
        return True
    rule = RULES.get(main.agent or "")
    return rule is not None and rule(body)
