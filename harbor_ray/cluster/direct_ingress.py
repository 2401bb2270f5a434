"""A proxy replica's own socket, registered where relays find it.

Serve's shared HTTP proxy costs more per call than the whole capture budget (docs/performance.md),
so each replica also serves its app on <address>:<free port> with plain uvicorn, in the
replica's own event loop (the app's engine client and owner handles live there), and
registers the socket once the app answers on it as itself. Serve still places, restarts
and health-checks the replicas, and its route stays as the fallback ingress.

The address is loopback, unless the deployment spans nodes (`across_nodes`): then it is
the replica's node address, the one Ray's own services on that node listen on, so that
a host on a node without a replica relays to one on another node. Agents' calls carry
their session keys either way, and a replica's app has no admin routes (owners open
and export sessions).
"""

from __future__ import annotations

import asyncio
from typing import Any

import ray

from harbor_ray.capture.proxy.app import CaptureApp
from harbor_ray.capture.proxy.server import bind, serve
from harbor_ray.cluster.replica_registry import ReplicaEntry


class DirectIngress:
    """The app on its own socket, for as long as the replica runs."""

    def __init__(self, serving: asyncio.Task[None], stop: asyncio.Event,
                 registry: Any, entry: ReplicaEntry) -> None:
        self._serving, self._stop = serving, stop
        self._registry, self.entry = registry, entry

    @classmethod
    async def start(cls, app: CaptureApp, registry: Any, replica_id: str, *,
                    across_nodes: bool = False) -> DirectIngress:
        """Serve `app` (whose lifespan Serve runs) and register it with `registry`."""
        stop = asyncio.Event()
        ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        address = ray.util.get_node_ip_address() if across_nodes else "127.0.0.1"
        serving = asyncio.create_task(
            serve(app, bind(address, 0), on_ready=ready.set_result, stop=stop,
                  lifespan="off"))
        await asyncio.wait({ready, serving}, return_when=asyncio.FIRST_COMPLETED)
        if not ready.done():
            serving.result()  # raises why it stopped
            raise RuntimeError("the direct ingress stopped before it was ready")
        entry = ReplicaEntry(replica_id, ready.result(), app.state.instance_id,
                             ray.get_runtime_context().get_node_id())
        await registry.register.remote(entry)
        return cls(serving, stop, registry, entry)

    def check(self) -> None:
        """Raise if the socket no longer serves (Serve then replaces the replica)."""
        if self._serving.done():
            raise RuntimeError(f"direct ingress {self.entry.url} stopped")

    async def stop(self) -> None:
        """Deregister first, so that relays stop choosing it, then end the server
        gracefully (calls in flight finish)."""
        try:
            await self._registry.remove.remote(self.entry)
        finally:
            self._stop.set()
            await asyncio.wait({self._serving}, timeout=15)
