"""Where a rollout's trial is, as it gets there: the sandbox starting, the agent's setup,
the agent running, the verifier, the end. For a page that shows a starting run's stage
(the playground): a run spends seconds to minutes before its first model call, and which
of these it is in says whether to wait or to look.

Harbor's trial hooks mark the sandbox's start (ENVIRONMENT_START), the agent's run
(AGENT_START), the verifier's (VERIFICATION_START) and the end (END), but nothing between
the sandbox being up and the agent's first step: the agent's setup (installing its
harness, which can take longer than the rest) would read as "sandbox starting". Harbor
calls the agent's `setup` exactly once, as that stage begins (`Trial._setup_agent`;
`trial.result.agent_setup` only times it afterwards), so that call, on this trial's own
agent, is where the stage is heard.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from harbor.trial.hooks import TrialEvent, TrialHookEvent
from harbor.trial.trial import Trial

__all__ = ["Stage", "StageListener", "watch_stages"]


class Stage(StrEnum):
    """A trial's stages, in the order it reaches them."""

    SANDBOX = "sandbox"  # the sandbox starting
    AGENT_SETUP = "agent_setup"  # the agent's setup: its harness installed, its tools
    AGENT = "agent"  # the agent running: its model calls
    VERIFYING = "verifying"  # the task's verifier running
    ENDED = "ended"  # the trial over, its sandbox torn down


# Hears (rollout id, stage) as the trial reaches it, on the rollout's event loop: it must
# not block.
StageListener = Callable[[str, Stage], None]

_HOOKED = {
    TrialEvent.ENVIRONMENT_START: Stage.SANDBOX,
    TrialEvent.AGENT_START: Stage.AGENT,
    TrialEvent.VERIFICATION_START: Stage.VERIFYING,
    TrialEvent.END: Stage.ENDED,
}
_SETUP = "setup"  # the agent's method Harbor calls once, as its setup begins


def watch_stages(trial: Trial, rollout_id: str, listener: StageListener) -> None:
    """Have `listener` hear each stage `trial` reaches, before it runs."""
    for event, stage in _HOOKED.items():
        trial.add_hook(event, _heard(listener, rollout_id, stage))
    setup = trial.agent.setup

    async def announced(*args: Any, **kwargs: Any) -> None:
        listener(rollout_id, Stage.AGENT_SETUP)
        await setup(*args, **kwargs)

    # On this trial's agent instance only: its class and other trials are untouched.
    setattr(trial.agent, _SETUP, announced)


def _heard(
    listener: StageListener, rollout_id: str, stage: Stage
) -> Callable[[TrialHookEvent], Any]:
    async def hook(_: TrialHookEvent) -> None:
        listener(rollout_id, stage)

    return hook
