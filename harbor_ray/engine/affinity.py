"""Which engine replica serves each session's next call: the sticky map, Ray-free.

An agent's calls resend their whole conversation, so the replica that served a
session's last call holds its prefix in its KV cache; any other replica computes the
prompt again. `SessionAffinity` keeps one replica per session:

- a session's first call goes to the least loaded live replica (fewest calls in
  flight, then fewest sessions held, then by name, so equal replicas fill evenly and
  the choice is reproducible);
- a later call goes where the last one was served (`served` moves the session when a
  call landed elsewhere, e.g. its replica refused it as full);
- a session whose replica died or drains (no longer among the live ones) moves to the
  least loaded of the others at its next call;
- memory is bounded: a session not seen for `idle_s` is forgotten (a closed session's
  next call never comes), and past `max_sessions` the least recently seen go first.

The caller passes the time in (`now`, any monotonic clock) and the replicas' loads;
nothing here reads a clock or knows Ray (`harbor_ray.engine.routing` is the Serve edge).
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["AffinityLimits", "SessionAffinity"]


@dataclass(frozen=True)
class AffinityLimits:
    """How long and how many sessions the map remembers."""

    idle_s: float = 1800.0
    """A session not seen for this long is forgotten. Longer than an agent's longest
    pause between calls (a slow tool, a long test run), or its next call may move."""
    max_sessions: int = 100_000
    """Sessions remembered at most; the least recently seen are forgotten first."""

    def __post_init__(self) -> None:
        assert self.idle_s > 0, f"idle_s must be positive, got {self.idle_s!r}"
        assert self.max_sessions >= 1, f"max_sessions must be at least 1, got {self.max_sessions!r}"


@dataclass(frozen=True)
class _Placement:
    replica: str
    seen: float


class SessionAffinity:
    """The replica of every session seen lately, and how many sessions each holds."""

    def __init__(self, limits: AffinityLimits | None = None) -> None:
        self.limits = limits or AffinityLimits()
        # Least recently seen first, so forgetting idle sessions stops at the first
        # one still fresh.
        self._sessions: OrderedDict[str, _Placement] = OrderedDict()
        self._held: Counter[str] = Counter()

    def __len__(self) -> int:
        return len(self._sessions)

    def replica_of(self, session: str) -> str | None:
        """The replica `session`'s next call goes to, if it has one."""
        placement = self._sessions.get(session)
        return None if placement is None else placement.replica

    def held(self, replica: str) -> int:
        """Sessions placed on `replica` now."""
        return self._held[replica]

    def choose(self, session: str, loads: Mapping[str, int], now: float) -> list[str]:
        """The live replicas (the keys of `loads`, each with its calls in flight) for
        `session`'s call, best first: the one that served its last call, else the least
        loaded. The rest follow, least loaded first, for a caller whose first choice
        refuses the call. The session is placed on the first; [] when none is live."""
        self.forget_idle(now)
        by_load = sorted(loads, key=lambda r: (loads[r], self._held[r], r))
        if not by_load:
            return []
        current = self.replica_of(session)
        first = current if current is not None and current in loads else by_load[0]
        self._place(session, first, now)
        return [first, *(r for r in by_load if r != first)]

    def served(self, session: str, replica: str, now: float) -> None:
        """`replica` took `session`'s call: its next call goes there too."""
        self._place(session, replica, now)

    def live(self, replicas: Iterable[str]) -> int:
        """Only `replicas` are live now: sessions on any other (dead, drained) are
        forgotten, so their next call goes to the least loaded live one. Returns how
        many sessions were moved."""
        alive = frozenset(replicas)
        gone = [s for s, p in self._sessions.items() if p.replica not in alive]
        for session in gone:
            self._drop(session)
        return len(gone)

    def forget_idle(self, now: float) -> int:
        """Forget sessions not seen for `limits.idle_s`; returns how many."""
        expired = 0
        while self._sessions:
            session, placement = next(iter(self._sessions.items()))
            if now - placement.seen < self.limits.idle_s:
                break
            self._drop(session)
            expired += 1
        return expired

    def _place(self, session: str, replica: str, now: float) -> None:
        placement = self._sessions.pop(session, None)
        if placement is not None:
            self._unhold(placement.replica)
        # A clock that steps back (a caller's bug, or two callers' clocks) must not put a
        # session behind older ones: the order is what forget_idle walks.
        latest = next(reversed(self._sessions.values())).seen if self._sessions else now
        self._sessions[session] = _Placement(replica, max(now, latest))
        self._held[replica] += 1
        while len(self._sessions) > self.limits.max_sessions:
            self._drop(next(iter(self._sessions)))

    def _drop(self, session: str) -> None:
        self._unhold(self._sessions.pop(session).replica)

    def _unhold(self, replica: str) -> None:
        self._held[replica] -= 1
        if self._held[replica] <= 0:
            del self._held[replica]
