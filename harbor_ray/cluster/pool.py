"""The driver's rollout hosts: enough to hold `concurrency` rollouts, replaced when lost.

A rollout takes a slot on the least-loaded live host; hosts start when a slot is first
needed (never more than `ceil(concurrency / rollouts_per_host)` alive), and a host that died or
was killed is dropped, its rollouts already failed, and a fresh one takes its place.
Fresh hosts keep off the nodes where hosts died until those are shown alive
(suspects.py): a node lost at once is still listed alive for a while.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray
from ray.exceptions import RayError, RayTaskError

from harbor_ray.cluster.host import Placement, ProxyTarget, WarmPoolPlan, Work, start_host
from harbor_ray.cluster.journal_debts import JournalDebts
from harbor_ray.cluster.journaling import Journaling, Salvaged, collect, remove_one
from harbor_ray.cluster.nodes import alive_nodes, pinned
from harbor_ray.cluster.reaper import host_ledger, local_backend, reap_host, reap_pool
from harbor_ray.cluster.start_bucket import StartBuckets
from harbor_ray.cluster.suspects import SuspectNodes, choose_node
from harbor_ray.trials.backends import LOCAL
from harbor_ray.trials.start_rate import StartRate

# How long a node where a host died is avoided at most, if nothing shows it alive and
# Ray keeps listing it: far longer than Ray takes to declare a lost node dead.
SUSPECT_S = 300.0


@dataclass
class Host:
    name: str
    handle: Any  # ActorHandle
    ready: Any  # ObjectRef: the host's Placement once it runs (raises if it never will)
    running: int = 0
    alive: bool = True
    placement: Placement | None = None  # set from `ready`
    target: str | None = None  # the Ray node it was pinned to, if it was

    @property
    def node(self) -> str | None:
        return None if self.placement is None else self.placement.ip

    @property
    def node_id(self) -> str | None:
        """The Ray node it runs on, or was pinned to; None while Ray places it."""
        return self.target if self.placement is None else self.placement.node_id


class HostPool:
    """Hosts for one sweep; names are unique to it, so sweeps can share a cluster."""

    def __init__(
        self,
        *,
        rollouts_per_host: int,
        proxy: ProxyTarget | None,
        num_cpus: float,
        work: Work | None = None,
        sandboxes_dir: Path | None = None,
        suspect_s: float = SUSPECT_S,
        clock: Callable[[], float] = time.monotonic,
        start_rate: StartRate | None = None,  # the run's, across every host
        journaling: Journaling | None = None,  # None: hosts keep no journal
        # Each host's warm pool of local sandboxes: how many per task (needs
        # `sandboxes_dir`), and where their ledgers go on each node.
        warm_pool: Mapping[str, int] | None = None,
        ledgers_dir: Path | None = None,
    ) -> None:
        assert rollouts_per_host >= 1, "rollouts per host must be at least 1"
        self._rollouts_per_host = rollouts_per_host
        self._proxy, self._num_cpus, self._work = proxy, num_cpus, work
        self._sandboxes_dir = sandboxes_dir  # where the rollouts' sandboxes go, if known
        self.starts = StartBuckets(start_rate)  # the bucket each backend's starts draw on
        self.journaling = journaling
        self._warm_pool = dict(warm_pool or {})
        self._ledgers_dir = ledgers_dir
        assert not self._warm_pool or (sandboxes_dir is not None and ledgers_dir is not None), (
            "a warm pool needs the sandboxes and ledgers directories"
        )
        self._salvaged: dict[str, asyncio.Task[Salvaged]] = {}  # dead host -> its journal
        self._journal_nodes: dict[str, str] = {}  # dead host -> the node of its journal
        self._debts = JournalDebts()  # which dead hosts' journals rows still need
        self._removing: set[asyncio.Task[None]] = set()  # journals being removed
        self.reaping: list[Any] = []  # ObjectRefs of the reapers of lost hosts
        self._prefix = secrets.token_hex(4)
        self._started = 0
        self._hosts: list[Host] = []
        self._suspects = SuspectNodes(suspect_s, clock)
        self._probes: dict[Any, str] = {}  # ObjectRef of work pinned to a suspect -> node

    @property
    def hosts(self) -> list[Host]:
        """The live hosts."""
        return [h for h in self._hosts if h.alive]

    def acquire(self) -> Host:
        """A slot for one rollout. The caller bounds the rollouts in flight, so there is
        always a live host with room or room for a new host."""
        open_hosts = [h for h in self.hosts if h.running < self._rollouts_per_host]
        host = min(open_hosts, key=lambda h: h.running) if open_hosts else self._start()
        host.running += 1
        return host

    def release(self, host: Host) -> None:
        host.running -= 1

    def lost(self, host: Host) -> None:
        """The host died (its rollouts fail on their own): never place anything on it,
        reap what its sandboxes left on its node, and keep new hosts off that node until
        work pinned there runs (the reaper, else a no-op): if it does, the host died
        alone; if the node was lost, Ray still lists it alive for a while."""
        if not host.alive:
            return
        reaper = self._retire(host)
        if (node_id := host.node_id) is None:
            return
        self._suspects.suspect(node_id)
        probe = reaper if reaper is not None else pinned(_alive_check, node_id).remote()
        self._probes[probe] = node_id

    async def salvaged(self, host: Host) -> Salvaged:
        """The unfinished rollouts' turns in dead `host`'s journal, read on its node once
        however many of its rollouts ask; none without a journal."""
        if self.journaling is None or self.journaling.mode == "off" or host.node_id is None:
            return {}
        if host.name not in self._salvaged:
            self._journal_nodes[host.name] = host.node_id
            self._salvaged[host.name] = asyncio.ensure_future(
                self._collect(self.journaling, host.name, host.node_id)
            )
        return await asyncio.shield(self._salvaged[host.name])

    async def _collect(self, journaling: Journaling, host: str, node_id: str) -> Salvaged:
        found = await collect(journaling, host, node_id)
        if found is None:  # unread, its node gone or deaf: nothing is removed there
            return {}
        if self._debts.read(host, found):
            self._remove(journaling, host)  # it held no rollout: nothing to keep
        return found

    def rebuilt(self, row_id: str, host: Host, rollout_id: str) -> None:
        """Row `row_id` was made from `rollout_id`'s turns in dead `host`'s journal."""
        self._debts.made(row_id, host.name, rollout_id)

    def committed(self, row_ids: list[str]) -> None:
        """The rows `row_ids` are committed to the dataset: remove each dead host's
        journal that no uncommitted row needs any more (journal_debts.py)."""
        if self.journaling is None:
            return
        for host in self._debts.committed(row_ids):
            self._remove(self.journaling, host)

    def _remove(self, journaling: Journaling, host: str) -> None:
        """Remove `host`'s journal on its node, not waited for (the task is kept until
        it ends; the caller may be a synchronous callback on the loop)."""
        task = asyncio.ensure_future(remove_one(journaling, host, self._journal_nodes[host]))
        self._removing.add(task)
        task.add_done_callback(self._removing.discard)

    def kill(self, host: Host) -> None:
        """End a host that no longer answers (a rollout ignored its cancellation, or it
        never started): the host is at fault, not its node."""
        if host.alive:
            self._retire(host)
        ray.kill(host.handle, no_restart=True)

    async def close(self, timeout_s: float = 10.0) -> None:
        """End every live host normally (each removes its journal), then `shutdown`. A
        host that does not answer in `timeout_s` is killed all the same; its journal
        goes with the run's (`journaling.remove_everywhere`)."""
        ends = [
            asyncio.ensure_future(h.handle.end.remote())
            for h in self.hosts
            if h.placement is not None
        ]
        if ends:
            await asyncio.wait(ends, timeout=timeout_s)
            for end in ends:
                if end.done() and not end.cancelled():
                    end.exception()  # retrieved: a host that died ending needs nothing
                end.cancel()
        self.shutdown()

    def shutdown(self) -> None:
        for host in self.hosts:
            host.alive = False  # ended, not lost: the caller reaps everywhere after
            ray.kill(host.handle, no_restart=True)
        self.starts.close()

    def _retire(self, host: Host) -> Any | None:
        """Drop `host` and reap its sandboxes on its node: the reaper's ObjectRef, if any."""
        host.alive = False
        if self._sandboxes_dir is None or host.node_id is None:
            return None
        reaper = reap_host(self._sandboxes_dir, host.name, host.node_id)
        self.reaping.append(reaper)
        if self._warm_pool and self._ledgers_dir is not None:
            self.reaping.append(
                reap_pool(
                    host_ledger(self._ledgers_dir, host.name),
                    local_backend(self._sandboxes_dir, host.name),
                    host.node_id,
                )
            )
        return reaper

    def _start(self) -> Host:
        name = f"{self._prefix}h{self._started}"
        self._started += 1
        node_id = self._node_for_new_host()
        handle = start_host(
            name,
            proxy=self._proxy,
            num_cpus=self._num_cpus,
            work=self._work,
            node_id=node_id,
            journaling=self.journaling,
            warm_pool=self._pool_plan(),
        )
        host = Host(name, handle, handle.node.remote(), target=node_id)
        self._hosts.append(host)
        return host

    def _pool_plan(self) -> WarmPoolPlan | None:
        if not self._warm_pool or self._sandboxes_dir is None or self._ledgers_dir is None:
            return None
        return WarmPoolPlan(
            self._warm_pool, self._sandboxes_dir, self._ledgers_dir, self.starts.of(LOCAL)
        )

    def _node_for_new_host(self) -> str | None:
        """A trusted node while some listed node is suspect; None: Ray spreads it."""
        if not self._suspects:
            return None
        self._collect_probes()
        alive = [node.node_id for node in alive_nodes()]
        load = Counter(h.node_id for h in self.hosts if h.node_id is not None)
        return choose_node(alive, self._suspects.current(alive), load)

    def _collect_probes(self) -> None:
        """Clear the suspects whose pinned work has run (without waiting for any)."""
        if not self._probes:
            return
        done, _ = ray.wait(list(self._probes), num_returns=len(self._probes), timeout=0)
        for ref in done:
            node_id = self._probes.pop(ref)
            try:
                ray.get(ref)
            except RayTaskError:
                pass  # it raised, so it ran there: the node is alive
            except RayError:
                continue  # never ran: the node is gone, or going
            self._suspects.cleared(node_id)


@ray.remote
def _alive_check() -> None:
    """Nothing, on a node: that it returns shows the node alive."""
