"""How many rollout hosts the cluster's nodes can hold, and the rollouts per host that
follow.

The pool starts `ceil(concurrency / rollouts_per_host)` host processes, each a Ray actor
of about `HOST_MEMORY_BYTES`: `--concurrency 1000` at 8 per host is 125 processes, which
one machine may not hold. Each node takes at most `HOSTS_PER_CPU` hosts per CPU and
hosts may use at most `MEMORY_SHARE` of its memory (Ray's `memory` resource: what is left
for tasks and actors); beyond the sum, hosts take more rollouts each instead, and the
plan says so with its arithmetic. Pure: node capacities in, a plan out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

HOST_MEMORY_BYTES = 150 * 2**20  # a host actor's resident memory, idle, measured
HOSTS_PER_CPU = 2  # hosts mostly wait on sandboxes; more per CPU starve their event loops
MEMORY_SHARE = 0.5  # the rest is for the sandboxes and agents the hosts run


@dataclass(frozen=True)
class NodeCapacity:
    cpus: float
    memory_bytes: float


@dataclass(frozen=True)
class HostPlan:
    hosts: int  # hosts started at most
    rollouts_per_host: int
    warning: str | None = None  # why rollouts per host rose, with the arithmetic


def hosts_fitting(node: NodeCapacity) -> int:
    """The hosts one node holds (at least one: a node with no room still runs one)."""
    by_cpu = math.floor(node.cpus * HOSTS_PER_CPU)
    by_memory = math.floor(node.memory_bytes * MEMORY_SHARE / HOST_MEMORY_BYTES)
    return max(1, min(by_cpu, by_memory))


def plan_hosts(concurrency: int, rollouts_per_host: int, nodes: Sequence[NodeCapacity]) -> HostPlan:
    """Hosts for `concurrency` rollouts at `rollouts_per_host` each, if the nodes hold
    them; else as many as they hold, each taking more rollouts. No nodes known: as asked."""
    wanted = math.ceil(concurrency / rollouts_per_host)
    if not nodes:
        return HostPlan(wanted, rollouts_per_host)
    room = sum(hosts_fitting(node) for node in nodes)
    if wanted <= room:
        return HostPlan(wanted, rollouts_per_host)
    per_host = math.ceil(concurrency / room)
    cpus = sum(node.cpus for node in nodes)
    memory_gib = sum(node.memory_bytes for node in nodes) / 2**30
    return HostPlan(
        math.ceil(concurrency / per_host),
        per_host,
        warning=(
            f"concurrency {concurrency} at {rollouts_per_host} rollouts per host needs "
            f"{wanted} host processes (~{HOST_MEMORY_BYTES // 2**20} MB each), but "
            f"{len(nodes)} node(s) with {cpus:g} CPUs and {memory_gib:.1f} GiB hold {room} "
            f"(at most {HOSTS_PER_CPU} per CPU, {MEMORY_SHARE:.0%} of memory): running "
            f"{per_host} rollouts per host instead"
        ),
    )
