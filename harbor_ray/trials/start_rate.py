"""How fast sandboxes may be created: a token bucket every sandbox start of a run goes
through first (a rollout's, and a warm pool's refill).

Cloud backends cap creation per workspace (Modal at about 5 a second), and a sweep that
starts hundreds of rollouts at once would otherwise meet that cap as failed starts. The
bucket holds `burst` tokens, refilled at `per_s` a second; a start with no token waits
until its own comes (reservations are in arrival order, so no start waits twice).
`TokenBucket` is pure (the time is passed in); one bucket per backend serves a whole run
from a Ray actor (cluster/start_bucket.py), and `wait_turn` is a start's side of it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

Reserve = Callable[[], Awaitable[float]]  # takes a token: the wall-clock time it is due


@dataclass(frozen=True)
class StartRate:
    """Sandbox creations allowed: `per_s` a second on average, `burst` at once."""

    per_s: float
    burst: int = 1

    @classmethod
    def of(cls, per_s: float) -> StartRate | None:
        """The rate a setting names; None for 0 (no limit)."""
        return cls(per_s=per_s) if per_s else None


class TokenBucket:
    def __init__(self, rate: StartRate, now: float) -> None:
        self.rate = rate
        self._tokens = float(rate.burst)  # below zero: starts reserved ahead of refill
        self._at = now

    def reserve(self, now: float) -> float:
        """Take a token: the seconds from `now` until this start may go."""
        rate = self.rate
        self._tokens = min(rate.burst, self._tokens + (now - self._at) * rate.per_s)
        self._at = now
        self._tokens -= 1
        return max(0.0, -self._tokens / rate.per_s)


async def wait_turn(
    reserve: Reserve,
    *,
    clock: Callable[[], float] = time.time,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
) -> None:
    """Wait until the start that takes a token from `reserve` may go. The token names
    the moment it is due, not a wait: the time its answer took to arrive is not waited
    again (a wait that began on arrival made a slow answer's start late and bunched it
    with the next ones). Wall-clock time, the one clock a cluster's nodes share."""
    if (wait := await reserve() - clock()) > 0:
        await sleep(wait)
