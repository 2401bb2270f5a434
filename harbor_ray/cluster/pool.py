"""The driver's rollout hosts: enough to hold `concurrency` rollouts, replaced when lost.

A rollout takes a slot on the least-loaded live host; hosts start when a slot is first
needed (never more than `ceil(concurrency / per_host)` alive), and a host that died or
was killed is dropped, its rollouts already failed, and a fresh one takes its place.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from harbor_ray.cluster.host import Placement, ProxyTarget, Work, start_host
from harbor_ray.cluster.reaper import reap_host


@dataclass
class Host:
    name: str
    handle: Any  # ActorHandle
    ready: Any  # ObjectRef: the host's Placement once it runs (raises if it never will)
    running: int = 0
    alive: bool = True
    placement: Placement | None = None  # set from `ready`

    @property
    def node(self) -> str | None:
        return None if self.placement is None else self.placement.ip


class HostPool:
    """Hosts for one sweep; names are unique to it, so sweeps can share a cluster."""

    def __init__(
        self,
        *,
        per_host: int,
        proxy: ProxyTarget | None,
        num_cpus: float,
        work: Work | None = None,
        sandboxes_dir: Path | None = None,
    ) -> None:
        if per_host < 1:
            raise ValueError("rollouts per host must be at least 1")
        self._per_host = per_host
        self._proxy, self._num_cpus, self._work = proxy, num_cpus, work
        self._sandboxes_dir = sandboxes_dir  # where the rollouts' sandboxes go, if known
        self.reaping: list[Any] = []  # ObjectRefs of the reapers of lost hosts
        self._prefix = secrets.token_hex(4)
        self._started = 0
        self._hosts: list[Host] = []

    @property
    def hosts(self) -> list[Host]:
        """The live hosts."""
        return [h for h in self._hosts if h.alive]

    def acquire(self) -> Host:
        """A slot for one rollout. The caller bounds the rollouts in flight, so there is
        always a live host with room or room for a new host."""
        open_hosts = [h for h in self.hosts if h.running < self._per_host]
        host = min(open_hosts, key=lambda h: h.running) if open_hosts else self._start()
        host.running += 1
        return host

    def release(self, host: Host) -> None:
        host.running -= 1

    def lost(self, host: Host) -> None:
        """The host died (its rollouts fail on their own): never place anything on it,
        and reap what its sandboxes left on its node."""
        if not host.alive:
            return
        host.alive = False
        if self._sandboxes_dir is not None and host.placement is not None:
            self.reaping.append(
                reap_host(self._sandboxes_dir, host.name, host.placement.node_id))

    def kill(self, host: Host) -> None:
        """End a host that no longer answers (a rollout ignored its cancellation)."""
        self.lost(host)
        ray.kill(host.handle, no_restart=True)

    def shutdown(self) -> None:
        for host in self.hosts:
            host.alive = False  # ended, not lost: the caller reaps everywhere after
            ray.kill(host.handle, no_restart=True)

    def _start(self) -> Host:
        name = f"{self._prefix}h{self._started}"
        self._started += 1
        handle = start_host(name, proxy=self._proxy, num_cpus=self._num_cpus,
                            work=self._work)
        host = Host(name, handle, handle.node.remote())
        self._hosts.append(host)
        return host
