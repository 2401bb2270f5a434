"""The address agents in sandboxes off their host's node call (`--proxy-url`): one relay
per node listening on it for as long as the run's proxy is up.

A relay serves any session (its replicas find the owner from the session key), so the
listener need not belong to the rollout's host; it must only outlive every host. Hosts
come and go with their rollouts: a listener a host owned closed when that host's
rollouts ended, and an agent whose own host was on another node then met a refused
connection. So the entry relays are actors of their own, one pinned to each node alive
when the proxy is deployed, stopped with the proxy. A node that joins later gets none
(`--proxy-url` then names an address on a node that was there at the start).
"""

from __future__ import annotations

import contextlib
from typing import Any

import ray
from ray.exceptions import RayError
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harbor_ray.cluster.balancer import Relay
from harbor_ray.cluster.nodes import alive_nodes
from harbor_ray.cluster.owner import NAMESPACE
from harbor_ray.cluster.replica_registry import RegistryReader
from harbor_ray.errors import ServeError
from harbor_ray.switches import WORKER_ENV

__all__ = ["start_entry_relays", "stop_entry_relays"]


class EntryRelay:
    """A relay to app `app`'s replicas on `host:port` of its node."""

    def __init__(self, app: str) -> None:
        registry = RegistryReader(app)
        self._relay = Relay(registry.entries, registry.remove)

    async def listen(self, host: str, port: int) -> None:
        await self._relay.start(host, port)

    async def close(self) -> None:
        await self._relay.close()


# How long a node's relay may take to start listening (a Ray worker's start, under load).
_START_S = 120.0
# The relays this process started, by app: a Ray actor lives while a handle to it does,
# so the process that starts them holds them until `stop_entry_relays`.
_started: dict[str, list[Any]] = {}


def start_entry_relays(app: str, bind: tuple[str, int]) -> None:
    """An `EntryRelay` listening on `bind` on each node, started and waited for. Raises
    `ServeError` naming every node where it cannot listen (the port taken, most often),
    after stopping those that did."""
    nodes = alive_nodes()
    relays = [
        ray.remote(EntryRelay)
        .options(
            namespace=NAMESPACE,
            num_cpus=0,
            max_restarts=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node.node_id, soft=False),
            runtime_env={"env_vars": WORKER_ENV},
        )
        .remote(app)
        for node in nodes
    ]
    _started.setdefault(app, []).extend(relays)
    failed = []
    try:
        for node, relay in zip(nodes, relays, strict=True):
            try:
                # Ray types the actor handle as the class, whose methods have no .remote.
                ray.get(relay.listen.remote(*bind), timeout=_START_S)  # type: ignore[attr-defined]
            except RayError as exc:  # reported per node below (a timeout is one too)
                failed.append(f"{node.ip}: {getattr(exc, 'cause', None) or exc}")
    except BaseException:  # interrupted: none of them is left listening
        stop_entry_relays(app)
        raise
    if failed:
        stop_entry_relays(app)
        raise ServeError(
            f"cannot listen on {bind[0]}:{bind[1]} for --proxy-url on every "
            f"node ({'; '.join(failed)}): choose a free port with "
            "--proxy-bind (and the URL that reaches it)"
        )


def stop_entry_relays(app: str) -> None:
    """Close app `app`'s entry relays (connections in flight end with them); those on a
    node that is gone went with it."""
    for relay in _started.pop(app, []):
        with contextlib.suppress(RayError):  # its node gone, or the relay dying
            ray.get(relay.close.remote(), timeout=10)
        ray.kill(relay)
