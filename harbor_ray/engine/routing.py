"""Serve's request router for the engine's replicas: each session's calls to one replica.

The capture proxy names each call's session in Ray Serve's session header
(`x-session-id`, Serve's `SERVE_SESSION_ID`); Serve's HTTP proxy and Ray Serve LLM's
ingress carry it to the handle that calls the `LLMServer` deployment, where it is
`RequestMetadata.session_id`. This router, set on that deployment
(`EngineConfig.routing`), runs in the ingress replica's process and keeps the sticky map
of `harbor_ray.engine.affinity` over the replicas Serve reports: a session's calls go
to the replica that served its last one; its first call, and the calls of a session
whose replica died or drained, to the least loaded (fewest calls in flight, as Serve's
queue-length cache has them). A call without a session is routed as Serve's default
router does.

The map lives in the router's process. Ray Serve LLM runs one ingress replica (its
autoscaling target is 1e9 calls in flight), so one map sees every call; Serve's own
replacements of that replica start with an empty map, and sessions are then placed
again by load.
"""

from __future__ import annotations

import random
import time
from typing import Any

from ray.serve.request_router import PendingRequest, ReplicaID, RequestRouter, RunningReplica

from harbor_ray.engine.affinity import AffinityLimits, SessionAffinity


class SessionAffinityRouter(RequestRouter):
    """Routes each session's calls to the replica that served its last call."""

    def initialize_state(self, **kwargs: Any) -> None:
        """`request_router_kwargs`: AffinityLimits' `idle_s` and `max_sessions`."""
        self._affinity = SessionAffinity(AffinityLimits(**kwargs))

    def update_replicas(self, replicas: list[RunningReplica]) -> None:
        # A replica Serve stopped (scaled down, replaced, draining) is no longer listed:
        # its sessions move at their next call.
        super().update_replicas(replicas)
        self._affinity.live(_key(r.replica_id) for r in replicas)

    def on_replica_actor_died(self, replica_id: ReplicaID) -> None:
        # Known before Serve's controller lists the replicas again.
        super().on_replica_actor_died(replica_id)
        self._affinity.live(_key(r) for r in self.curr_replicas)

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        session = _session(pending_request)
        if not session or len(candidate_replicas) < 2:
            # As Serve's default router does: the less loaded of two drawn at random
            # (Serve's selection takes the least loaded of a rank).
            return [random.sample(candidate_replicas, min(2, len(candidate_replicas)))]
        assert pending_request is not None
        # Back off between rounds when every replica refused (Serve's own routers do).
        pending_request.routing_context.should_backoff = True
        by_key = {_key(r.replica_id): r for r in candidate_replicas}
        loads = await self._loads(session, by_key)
        first, *rest = self._affinity.choose(session, loads, time.monotonic())
        # The session's replica first; the others only if it refuses the call (full).
        return [[by_key[first]], [by_key[key] for key in rest]] if rest else [[by_key[first]]]

    async def _loads(self, session: str, by_key: dict[str, RunningReplica]) -> dict[str, int]:
        """Each replica's calls in flight, as Serve's queue-length cache has them. A
        session to place (new, or its replica gone) has the replicas the cache has no
        fresh figure for asked, as Serve's own selection asks them; a session that stays
        only orders its fallbacks by them."""
        cache = self.replica_queue_len_cache
        loads = {key: cache.get(r.replica_id) for key, r in by_key.items()}
        unknown = [by_key[key] for key, load in loads.items() if load is None]
        if unknown and self._affinity.replica_of(session) not in by_key:
            for replica, load in await self._probe_queue_lens(unknown, 0):
                loads[_key(replica.replica_id)] = load
        return {key: load or 0 for key, load in loads.items()}

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: ReplicaID, result: Any
    ) -> None:
        session = _session(pending_request)
        if session:
            self._affinity.served(session, _key(replica_id), time.monotonic())


def _session(pending_request: PendingRequest | None) -> str:
    return pending_request.metadata.session_id if pending_request is not None else ""


def _key(replica_id: ReplicaID) -> str:
    return replica_id.unique_id
