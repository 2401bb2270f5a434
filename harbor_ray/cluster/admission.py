"""How many rollouts may be in flight, decided from the engines' load.

Pure: the poller (metrics_poller.py) hands each `EngineLoad` and the rollouts in
flight to `AdmissionController.observe`, which returns the new limit; nothing here
reads a clock or the network. The rule is additive-increase, multiplicative-decrease
within a floor and a ceiling:

- pressure (a preemption since the last sample, requests queued inside the engines, or
  the fullest KV cache at or above `kv_high`): cut the limit by `cut` (at least one);
- room (no preemption, nothing queued, KV below `kv_low`) while the limit is in use
  (as many rollouts in flight as it allows): raise it by `grow` of itself (at least one);
- otherwise hold it.

A rollout's model calls come in bursts between tool calls, so the engines' queue is the
early sign that more rollouts cost throughput: preempted requests are recomputed, and
every rollout in flight waits longer for each turn.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from harbor_ray.cluster.engine_metrics import EngineLoad
from harbor_ray.errors import StartError


def check_cap_order(
    floor: int,
    start: int,
    ceiling: int,
    names: tuple[str, str, str] = ("floor", "start", "ceiling"),
) -> None:
    """Raise StartError unless 1 <= floor <= start <= ceiling, naming each by `names`
    (the flags or fields that set them)."""
    if not 1 <= floor <= start <= ceiling:
        low, first, high = names
        raise StartError(
            f"the adaptive cap needs 1 <= {low} ({floor}) <= {first} "
            f"({start}) <= {high} ({ceiling})"
        )


@dataclass(frozen=True)
class AdmissionPolicy:
    """The limits and thresholds of the adaptive cap."""

    floor: int  # never fewer rollouts allowed
    ceiling: int  # never more
    start: int  # the limit before the first sample
    kv_high: float = 0.9  # KV usage at or above: pressure
    kv_low: float = 0.75  # KV usage below (with nothing queued): room to grow
    waiting_allowed: int = 0  # requests queued inside the engines that are not pressure
    grow: float = 0.25  # a rise, as a fraction of the limit
    cut: float = 0.25  # a cut, as a fraction of the limit
    # What the bounds are called where they were set (flags, YAML fields), for the check.
    names: tuple[str, str, str] = field(
        default=("floor", "start", "ceiling"), compare=False, repr=False
    )

    def __post_init__(self) -> None:
        check_cap_order(self.floor, self.start, self.ceiling, self.names)
        if not 0 < self.kv_low <= self.kv_high:
            raise StartError("the KV thresholds need 0 < kv_low <= kv_high")
        if not (self.grow > 0 and 0 < self.cut < 1):
            raise StartError("grow must be positive and cut between 0 and 1")


class AdmissionController:
    """The limit, moved by each sample of the engines' load."""

    def __init__(self, policy: AdmissionPolicy) -> None:
        self.policy = policy
        self.limit = policy.start
        self._preemptions: float | None = None  # the counter at the last sample

    def observe(self, load: EngineLoad, in_flight: int) -> int:
        """The limit after `load`, seen with `in_flight` rollouts running."""
        policy = self.policy
        preempted = (
            self._preemptions is not None and load.preemptions > self._preemptions
        )  # a drop: an engine restarted
        self._preemptions = load.preemptions
        if (
            preempted
            or load.waiting > policy.waiting_allowed
            or load.kv_cache_usage >= policy.kv_high
        ):
            cut = max(1, math.floor(self.limit * policy.cut))
            self.limit = max(policy.floor, self.limit - cut)
        elif load.kv_cache_usage < policy.kv_low and in_flight >= self.limit:
            grow = max(1, math.floor(self.limit * policy.grow))
            self.limit = min(policy.ceiling, self.limit + grow)
        return self.limit
