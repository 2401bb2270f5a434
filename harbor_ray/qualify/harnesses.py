"""Every harness Harbor knows, and whether qualification covers it or why not. Pure.

Harbor's own registry gives the names (`harbor_harnesses`, read where it is needed: the
qualify run and `harbor-ray info`), so a harness Harbor adds shows up here unassessed
rather than silently missing. `NOT_QUALIFIED` gives each harness outside `QUALIFIED` the
reason it is not qualified, as found on machines that reach only PyPI, npm and Debian:
"tried" where an install or a run was attempted, "read" where the reason comes from the
adapter's install script, "not tried" where nothing went further than reading.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from types import MappingProxyType

from harbor_ray.trials.agent_pins import PINS

__all__ = [
    "LEVEL_2_BLOCKED",
    "LEVEL_2_SEEN",
    "NOT_QUALIFIED",
    "QUALIFIED",
    "UNASSESSED",
    "Harness",
    "harbor_harnesses",
    "harness_table",
]


# The reason given to a harness Harbor knows that this table does not name.
UNASSESSED = "not assessed: Harbor knows it, this table does not name it yet"

_OUTSIDE = "downloads {what} from {where}, which these machines cannot reach (read)"

NOT_QUALIFIED: Mapping[str, str] = MappingProxyType(
    {
        "acp": "a client for agents from the ACP registry, not an agent of its own; it "
        "fetches uv from astral.sh, which is unreachable (read, not tried)",
        "antigravity-cli": _OUTSIDE.format(what="its install script", where="antigravity.google"),
        "computer-1": "a computer-use agent driving a desktop by screenshots; the sandbox "
        "has no desktop (read, not tried)",
        "cortex-code": _OUTSIDE.format(what="its install script", where="ai.snowflake.com"),
        "cursor-cli": _OUTSIDE.format(what="its install script", where="cursor.com"),
        "deerflow": "installed by a git clone from GitHub, which is unreachable (read)",
        "devin": "a hosted service: the model runs at Cognition, not on our engine (read)",
        "dspy-rlm": "tried: it runs on the host, in harbor-ray's process, its REPL in Deno "
        "(on PyPI and npm). Harbor 0.25's adapter passes RLM `max_iterations`, "
        'which dspy 3.3 renamed (3.4.1: "TypeError: RLM.__init__() got an '
        "unexpected keyword argument 'max_iterations'\"; 3.2.1 takes it), and "
        "the Deno runner of every dspy release checked (3.1.0 to 3.4.1) imports "
        "https://deno.land/std@0.186.0/io/mod.ts, which these machines cannot "
        'reach ("dns error" at runner.js:4:27). Past both it could not qualify '
        "either: each RLM iteration is a new [system, user] prompt with the "
        "earlier steps written into the user text (dspy's ChatAdapter and "
        "REPLHistory), never as the model's reply, so every call after the "
        "first starts a new agent root (read, dspy 3.2.1)",
        "eve": "runs a user's own Eve app project (its `path`), which Harbor's adapter "
        "installs with npm, pnpm or bun inside the sandbox, where there is no "
        "network, and serves over Eve's HTTP session API; unlike strands' factory, "
        "no sample app with its dependencies prebuilt is shipped yet (read, not "
        "tried)",
        "fx": _OUTSIDE.format(what="its install script", where="fx.sh"),
        "fx-dev": _OUTSIDE.format(what="its install script", where="fx.sh"),
        "goose": _OUTSIDE.format(what="its binary", where="GitHub releases"),
        "grok-build": _OUTSIDE.format(what="its install script", where="x.ai"),
        "hermes": _OUTSIDE.format(what="its install script", where="raw.githubusercontent.com"),
        "junie": _OUTSIDE.format(what="its installer", where="junie.jetbrains.com"),
        "kimi-cli": 'tried: 1.52.0, its last release, only prints "kimi-cli is no longer '
        'maintained. Please use the new Kimi Code CLI"; 1.51.0 dies at start on '
        'CPython 3.12.1 (the Python these machines have for it) with "TypeError: '
        'super(type, obj): obj must be an instance or subtype of type" (a generic '
        "frozen slots dataclass, CPython issue 116669; Harbor installs it on 3.13)",
        "mcode": "its package @minimax-ai/code is not on npm (404, tried)",
        "mimo": _OUTSIDE.format(what="its install script", where="mimo.xiaomi.com"),
        "muse-code": _OUTSIDE.format(what="its install script", where="dev.meta.ai"),
        "nemo-agent": "its default workflow (NAT's chat_completion) declares no tools: it "
        "writes the model's answer to /app/answer.txt and runs no command, so "
        "no task that needs a file made can be solved (read, not tried)",
        "nop": "does nothing and calls no model: nothing to capture",
        "oracle": "runs the task's solution and calls no model: nothing to capture",
        "rovodev-cli": _OUTSIDE.format(what="its package", where="Atlassian's apt repository"),
        "swe-agent": "installed only from GitHub, which is unreachable (tried); PyPI has no "
        "swe-agent, and its `sweagent` 0.0.1 (April 2024) has no `sweagent run` "
        "CLI nor the config/default.yaml Harbor's adapter runs (read)",
        "trae-agent": "installed only from GitHub, which is unreachable; PyPI and npm have "
        "no trae-agent (tried)",
    }
)


# The agents qualification covers, at both levels: the pinned CLIs but those tried and
# not qualified (their reasons above), and terminus-2 (Harbor's own).
_PINNED_NOT_QUALIFIED: frozenset[str] = frozenset()
QUALIFIED = (*sorted(set(PINS) - _PINNED_NOT_QUALIFIED), "terminus-2")
# Those of them seen to qualify at level 2 (the real model, CI's rotation): an agent
# qualified at level 1 is not counted at level 2 until its run there is seen.
LEVEL_2_SEEN = frozenset(
    {
        "aider",
        "antigravity-sdk",
        "claude-code",
        "cline-cli",
        "code-puppy",
        "codex",
        "copilot-cli",
        "fabric",
        "gemini-cli",
        "kimi-code",
        "langgraph",
        "mini-swe-agent",
        "openclaw",
        "opencode",
        "openhands",
        "openhands-sdk",
        "pi",
        "qwen-coder",
        "strands",
        "terminus-2",
        "vibe",
    }
)
# Those qualified at level 1 whose level-2 run was tried and cannot pass on these
# machines, and why (the report's and `info`'s "level 2" reason). None today: vibe,
# kimi-code and openclaw, whose first requests passed the default model's 8,192-token
# context as they ship, run at level 2 with qualify/run.py's SMALL_CONTEXT_KWARGS.
LEVEL_2_BLOCKED: Mapping[str, str] = MappingProxyType({})


@dataclass(frozen=True)
class Harness:
    """One harness Harbor knows: qualified, or the reason it is not."""

    name: str
    qualified: bool
    reason: str  # "" when qualified
    level_2: bool = False  # also seen to qualify at level 2 (LEVEL_2_SEEN)
    level_2_reason: str = ""  # why not at level 2, where that was tried (LEVEL_2_BLOCKED)


def harness_table(known: Iterable[str]) -> tuple[Harness, ...]:
    """Every harness in `known` (Harbor's registry) by name, each qualified or with the
    reason it is not."""
    return tuple(
        Harness(name, True, "", name in LEVEL_2_SEEN, LEVEL_2_BLOCKED.get(name, ""))
        if name in QUALIFIED
        else Harness(name, False, NOT_QUALIFIED.get(name, UNASSESSED))
        for name in sorted(set(known))
    )


def harbor_harnesses() -> list[str]:
    """The harness names Harbor's agent factory accepts (`--agent`)."""
    from harbor.agents.factory import AgentFactory

    names: list[str] = AgentFactory.registered_names()
    return names
