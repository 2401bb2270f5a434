"""`RolloutHost`: a Ray actor that runs several rollouts and owns their capture sessions.

A host runs its rollouts as asyncio tasks and keeps what the design needs of an actor
per rollout: each session lives in the host that runs its rollout (its id names the
host, so a stateless replica finds the owner from the key); a rollout is cancelled
alone (`ray.cancel` on its `run` call); a host that dies takes only its own rollouts
(`infra_lost` rows), and its guard (`_guard`, a process that outlives it) and the
driver's reaper (reaper.py) remove what its sandboxes left. It also runs its agents'
way to the capture proxy (`ProxyTarget.ingress`: `direct`, `serve` or `host`). Why
hosts, and what each ingress costs: docs/sweeps.md, docs/architecture.md ("The three
ingresses"), docs/performance.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import subprocess
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.upstream_profile import UpstreamName
from harbor_ray.capture.proxy.engine_adapter import EngineKind, adapt_engine
from harbor_ray.capture.proxy.heap import freeze_startup_heap
from harbor_ray.capture.proxy.hosted import UpstreamKey, build_upstream
from harbor_ray.capture.proxy.local import LocalCapture, serve_capture
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.cluster.balancer import Relay
from harbor_ray.cluster.journaling import JournaledCapture, Journaling
from harbor_ray.cluster.owner import NAMESPACE, SessionOwner, owner_actor_name
from harbor_ray.cluster.policy_version import PolicyClock
from harbor_ray.cluster.reaper import host_ledger, host_sandboxes
from harbor_ray.cluster.replica_registry import CAPTURE_APP_NAME, RegistryReader
from harbor_ray.data.encode import RolloutRecord, preload_encoder_imports, with_placement
from harbor_ray.errors import SandboxError
from harbor_ray.serve_http import serve_url_on
from harbor_ray.switches import WORKER_ENV
from harbor_ray.trials.agents import needs_model
from harbor_ray.trials.backends import ON_THIS_NODE
from harbor_ray.trials.rollout import run_rollout
from harbor_ray.trials.sandbox.pooled import (
    BwrapBackend,
    Started,
    register_pool,
    unregister_pool,
)
from harbor_ray.trials.spec import CaptureService, RolloutSpec
from harbor_ray.trials.start_rate import wait_turn
from harbor_ray.trials.warm_pool import Ledger, WarmPool

# Method calls a host serves at once: its rollouts' `run`s plus the proxy replicas'
# admit/record calls for their sessions. Ray's default for async actors is 1,000.
_MAX_CALLS = 100_000

Ingress = Literal["direct", "serve", "host"]
Work = Callable[[RolloutSpec, CaptureService | None], Awaitable[RolloutRecord]]


@dataclass(frozen=True)
class Placement:
    """The node a host runs on: its address (what rows record) and Ray id (where the
    driver pins work for that node, such as reaping its sandboxes)."""

    ip: str
    node_id: str


@dataclass(frozen=True)
class ProxyTarget:
    """Where agents reach the capture proxy, and the model it serves (certified once).

    `url` is the proxy's Serve route; with `ingress="direct"` agents use their host's
    relay to the replicas of Serve application `app` instead. With `ingress="host"`,
    `url` is the engine's (the `upstream` API's), and each host serves the capture app
    itself, holding `upstream_key`.
    """

    url: str
    served_model: str
    ingress: Ingress
    app: str = CAPTURE_APP_NAME
    # How long one engine call may take, wherever the proxy runs (the replicas are
    # deployed with it; with host ingress the hosts call the engine themselves).
    engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S
    stitch: bool = True  # CaptureSettings.stitch, wherever the proxy runs
    logprobs_mode: str | None = None  # CaptureSettings.logprobs_mode, wherever it runs
    engine_kind: EngineKind = "vllm"  # the certified engine's, adapted wherever it runs
    capture: CaptureLevel = "tokens"  # CaptureSettings.capture, wherever the proxy runs
    upstream: UpstreamName = "openai-chat"  # the API behind the proxy (upstream_profile.py)
    # Its credential, for the hosts that call the upstream themselves (host ingress);
    # the replicas got theirs when deployed. None: no key.
    upstream_key: UpstreamKey | None = None
    # For agents in sandboxes off the host's node: the URL they use (`--proxy-url`), which
    # lands on a node's entry relay (remote_entry.py; direct ingress only). None: not
    # configured, and nothing listens off loopback for them.
    remote_url: str | None = None


@dataclass(frozen=True)
class WarmPoolPlan:
    """A host's warm pool of local sandboxes (trials/warm_pool.py): how many to keep
    started per task (`sizes`, by task name), the run's sandboxes and ledgers
    directories (each host uses its own subdirectory of both, on its node), and the
    run's start bucket for the local backend, which the pool's starts draw on."""

    sizes: Mapping[str, int]
    sandboxes_dir: Path
    ledgers_dir: Path
    starts: Any | None = None  # ActorHandle; None: no start rate


class RolloutHost(SessionOwner):
    """Runs rollouts (`run`); as their sessions' owner, answers the proxy replicas."""

    def __init__(
        self,
        name: str,
        proxy: ProxyTarget | None,
        work: Work | None = None,
        journaling: Journaling | None = None,
        warm_pool: WarmPoolPlan | None = None,
    ) -> None:
        # Every turn its sessions record goes to its journal first (journaling.py).
        super().__init__(name, None if journaling is None else journaling.open(name))
        self._proxy = proxy
        self._capture: LocalCapture | None = None
        self._relay: Relay | None = None
        # Holds the proxy a host serves with host ingress. Never exited: a host ends by
        # being killed, and its server and engine connections with it.
        self._serving = contextlib.AsyncExitStack()
        self._starting = asyncio.Lock()
        self._guarded: set[Path] = set()  # directories a guard reaps once this host ends
        # Injectable so that tests and benchmarks can run the cluster without Harbor trials.
        self._work = work or run_rollout
        context = ray.get_runtime_context()
        self.placement = Placement(ray.util.get_node_ip_address(), context.get_node_id())
        self._pool = None if warm_pool is None else self._open_pool(warm_pool)
        # Before the host counts as started: its rollouts' loop must not stall.
        preload_encoder_imports()

    def _open_pool(self, plan: WarmPoolPlan) -> WarmPool[Started]:
        """The host's warm pool, named after it in this process, where its rollouts'
        environments find it. Each environment starts filling once its first rollout
        has shown what its sandboxes are made of (trials/sandbox/pooled.py)."""
        backend = BwrapBackend(host_sandboxes(plan.sandboxes_dir, self.owner))
        reserve = None if plan.starts is None else plan.starts.reserve.remote
        pool = WarmPool(
            backend, plan.sizes, Ledger(host_ledger(plan.ledgers_dir, self.owner)), reserve
        )
        register_pool(self.owner, pool, backend)
        return pool

    def node(self) -> Placement:
        """Where this host runs (the driver's `ready` call)."""
        return self.placement

    async def end(self) -> None:
        """The driver ends this host normally (every rollout of it has its row): its
        journal is not needed, and goes; its warm pool stops every sandbox it holds
        (the driver kills the host after)."""
        if (journal := self.store.journal) is not None:
            self.store.journal = None
            journal.remove()
        if (pool := self._pool) is not None:
            self._pool = None
            unregister_pool(self.owner)
            await pool.close()

    async def run(self, spec: RolloutSpec, starts: Any | None = None) -> RolloutRecord:
        """The rollout's record, encoded here where its session lived, with where it ran
        (its sandbox and trial directory are on this node); like `run_rollout`, never
        raises but for cancellation. `starts`: the run's start bucket for the spec's
        backend (cluster/start_bucket.py), whose token the sandbox waits for."""
        capture: CaptureService | None = (
            await self._capture_service() if needs_model(spec.agent) else None
        )
        if capture is not None and (journal := self.store.journal) is not None:
            capture = JournaledCapture(capture, journal, spec.rollout_id)
        spec = self._own_sandboxes(spec)
        pooled = self._pooled(spec)
        if (sandboxes := spec.sandbox_kwargs.get("sandboxes_dir")) is not None:
            await self._guard(Path(sandboxes))
        if pooled is not None:
            spec = pooled  # the pool's own starts wait for their tokens
        elif starts is not None:
            await wait_turn(starts.reserve.remote)
        record = await self._work(spec, capture)
        return with_placement(record, node=self.placement.ip, host=self.owner)

    def _own_sandboxes(self, spec: RolloutSpec) -> RolloutSpec:
        """Sandboxes under the run's directory go in this host's own subdirectory, so that
        if it dies, its node's reaper removes its sandboxes and no neighbour's."""
        root = spec.sandbox_kwargs.get("sandboxes_dir")
        if root is None:
            return spec
        return dataclasses.replace(
            spec,
            sandbox_kwargs={
                **spec.sandbox_kwargs,
                "sandboxes_dir": str(host_sandboxes(Path(root), self.owner)),
            },
        )

    def _pooled(self, spec: RolloutSpec) -> RolloutSpec | None:
        """The spec whose sandbox comes from this host's warm pool, if its task has one."""
        if (
            self._pool is None
            or spec.sandbox not in ON_THIS_NODE
            or not self._pool.size(spec.task.name)
        ):
            return None
        return dataclasses.replace(
            spec,
            sandbox_kwargs={
                **spec.sandbox_kwargs,
                "warm_pool": self.owner,
                "warm_pool_environment": spec.task.name,
            },
        )

    async def _guard(self, directory: Path) -> None:
        """Start, once per directory, a process that reaps it when this host's process
        ends, however it ends (trials/sandbox/leftovers.py): a host SIGKILLed, or a
        whole cluster stopped, leaves no driver to reap what its sandboxes left."""
        if directory in self._guarded:
            return
        self._guarded.add(directory)
        directory.mkdir(parents=True, exist_ok=True)
        guard = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "harbor_ray.trials.sandbox.leftovers",
            "--after",
            str(os.getpid()),
            directory.name,
            cwd=directory.parent,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        if code := await guard.wait():
            raise SandboxError(
                f"the guard of {directory} failed to start (exit {code}): "
                "check that this node can write there and run harbor_ray"
            )

    async def _capture_service(self) -> LocalCapture | None:
        # The relay listens in this actor's event loop, so it starts with the first call.
        async with self._starting:
            if self._capture is None and self._proxy is not None:
                self._capture = await self._start_capture(self._proxy)
                # Before its first session: this host now serves model calls.
                freeze_startup_heap()
        return self._capture

    async def _start_capture(self, proxy: ProxyTarget) -> LocalCapture:
        if proxy.ingress == "host":
            # The host is the proxy: it follows the policy version as replicas do
            # (0 without an online controller publishing one).
            clock = PolicyClock(proxy.app)
            clock.start()
            self._serving.push_async_callback(clock.stop)
            adapted = await adapt_engine(
                build_upstream(
                    proxy.upstream,
                    proxy.url,
                    key=proxy.upstream_key,
                    timeout_s=proxy.engine_timeout_s,
                ),
                proxy.engine_kind,
            )
            return await self._serving.enter_async_context(
                serve_capture(
                    self.store,
                    adapted.engine,
                    proxy.served_model,
                    stitch=proxy.stitch and adapted.stitch,
                    policy_version=clock,
                    logprobs_mode=proxy.logprobs_mode,
                    capture=proxy.capture,
                )
            )
        url = proxy.url
        if proxy.ingress == "serve":
            # Serve's API blocks on its controller: off the loop that serves calls.
            url = await asyncio.to_thread(serve_url_on, self.placement.node_id, url)
        if proxy.ingress == "direct":
            registry = RegistryReader(proxy.app)
            self._relay = Relay(registry.entries, registry.remove)
            url = await self._relay.start()
        return LocalCapture(self.store, proxy.served_model, url, proxy.remote_url)


def start_host(
    name: str,
    *,
    proxy: ProxyTarget | None,
    num_cpus: float,
    work: Work | None = None,
    node_id: str | None = None,
    journaling: Journaling | None = None,
    warm_pool: WarmPoolPlan | None = None,
    kind: type[RolloutHost] = RolloutHost,
) -> Any:  # ActorHandle
    """Create a host named for its sessions. A small `num_cpus` so that Ray's CPU
    accounting never caps how many rollouts run at once: the sweep's concurrency does.
    Spread over the nodes: with so small a request Ray's default would pack every host
    on the driver's node, while its sandboxes want the whole cluster's cores. On
    `node_id` only, if given (the pool steering clear of a node it suspects lost): if
    that node goes too, the host fails to start rather than land elsewhere. `kind`: the
    actor's class (a test's subclass that reads its state)."""
    remote = ray.remote(kind).options(
        name=owner_actor_name(name),
        namespace=NAMESPACE,
        num_cpus=num_cpus,
        scheduling_strategy="SPREAD"
        if node_id is None
        else NodeAffinitySchedulingStrategy(node_id, soft=False),
        max_restarts=0,
        max_concurrency=_MAX_CALLS,
        runtime_env={"env_vars": WORKER_ENV},
    )
    return remote.remote(name, proxy, work, journaling, warm_pool)
