"""The session owner: what a stateless proxy replica asks of the actor that holds a session.

ARCHITECTURE.md property 1. The actor that runs a rollout mints its session (so the key
names the owner) and keeps the records; replicas call these methods on it by name. An
actor embeds one `SessionOwner` and exposes its methods as its own.
"""

from __future__ import annotations

from typing import Any

import ray

from harbor_ray.capture.sampling import Sampling
from harbor_ray.capture.session import Admission, Counter, InMemorySessionStore, SessionInfo
from harbor_ray.capture.turn import TurnRecord

NAMESPACE = "harbor_ray"


def owner_actor_name(owner: str) -> str:
    """The named actor that owns every session whose id starts with `<owner>.`."""
    return f"sessions-{owner}"


class SessionOwner:
    """Sessions minted and held in this process, keyed by ids that name `owner`."""

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.store = InMemorySessionStore(owner=owner)

    async def open(self, *, budget: int | None, sampling: Sampling | None) -> SessionInfo:
        return await self.store.create(budget=budget, sampling=sampling)

    async def close(self, session_id: str) -> dict[str, Any] | None:
        """The session's export, after which the session is gone."""
        return await self.store.close(session_id)

    # What a replica calls, each one actor round trip.

    def grant(self, session_id: str) -> tuple[bytes, Sampling | None] | None:
        """The key's digest and the session's sampling, for the replica to check keys
        itself (and cache); None when the session is not (or no longer) here."""
        state = self.store.state(session_id)
        return None if state is None else (state.key_digest, state.sampling)

    async def admit(self, session_id: str) -> Admission:
        return await self.store.admit(session_id)

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        await self.store.record(session_id, turn)

    async def release(self, session_id: str, counter: Counter | None = None) -> None:
        await self.store.release(session_id, counter)

    async def count(self, session_id: str, counter: Counter) -> None:
        await self.store.count(session_id, counter)


def start_session_owner(owner: str, *, num_cpus: float = 0.0) -> Any:  # ActorHandle
    """An actor that only owns sessions (tests, benchmarks, sessions opened by a trainer).

    `SessionOwner`'s own methods are the actor's, so it answers replicas exactly as a
    rollout host does. The concurrency limit is high because every replica's admit and
    record calls for its sessions share it (Ray's default for async actors is 1,000).
    """
    remote = ray.remote(SessionOwner).options(
        name=owner_actor_name(owner), namespace=NAMESPACE, num_cpus=num_cpus,
        max_concurrency=100_000,
    )
    return remote.remote(owner)
