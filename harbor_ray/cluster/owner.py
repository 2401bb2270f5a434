"""The session owner: what a stateless proxy replica asks of the actor that holds a session.

docs/architecture.md property 1. The actor that runs a rollout mints its session (so the key
names the owner) and keeps the records; replicas call these methods on it by name. An
actor embeds one `SessionOwner` and exposes its methods as its own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import ray
from ray.exceptions import RayActorError

from harbor_ray.capture.core.auxiliary import MainLoop
from harbor_ray.capture.core.continuation import PrefixKey
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.journal_file import JournalFile
from harbor_ray.capture.proxy.session import (
    Admission,
    Counter,
    InMemorySessionStore,
    StoreSessions,
)

NAMESPACE = "harbor_ray"
_PING_S = 10.0  # an actor that does not answer this fast is busy, not known dead


def owner_actor_name(owner: str) -> str:
    """The named actor that owns every session whose id starts with `<owner>.`."""
    return f"sessions-{owner}"


class SessionOwner(StoreSessions):
    """Sessions minted and held in this process, keyed by ids that name `owner`; their
    turns journaled in `journal`, if given."""

    def __init__(self, owner: str, journal: JournalFile | None = None) -> None:
        self.owner = owner
        self.store = InMemorySessionStore(owner=owner, journal=journal)

    # What a replica calls, each one actor round trip.

    def grant(self, session_id: str) -> tuple[bytes, Sampling | None, MainLoop | None] | None:
        """The key's digest, the session's sampling and main loop, for the replica to
        check keys itself (and cache); None when the session is not (or no longer) here."""
        state = self.store.state(session_id)
        return None if state is None else (state.key_digest, state.sampling, state.main_loop)

    async def admit(
        self, session_id: str, holder: str | None = None, prefixes: Sequence[PrefixKey] = ()
    ) -> Admission:
        """Admit a call that `holder` (a replica, see `actor_holder`) will end.

        A replica killed between admit and record never ends its calls; when they are
        all that stands between the session and its budget, the dead holders' calls are
        given back, so an agent whose call was retried elsewhere loses no budget.
        `prefixes` find the turn the call continues (`SessionState.continued`)."""
        state = self.store.state(session_id)
        if state is not None and state.full():
            for holder_gone in [h for h in state.holders() if not await _actor_alive(h)]:
                state.drop_holder(holder_gone)
        return await self.store.admit(session_id, prefixes, holder=holder)

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        await self.store.record(session_id, turn)

    async def release(self, session_id: str, index: int, counter: Counter | None = None) -> None:
        await self.store.release(session_id, index, counter)


def actor_holder(namespace: str) -> str | None:
    """How an owner can find this actor again (`namespace/name`), if it is a named one
    (Serve's replicas are). The caller names the namespace: Ray tells an actor its job's
    namespace, not the one its name lives in."""
    context = ray.get_runtime_context()
    name = context.get_actor_name() if context.get_actor_id() else None
    return f"{namespace}/{name}" if name else None


async def _actor_alive(holder: str) -> bool:
    """Whether the holder still runs. Unsure counts as alive: giving back a live call
    would let the session run past its budget."""
    namespace, name = holder.split("/", 1)
    try:
        # get_actor blocks on the GCS. A dead actor's name is free again (ValueError),
        # unless this process looked it up before: then it may return the cached handle
        # of the dead actor, which only a call reveals.
        handle = await asyncio.to_thread(ray.get_actor, name, namespace=namespace)
        await asyncio.wait_for(handle.__ray_ready__.remote(), timeout=_PING_S)
    except (ValueError, RayActorError):
        return False
    except TimeoutError:
        pass  # busy, not known dead
    return True
