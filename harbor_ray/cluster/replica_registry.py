"""Where the capture proxy's replicas can be reached directly: a named registry actor.

Agents skip Serve's shared HTTP proxy (its cost: docs/performance.md, "Ingress") by
reaching a replica's own loopback socket through their host's relay (balancer.py). Serve
does not say where those sockets are, so each replica registers `(replica id, url,
instance id)` once its socket answers, and deregisters when Serve stops it. A replica that
was killed cannot deregister, and its port may since belong to another process: readers
check an entry's instance id against the URL's `/health` before using it, and remove
entries that are provably dead.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import ray
from ray.exceptions import RayActorError

from harbor_ray.cluster.owner import NAMESPACE
from harbor_ray.host_names import is_loopback

CAPTURE_APP_NAME = "capture"


@dataclass(frozen=True)
class ReplicaEntry:
    """One replica's direct socket; `instance` is what its app's /health says. A socket
    on loopback serves only processes on Ray node `node`; one on the node's address
    (a deployment across nodes) serves any node."""

    replica_id: str
    url: str
    instance: str
    node: str = ""


class ReplicaRegistry:
    """The live replicas of one capture app, as they reported themselves."""

    def __init__(self) -> None:
        self._entries: dict[str, ReplicaEntry] = {}

    def register(self, entry: ReplicaEntry) -> None:
        self._entries[entry.replica_id] = entry

    def remove(self, entry: ReplicaEntry) -> None:
        """Forget `entry`, unless its replica has registered anew since."""
        if self._entries.get(entry.replica_id) == entry:
            del self._entries[entry.replica_id]

    def entries(self) -> list[ReplicaEntry]:
        return list(self._entries.values())


def registry_name(app_name: str) -> str:
    return f"capture-replicas-{app_name}"


def ensure_registry(app_name: str) -> Any:  # ActorHandle
    """The app's registry, created if missing. Detached, so that it outlives a driver
    that deployed the proxy (`serve run` deployments have none); it needs no CPU."""
    return (
        ray.remote(ReplicaRegistry)
        .options(
            name=registry_name(app_name),
            namespace=NAMESPACE,
            get_if_exists=True,
            lifetime="detached",
            num_cpus=0,
        )
        .remote()
    )


def remove_registry(app_name: str) -> None:
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(registry_name(app_name), namespace=NAMESPACE))


def reachable(entries: list[ReplicaEntry], node: str) -> list[ReplicaEntry]:
    """The replicas a relay on `node` uses: those on its own node (no hop across the
    network); if there are none, those on other nodes whose sockets are not loopback."""
    here = [entry for entry in entries if entry.node == node]
    return here or [entry for entry in entries if not _on_loopback(entry.url)]


def _on_loopback(url: str) -> bool:
    return is_loopback(urlsplit(url).hostname or "")


class RegistryReader:
    """A relay's view of one app's registry: the replicas it can reach (`reachable`).
    An absent or dead registry lists nothing."""

    def __init__(self, app_name: str) -> None:
        self._name = registry_name(app_name)
        self._node = ray.get_runtime_context().get_node_id()
        self._handle: Any = None

    async def entries(self) -> list[ReplicaEntry]:
        try:
            if self._handle is None:
                # get_actor blocks on the GCS: keep it off the event loop serving calls.
                self._handle = await asyncio.to_thread(
                    ray.get_actor, self._name, namespace=NAMESPACE
                )
            entries = await self._handle.entries.remote()
        except (ValueError, RayActorError):
            self._handle = None
            return []
        return reachable(entries, self._node)

    async def remove(self, entry: ReplicaEntry) -> None:
        if self._handle is not None:
            try:
                await self._handle.remove.remote(entry)
            except RayActorError:
                self._handle = None
