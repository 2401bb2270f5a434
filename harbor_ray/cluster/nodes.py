"""Work pinned to each node of the cluster: what must hold, or be done, on every node
rather than where the driver runs (the engine reached, orphan sandboxes reaped)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harbor_ray.cluster.host_sizing import HostPlan, NodeCapacity, plan_hosts


@dataclass(frozen=True)
class ClusterNode:
    node_id: str
    ip: str


def this_node() -> ClusterNode:
    """The node this process (a Ray worker or driver) runs on."""
    return ClusterNode(ray.get_runtime_context().get_node_id(), ray.util.get_node_ip_address())


def alive_nodes() -> list[ClusterNode]:
    return [ClusterNode(n["NodeID"], n["NodeManagerAddress"]) for n in ray.nodes() if n["Alive"]]


def pinned(remote_function: Any, node_id: str) -> Any:
    """`remote_function` to run on `node_id` only, needing no CPU: a node whose CPUs the
    rollouts' accounting holds must still run it. Not retried elsewhere: a node that
    is gone fails it."""
    return remote_function.options(
        num_cpus=0,
        max_retries=0,
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
    )


def on_each(
    remote_function: Any, nodes: Sequence[ClusterNode], *args: Any
) -> list[tuple[ClusterNode, Any | BaseException]]:
    """Run `remote_function(*args)` on each of `nodes`, waited for; each node's result,
    or the exception it raised (one node's failure does not hide the others')."""
    refs = [pinned(remote_function, node.node_id).remote(*args) for node in nodes]
    results: list[tuple[ClusterNode, Any | BaseException]] = []
    for node, ref in zip(nodes, refs, strict=True):
        try:
            results.append((node, ray.get(ref)))
        except Exception as exc:  # reported per node by the caller
            results.append((node, getattr(exc, "cause", None) or exc))
    return results


def node_capacities() -> list[NodeCapacity]:
    """What each live node offers rollout hosts: its CPUs and Ray's `memory` resource."""
    return [
        NodeCapacity(
            cpus=n["Resources"].get("CPU", 0.0), memory_bytes=n["Resources"].get("memory", 0.0)
        )
        for n in ray.nodes()
        if n["Alive"]
    ]


def host_plan(ceiling: int, rollouts_per_host: int, *, setting: str) -> HostPlan:
    """`plan_hosts` for `ceiling` rollouts in flight over the live nodes; a warning ends
    naming the setting (`setting`: the flag or YAML field) and the value silencing it."""
    plan = plan_hosts(ceiling, rollouts_per_host, node_capacities())
    if plan.warning is None:
        return plan
    return dataclasses.replace(
        plan, warning=f"{plan.warning} ({setting} {plan.rollouts_per_host} silences this)"
    )
