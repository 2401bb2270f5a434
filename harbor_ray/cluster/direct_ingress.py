"""A proxy replica's own socket, registered where relays find it.

Each replica also serves its app on <address>:<free port> with plain uvicorn, in its own
event loop, and registers the socket once the app answers on it as itself; Serve still
places, restarts and health-checks the replicas. The address is loopback, or the node's
address when the deployment spans nodes (`across_nodes`); a replica on loopback widens
to its node's address when a second node joins (`widen`), with no redeploy. Why and how:
docs/architecture.md, "The three ingresses".
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
from collections.abc import Callable, Sequence
from typing import Any

from harbor_ray.capture.proxy.app import CaptureApp
from harbor_ray.capture.proxy.server import serve
from harbor_ray.cluster.nodes import ClusterNode, alive_nodes
from harbor_ray.cluster.replica_registry import ReplicaEntry
from harbor_ray.errors import ServeError
from harbor_ray.listening import bind

_log = logging.getLogger(__name__)

# How often a replica on loopback counts the cluster's nodes, while there is one: one
# GCS call each time, only while a single node is listed.
WATCH_S = 2.0


class DirectIngress:
    """The app on its own socket (two, once widened), for as long as the replica runs."""

    def __init__(
        self,
        app: CaptureApp,
        registry: Any,
        entry: ReplicaEntry,
        node: ClusterNode,
        serving: asyncio.Task[None],
        stop: asyncio.Event,
    ) -> None:
        self._app, self._registry, self.entry, self._node = app, registry, entry, node
        self._serving, self._stop = [serving], stop
        self._watching: asyncio.Task[None] | None = None

    @classmethod
    async def start(
        cls,
        app: CaptureApp,
        registry: Any,
        replica_id: str,
        node: ClusterNode,
        *,
        across_nodes: bool = False,
        watch_s: float = WATCH_S,
        nodes: Callable[[], Sequence[ClusterNode]] = alive_nodes,
    ) -> DirectIngress:
        """Serve `app` (whose lifespan Serve runs) and register it with `registry`, as
        replica `replica_id` on `node` (this process's); on loopback, look for a second
        node in `nodes()` every `watch_s` seconds."""
        stop = asyncio.Event()
        serving, url = await _serving(app, node.ip if across_nodes else "127.0.0.1", stop)
        entry = ReplicaEntry(replica_id, url, app.state.instance_id, node.node_id)
        await registry.register.remote(entry)
        ingress = cls(app, registry, entry, node, serving, stop)
        if not across_nodes:
            ingress._watching = asyncio.create_task(ingress._widen_when_joined(nodes, watch_s))
        return ingress

    async def _widen_when_joined(
        self, nodes: Callable[[], Sequence[ClusterNode]], watch_s: float
    ) -> None:
        while True:
            try:
                if len(await asyncio.to_thread(nodes)) > 1:
                    break
            except Exception:  # the GCS busy or restarting: look again later
                _log.warning("cannot list the cluster's nodes", exc_info=True)
            await asyncio.sleep(watch_s)
        await self.widen()

    async def widen(self) -> None:
        """Also serve on the node's address, and register that socket instead of the
        loopback one (relays on any node can reach it)."""
        serving, url = await _serving(self._app, self._node.ip, self._stop)
        self._serving.append(serving)
        widened = dataclasses.replace(self.entry, url=url)
        await self._registry.register.remote(widened)
        self.entry = widened

    def check(self) -> None:
        """Raise if a socket no longer serves (Serve then replaces the replica)."""
        for serving in self._serving:
            if serving.done():
                raise ServeError(f"direct ingress of {self.entry.replica_id} stopped")
        if self._watching is not None and self._watching.done():
            self._watching.result()  # raises why the watch failed

    async def stop(self) -> None:
        """Deregister first, so that relays stop choosing it, then end the servers
        gracefully (calls in flight finish)."""
        if self._watching is not None:
            self._watching.cancel()
        try:
            await self._registry.remove.remote(self.entry)
        finally:
            self._stop.set()
            await asyncio.wait(self._serving, timeout=15)


async def _serving(
    app: CaptureApp, address: str, stop: asyncio.Event
) -> tuple[asyncio.Task[None], str]:
    """`app` served on `address`:<a free port> until `stop`, once it answers as itself:
    the server's task and its URL."""
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    serving = asyncio.create_task(
        serve(app, bind(address, 0), on_ready=ready.set_result, stop=stop, lifespan="off")
    )
    first: set[asyncio.Future[Any]] = {ready, serving}
    await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
    if not ready.done():
        serving.result()  # raises why it stopped
        raise ServeError("the direct ingress stopped before it was ready")
    return serving, ready.result()
