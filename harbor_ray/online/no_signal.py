"""Groups that carry signal (DAPO's dynamic sampling), pure: whether a finished group's
rewards vary, and, for a request that asked to drop those that do not, which task its
next replacement group runs and when the request's bound of extra groups is reached.

GRPO's advantage is a rollout's reward less its group's mean: a group whose rewards are
all equal has zero advantage everywhere and teaches nothing, at the cost of a full set of
rollouts. Such a group is dropped and a replacement group of the same size submitted, at
most `max_extra` times per request; past that, a group without signal is delivered
flagged (`Group.no_signal`), so that a trainer that needs a fixed number of samples per
step (TRL) still gets them. A group with a rollout the verifier never scored is not
judged (it is delivered as it is: a trainer already trains nothing of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

__all__ = ["Refill", "Verdict", "carries_signal", "judge"]


class Verdict(StrEnum):
    KEEP = "keep"  # its rewards vary, or it was not judged: delivered
    DROP = "drop"  # no signal: dropped, and a replacement runs in its place
    FLAG = "flag"  # no signal, but the request's extra groups are spent: delivered flagged


def carries_signal(rewards: Sequence[float | None]) -> bool | None:
    """Whether the rewards vary (exactly: any two differ); None when a rollout has no
    reward (not judged) or there are fewer than two."""
    if len(rewards) < 2 or any(r is None for r in rewards):
        return None
    return min(rewards) != max(rewards)  # type: ignore[type-var]  # no None left


@dataclass
class Refill:
    """One request's replacements: shared by every group the request made (its own and
    its replacements), so that the bound holds for the request as a whole.

    `tasks` are the request's, in its order; a replacement runs one of them, preferring
    those that have not yet finished a group without signal in this request (a task
    whose every rollout fails or passes would only be dropped again), round robin;
    when every task has, any of them (sampling may still give one signal). `origin` is
    what the caller needs to start a replacement's rollouts (opaque here)."""

    tasks: tuple[str, ...]
    max_extra: int
    origin: Any = None
    used: int = 0  # replacement groups made
    no_signal: set[str] = field(default_factory=set)  # tasks that gave a group none

    def next_task(self) -> str | None:
        """The task of the next replacement, counted as made; None past the bound."""
        if self.used >= self.max_extra:
            return None
        candidates = [t for t in self.tasks if t not in self.no_signal] or list(self.tasks)
        task = candidates[self.used % len(candidates)]
        self.used += 1
        return task


def judge(rewards: Sequence[float | None], refill: Refill | None) -> Verdict:
    """What becomes of a finished group with these rewards, under its request's `refill`
    (None: the request did not ask to drop groups without signal)."""
    if refill is None or carries_signal(rewards) is not False:
        return Verdict.KEEP
    return Verdict.DROP if refill.used < refill.max_extra else Verdict.FLAG
