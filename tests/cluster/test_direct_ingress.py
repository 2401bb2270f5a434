"""A replica's direct socket on a cluster that grows: on loopback while the cluster has
one node, on the node's address too once another joins (registered instead)."""

from __future__ import annotations

import asyncio

import httpx
import pytest
import ray

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.cluster.direct_ingress import DirectIngress
from harbor_ray.cluster.nodes import ClusterNode
from harbor_ray.cluster.replica_registry import ReplicaEntry, ReplicaRegistry, reachable

# A node address this machine can listen on that is not loopback (no Ray needed).
HERE = ClusterNode("n1", ray.util.get_node_ip_address())


class Registry:
    """The registry actor's methods, called as `handle.method.remote(...)` is awaited."""

    def __init__(self) -> None:
        self.actor = ReplicaRegistry()
        self.register = self._remote(self.actor.register)
        self.remove = self._remote(self.actor.remove)

    @staticmethod
    def _remote(method):
        class Method:
            async def remote(self, entry: ReplicaEntry) -> None:
                method(entry)

        return Method()


async def _instance(url: str) -> str:
    async with httpx.AsyncClient(timeout=5) as client:
        return (await client.get(f"{url}/health")).json()["instance"]


async def test_a_loopback_socket_widens_when_a_node_joins() -> None:
    nodes = [HERE]
    app = build_capture_app(
        InMemorySessionStore(), FakeEngine(), CaptureSettings(served_model="fake-model")
    )
    registry = Registry()
    ingress = await DirectIngress.start(
        app, registry, "r1", HERE, watch_s=0.05, nodes=lambda: list(nodes)
    )
    try:
        [loopback] = registry.actor.entries()
        assert loopback.url.startswith("http://127.0.0.1:")
        await asyncio.sleep(0.3)  # one node for a while: nothing changes
        assert registry.actor.entries() == [loopback]
        assert reachable(registry.actor.entries(), "another node") == []

        nodes.append(ClusterNode("n2", "10.0.0.2"))  # a node joins
        async with asyncio.timeout(10):
            while registry.actor.entries() == [loopback]:
                await asyncio.sleep(0.05)
        [widened] = registry.actor.entries()
        assert widened.url.startswith(f"http://{HERE.ip}:")
        assert (widened.replica_id, widened.instance, widened.node) == (
            loopback.replica_id,
            loopback.instance,
            loopback.node,
        )
        # A relay on the new node can use it; connections on loopback still are served.
        assert reachable(registry.actor.entries(), "another node") == [widened]
        instance = app.state.instance_id
        assert await _instance(widened.url) == await _instance(loopback.url) == instance
        ingress.check()
    finally:
        await ingress.stop()
    assert registry.actor.entries() == []
    for entry in (loopback, widened):
        with pytest.raises(httpx.ConnectError):
            await _instance(entry.url)
