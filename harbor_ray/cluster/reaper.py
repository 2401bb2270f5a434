"""Removing what dead rollouts left in a sweep's sandboxes directory, on every node.

Sandboxes are node-local (`SANDBOXES/<host>/` on the host's node), so reaping runs on
the nodes, as Ray tasks pinned to each: everything under SANDBOXES on every live node
when no rollout of the sweep runs, at its start and end (`reap_everywhere`), and a dead
host's directory on its node at once (`reap_host`). Each host's guard reaps too
(trials/sandbox/leftovers.py); the driver's reaping covers what no guard saw. A dead
host's warm pool left a ledger of the sandboxes it started and never stopped
(trials/warm_pool.py, `LEDGERS/<host>/` on its node); `reap_pool` stops each, on that
node, through their backend, and `reap_everywhere` stops what every ledger on every node
still lists before it reaps the sandboxes directory.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import ray

from harbor_ray.cluster.nodes import alive_nodes, on_each, pinned
from harbor_ray.trials.sandbox.leftovers import Reaped, reap
from harbor_ray.trials.sandbox.pooled import BwrapBackend
from harbor_ray.trials.warm_pool import Ledger, SandboxBackend, reap_ledger

__all__ = [
    "Reaped",
    "host_ledger",
    "host_sandboxes",
    "local_backend",
    "reap",
    "reap_everywhere",
    "reap_host",
    "reap_pool",
]


def host_sandboxes(sandboxes_dir: Path, host: str) -> Path:
    """Where host `host` puts its sandboxes: a directory of its own, so that its loss
    can be reaped on its node without touching its neighbours'."""
    return sandboxes_dir / host


def host_ledger(ledgers_dir: Path, host: str) -> Path:
    """Where host `host`'s warm pool keeps its ledger, on its node."""
    return ledgers_dir / host


def local_backend(sandboxes_dir: Path, host: str) -> BwrapBackend:
    """The local sandbox's pool backend on host `host`'s sandboxes: what stops the
    sandboxes its ledger names."""
    return BwrapBackend(host_sandboxes(sandboxes_dir, host))


def reap_everywhere(sandboxes_dir: Path, ledgers_dir: Path | None = None) -> Reaped:
    """On every live node of the cluster, waited for: stop what each warm pool's ledger
    under `ledgers_dir` still lists, then `reap(sandboxes_dir)`; only when no rollout
    that uses them runs. Totals over the nodes that answered (a node lost meanwhile
    took its sandboxes with it)."""
    done = [
        r
        for _, r in on_each(_reap_task, alive_nodes(), sandboxes_dir, ledgers_dir)
        if isinstance(r, Reaped)
    ]
    return Reaped(sum(r.processes for r in done), sum(r.directories for r in done))


def reap_host(sandboxes_dir: Path, host: str, node_id: str) -> Any:  # ObjectRef
    """Reap what dead host `host` left, on its node; not waited for (the driver's loop
    goes on). A node that is gone fails the task: its sandboxes went with it."""
    return pinned(_reap_task, node_id).remote(host_sandboxes(sandboxes_dir, host))


@ray.remote
def _reap_task(directory: Path, ledgers_dir: Path | None = None) -> Reaped:
    if ledgers_dir is not None and ledgers_dir.is_dir():
        for ledger in sorted(ledgers_dir.iterdir()):
            asyncio.run(reap_ledger(Ledger(ledger), local_backend(directory, ledger.name)))
    return reap(directory)


def reap_pool(ledger: Path, backend: SandboxBackend[Any], node_id: str) -> Any:  # ObjectRef
    """Stop every sandbox a dead host's warm pool listed in `ledger` (how many), on its
    node; not waited for."""
    return pinned(_reap_pool_task, node_id).remote(ledger, backend)


@ray.remote
def _reap_pool_task(ledger: Path, backend: SandboxBackend[Any]) -> int:
    return asyncio.run(reap_ledger(Ledger(ledger), backend))
