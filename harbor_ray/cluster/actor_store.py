"""`CallStore` for a stateless proxy replica: every session lives in its owner actor.

docs/architecture.md property 1. The key names the session and the session id names its
owner, so a replica needs no shared state: it asks the owner once for the key's digest
(and the session's sampling), caches that, and checks later keys itself. Admission and
records are one actor round trip each (docs/performance.md, "Ingress").

`record` is awaited before the agent gets its reply: a replica killed after answering
must not take the turn with it. The cost of that is one round trip per call, measured
by scripts/bench_cluster_proxy.py.

A session whose owner is gone, or that its owner closed, is over: authentication fails
(401), and admission, records and releases raise `SessionGone` (401 too): a reply whose
turn could not be recorded is not delivered.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.actor import ActorHandle
from ray.exceptions import RayActorError

from harbor_ray.capture.core.continuation import PrefixKey
from harbor_ray.capture.core.session_keys import digest_matches, owner_of, session_of
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.session import Admission, Counter, SessionGrant
from harbor_ray.cluster.owner import NAMESPACE, owner_actor_name
from harbor_ray.errors import SessionGone

_log = logging.getLogger(__name__)

# What an owner's failure looks like from here: the actor is dead or unreachable
# (RayActorError), no actor has its name (ValueError from get_actor), or the session
# is no longer in it (the owner's KeyError / SessionGone, re-raised by Ray as a
# subclass of the original).
_OWNER_GONE = (RayActorError, ValueError, LookupError)


class _Lru[K, V]:
    """A dict bounded by dropping the least recently used entry."""

    def __init__(self, capacity: int) -> None:
        self._items: OrderedDict[K, V] = OrderedDict()
        self._capacity = capacity

    def get(self, key: K) -> V | None:
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        self._items[key] = value
        self._items.move_to_end(key)
        if len(self._items) > self._capacity:
            self._items.popitem(last=False)

    def pop(self, key: K) -> None:
        self._items.pop(key, None)

    def __len__(self) -> int:
        return len(self._items)


@dataclass(frozen=True)
class _Entry:
    owner: ActorHandle[Any]
    digest: bytes
    grant: SessionGrant


class ActorSessionStore:
    """A `CallStore` against owner actors found by name.

    Not an `AdminStore`: sessions are opened and exported by their owners, so a
    replica's app has no admin routes.
    """

    def __init__(
        self,
        *,
        namespace: str = NAMESPACE,
        max_sessions: int = 100_000,
        max_owners: int = 10_000,
        holder: str | None = None,
    ) -> None:
        """`holder` names this process to owners (`owner.actor_holder`), so that an
        owner can give back the calls it admitted here if this process dies mid-call."""
        self._namespace = namespace
        self._holder = holder
        self._sessions: _Lru[str, _Entry] = _Lru(max_sessions)
        self._owners: _Lru[str, ActorHandle[Any]] = _Lru(max_owners)

    async def authenticate(self, key: str) -> SessionGrant | None:
        session_id = session_of(key)
        owner = owner_of(session_id) if session_id else None
        if session_id is None or owner is None:
            return None
        entry = self._sessions.get(session_id) or await self._fetch(session_id, owner)
        if entry is None or not digest_matches(key, entry.digest):
            return None
        return entry.grant

    async def admit(self, session_id: str, prefixes: Sequence[PrefixKey] = ()) -> Admission:
        try:
            owner = await self._owner_of(session_id)
            # The prefixes are a few digests; the answer carries the continued turn's ids.
            admission: Admission = await owner.admit.remote(
                session_id, self._holder, tuple(prefixes)
            )
            return admission
        except _OWNER_GONE as exc:
            self._forget(session_id, exc)
            raise SessionGone(session_id) from exc

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        await self._deliver(session_id, "record", lambda o: o.record.remote(session_id, turn))

    async def release(self, session_id: str, index: int, counter: Counter | None = None) -> None:
        await self._deliver(
            session_id, "release", lambda o: o.release.remote(session_id, index, counter)
        )

    # ---- owners -----------------------------------------------------------------

    async def _fetch(self, session_id: str, owner: str) -> _Entry | None:
        """Ask the owner for the session's digest, sampling and main loop; None if it has
        none."""
        try:
            handle = await self._owner_named(owner)
            granted = await handle.grant.remote(session_id)
        except _OWNER_GONE as exc:
            self._forget(session_id, exc)
            return None
        if granted is None:
            return None
        digest, sampling, main_loop = granted
        entry = _Entry(handle, digest, SessionGrant(session_id, sampling, main_loop))
        self._sessions.put(session_id, entry)
        return entry

    async def _owner_of(self, session_id: str) -> ActorHandle[Any]:
        entry = self._sessions.get(session_id)
        if entry is not None:
            return entry.owner
        # Authenticated, then pushed out of the cache by other sessions' traffic.
        owner = owner_of(session_id)
        if owner is None:  # no actor can hold it: gone, as a closed one (a 401)
            raise SessionGone(session_id)
        return await self._owner_named(owner)

    async def _owner_named(self, owner: str) -> ActorHandle[Any]:
        handle = self._owners.get(owner)
        if handle is None:
            # get_actor blocks on the GCS: keep it off the event loop serving requests.
            handle = await asyncio.to_thread(
                ray.get_actor, owner_actor_name(owner), namespace=self._namespace
            )
            self._owners.put(owner, handle)
        return handle

    async def _deliver(
        self, session_id: str, what: str, send: Callable[[ActorHandle[Any]], Any]
    ) -> None:
        try:
            await send(await self._owner_of(session_id))
        except _OWNER_GONE as exc:
            self._forget(session_id, exc)
            _log.info("%s for session %s refused: %s", what, session_id, exc)
            raise SessionGone(session_id) from exc

    def _forget(self, session_id: str, exc: BaseException) -> None:
        self._sessions.pop(session_id)
        if not isinstance(exc, LookupError):
            # The owner itself is gone, not just this session: look it up afresh next time.
            owner = owner_of(session_id)
            if owner is not None:
                self._owners.pop(owner)
