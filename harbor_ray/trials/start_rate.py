"""How fast sandboxes may be created: a token bucket every rollout on a host goes through
before its trial (and so its sandbox) starts.

Cloud backends cap creation per workspace (Modal at about 5 a second), and a sweep that
starts hundreds of rollouts at once would otherwise meet that cap as failed starts. The
bucket holds `burst` tokens, refilled at `per_s` a second; a start with no token waits
until its own comes (reservations are in arrival order, so no start waits twice).
`TokenBucket` is pure (the time is passed in); `StartLimiter` waits on it.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class StartRate:
    """Sandbox creations allowed: `per_s` a second on average, `burst` at once."""

    per_s: float
    burst: int = 1


def host_share(starts_per_s: float, ceiling: int, rollouts_per_host: int) -> StartRate | None:
    """Each host's even share of `starts_per_s` for a whole run (no call between hosts
    per start), over the hosts `ceiling` rollouts at `rollouts_per_host` need; None: no
    limit (0)."""
    if not starts_per_s:
        return None
    return StartRate(per_s=starts_per_s / math.ceil(ceiling / rollouts_per_host))


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


class StartLimiter:
    """`wait` until a start may go; `clock` and `sleep` replace time in tests."""

    def __init__(self, rate: StartRate, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        self._clock, self._sleep = clock, sleep
        self._bucket = TokenBucket(rate, clock())

    async def wait(self) -> None:
        if (delay := self._bucket.reserve(self._clock())) > 0:
            await self._sleep(delay)
