"""The online controller: what `POST /v1/rollouts` and the other routes do, over the
cluster layer (a `HostPool` of rollout hosts and the `RolloutRunner` the sweep driver
uses: deadlines, cancellation, infrastructure retries with a fresh sandbox).

One `Controller` per service, run as a named Ray actor (`controller_actor`) so that
the HTTP replicas in front of it hold nothing: a replica restart loses no accepted request
and no undelivered group. Its rules (idempotent submits, capacity, groups, staleness)
are the pure `Book`'s; this module runs rollouts and keeps the policy version.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Protocol

from harbor_ray.cluster.admission import AdmissionController
from harbor_ray.cluster.fleet import sized_for_nodes
from harbor_ray.cluster.gate import ResizableGate
from harbor_ray.cluster.host import Work
from harbor_ray.cluster.journaling import Journaling, remove_everywhere
from harbor_ray.cluster.metrics_poller import steer_gate
from harbor_ray.cluster.pool import HostPool
from harbor_ray.cluster.reaper import reap_everywhere
from harbor_ray.cluster.runner import RolloutRunner, failed_record
from harbor_ray.cluster.sweep import in_sandboxes_dir
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.result import ErrorType, Provenance
from harbor_ray.data.writer import DatasetWriter
from harbor_ray.engine.provenance import served_provenance
from harbor_ray.errors import FieldError, OverCapacity
from harbor_ray.online.controller_config import ControllerConfig
from harbor_ray.online.groups import Book, GroupState, Phase, weights_as_sampled
from harbor_ray.online.policy_keeper import PolicyKeeper
from harbor_ray.online.submit_checks import Served, shown
from harbor_ray.online.weights import EngineWeights
from harbor_ray.online.wire import (
    AckReply,
    CancelReply,
    Group,
    PolicyReply,
    StatsReply,
    SubmitReply,
    SubmitRequest,
    WeightsReply,
    WeightsRequest,
)
from harbor_ray.trials.datasets import TaskRef
from harbor_ray.trials.harness import harness_provenance
from harbor_ray.trials.spec import RolloutSpec

__all__ = ["Controller", "ControllerConfig"]

_NEVER = 1 << 62  # the writer's own thresholds: the controller flushes each group itself

_log = logging.getLogger(__name__)


class Rollouts(Protocol):
    async def run(self, spec: RolloutSpec) -> RolloutRecord: ...


class Controller:
    """Accepts groups, runs their rollouts, hands finished groups out, keeps the version.

    `on_version` is called with each new policy version once every engine replica
    serves it (the proxies' policy clock, which stamps turns). `work` replaces Harbor
    trials on the hosts (the stub agent, in tests and benchmarks); `runner` replaces the
    hosts themselves (rollouts that never leave this process, no Ray: tests of the
    controller's own rules and the memory benchmark)."""

    def __init__(
        self,
        config: ControllerConfig,
        updater: EngineWeights,
        *,
        work: Work | None = None,
        on_version: Callable[[int], Awaitable[None]] | None = None,
        runner: Rollouts | None = None,
    ) -> None:
        self.config = config
        self._policy = PolicyKeeper(
            updater,
            config.initial_version,
            timeout_s=config.weights_timeout_s,
            on_version=on_version,
        )
        self.book = Book(
            capacity=config.capacity,
            max_staleness=config.max_staleness,
            stale_policy=config.stale_policy,
            retain_s=config.retain_s,
            retain_groups=config.retain_groups,
            request_ids=config.request_ids,
        )
        self._served = Served(config)
        # The engine's half of every row's provenance, hashed here once (reading the
        # weights is the one slow part); each agent's whole record is made at its first
        # group (`_provenance`). The weights' fields hold for rows the first weights
        # sampled only (`weights_as_sampled`).
        self._engine = (
            None if config.engine_files is None else served_provenance(*config.engine_files)
        )
        self._provenances: dict[str, Provenance] = {}
        self._gate = ResizableGate(config.concurrency)  # the adaptive cap's start too
        self._steering: asyncio.Task[None] | None = None  # the adaptive cap's poller
        self._in_flight = 0
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._awaited: dict[str, asyncio.Future[None]] = {}  # group id -> its end
        self._changed = asyncio.Event()
        self._started = time.time()
        self._sandboxes = config.work_dir / "sandboxes"
        self._ledgers = config.work_dir / "warm_pools"
        self._on_hosts = runner is None
        # Sized by the live nodes only where rollouts run on hosts.
        sized = (
            config
            if runner is not None
            else sized_for_nodes(config, setting="rollouts_per_host:", warn=_log.warning)
        )
        self._pool = HostPool(
            rollouts_per_host=sized.rollouts_per_host,
            proxy=config.proxy,
            num_cpus=config.host_cpus,
            work=work,
            sandboxes_dir=self._sandboxes,
            start_rate=config.start_rate,
            journaling=Journaling(
                config.work_dir / "journal", config.journal, config.train_partial
            ),
            warm_pool=config.warm_pool,
            ledgers_dir=self._ledgers,
        )
        self._runner: Rollouts
        if runner is None:
            self._runner = RolloutRunner(
                self._pool,
                config.retry_policy,
                on_start=self._start,
                on_end=self._end,
                on_lost=self._lost,
            )
            reap_everywhere(self._sandboxes, self._ledgers)
        else:
            self._runner = runner  # nothing reaches a host: no sandbox to reap
        self._writer = (
            None
            if config.out is None
            else DatasetWriter(
                config.out,
                {"online": config.manifest(), "started_at": self._started},
                flush_rollouts=_NEVER,
            )
        )

    def _steer(self) -> None:
        """Start the adaptive cap's poller, once, from a route (it needs the loop)."""
        config = self.config
        if (policy := config.admission) is None or self._steering is not None:
            return
        self._steering = asyncio.create_task(
            steer_gate(
                self._gate,
                AdmissionController(policy),
                config.engine_metrics,
                every_s=config.metrics_every_s,
            )
        )

    def _start(self) -> None:
        self._in_flight += 1

    def _end(self) -> None:
        self._in_flight -= 1

    # --- routes ---------------------------------------------------------------------

    async def submit(self, request: SubmitRequest) -> SubmitReply:
        self.book.forget(time.monotonic())
        known = self.book.known(request.request_id)
        if known is not None:
            return known  # a retried submit: nothing new starts
        tasks, sandbox = self._served.check(request)
        asked_n = sum(t.n for t in request.tasks)
        if (why := self.book.over_capacity(asked_n)) is not None:
            raise OverCapacity(why, retry_after_s=self.config.retry_after_s)
        refill = self._served.refill(request, tasks, sandbox)
        groups, specs = [], []
        for asked in request.tasks:
            group_id = uuid.uuid4().hex[:16]
            agent = asked.agent or request.agent
            group_specs = [
                self._spec(request, agent, tasks[asked.task], sandbox, group_id, k)
                for k in range(asked.n)
            ]
            specs += group_specs
            groups.append(
                GroupState(
                    group_id=group_id,
                    request_id=request.request_id,
                    task=asked.task,
                    rollout_ids=tuple(s.rollout_id for s in group_specs),
                    max_staleness=request.max_staleness,
                    metadata=request.metadata,
                    refill=refill if asked.n >= 2 else None,
                    agent=agent,
                )
            )
        reply = self.book.accept(request.request_id, groups, self.version)
        self._steer()
        self._start_all(specs)
        return reply

    def _start_all(self, specs: list[RolloutSpec]) -> None:
        for spec in in_sandboxes_dir(specs, self._sandboxes):
            task = asyncio.create_task(self._run(spec))
            task.add_done_callback(partial(self._never_ran, spec, time.time()))
            self._tasks[spec.rollout_id] = task

    def _replace(self, dropped: GroupState) -> None:
        """Start the group that takes the place of `dropped` (no signal)."""
        assert dropped.refill is not None
        request, tasks, sandbox = dropped.refill.origin
        task = dropped.refill.next_task()
        assert task is not None, "the book drops a group only within its request's bound"
        group_id = uuid.uuid4().hex[:16]
        specs = [
            self._spec(request, dropped.agent, tasks[task], sandbox, group_id, k)
            for k in range(dropped.n)
        ]
        self.book.replace(dropped, group_id, task, tuple(s.rollout_id for s in specs))
        self._start_all(specs)

    async def groups(self, max_groups: int, wait_s: float) -> list[Group]:
        """The oldest finished groups (at most `max_groups`), waiting up to `wait_s` for
        one when none is ready."""
        self.book.forget(time.monotonic())
        deadline = time.monotonic() + wait_s
        while not self.book.ready and (left := deadline - time.monotonic()) > 0:
            self._changed.clear()
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                break
        return [g.payload() for g in self.book.take(max_groups)]

    async def run_one(self, request: SubmitRequest) -> Group:
        """Submit `request` (one group) and answer with the group once it finished: for
        a caller that waits for its own rollouts (an MCP tool call). The group is never
        in the long poll's batches; a caller that gives up cancels it."""
        (ref,) = (await self.submit(request)).groups
        group = self.book.groups[ref.group_id]
        # Marked before its rollouts first run: submit only scheduled them.
        group.awaited = True
        ended = self._awaited.setdefault(ref.group_id, asyncio.get_running_loop().create_future())
        try:
            await ended
        except asyncio.CancelledError:
            await self.cancel(ref.group_id)
            raise
        finally:
            self._awaited.pop(ref.group_id, None)
        payload = group.payload()
        self.book.ack([ref.group_id])  # which lets its rows go
        return payload

    async def tasks(self, dataset: str | None) -> list[str]:
        """The task names of `dataset` (None: the controller's default), in its order."""
        return list(self._served.tasks(dataset))

    async def ack(self, group_ids: list[str]) -> AckReply:
        self.book.forget(time.monotonic())
        done, unknown = self.book.ack(group_ids)
        return AckReply(acknowledged=done, unknown=unknown)

    async def cancel(self, group_id: str) -> CancelReply:
        self.book.forget(time.monotonic())
        group = self.book.cancel(group_id)
        if group is None:
            raise FieldError(f"no group {shown(group_id)}", status=404, field="group_id")
        running = [self._tasks[r] for r in self.book.running_ids(group) if r in self._tasks]
        for task in running:
            task.cancel()
        if (waiter := self._awaited.get(group_id)) is not None and not waiter.done():
            waiter.set_exception(
                FieldError(f"group {group_id} cancelled", status=409, field="group_id")
            )
        # Answer once the rollouts ended (rows made, sandboxes torn down).
        await asyncio.gather(*running, return_exceptions=True)
        return CancelReply(group_id=group_id, cancelled=len(running))

    async def update_weights(self, request: WeightsRequest) -> WeightsReply:
        return await self._policy.update(request)

    async def policy(self) -> PolicyReply:
        return self._policy.reply()

    @property
    def version(self) -> int:
        """The policy version every engine replica serves (stamped on each turn)."""
        return self._policy.version

    async def stats(self) -> StatsReply:
        book = self.book
        minutes = max(time.time() - self._started, 1e-9) / 60
        return StatsReply(
            queued=book.unfinished - self._in_flight,
            in_flight=self._in_flight,
            finished=book.finished_rollouts,
            groups_ready=len(book.ready),
            delivered=book.delivered,
            dropped=book.dropped,
            cancelled=book.cancelled,
            errors=dict(book.errors),
            staleness=dict(book.staleness_seen),
            no_signal_dropped=book.no_signal_dropped,
            no_signal_delivered=book.no_signal_delivered,
            signal_kept=book.signal_kept,
            extra_rollouts=book.extra_rollouts,
            rollouts_per_min=book.finished_rollouts / minutes,
            concurrency_limit=self._gate.limit,
        )

    def shutdown(self) -> None:
        if self._steering is not None:
            self._steering.cancel()
        for task in self._tasks.values():
            task.cancel()
        self._pool.shutdown()
        if self._on_hosts:
            reap_everywhere(self._sandboxes, self._ledgers)
        if self._writer is not None:
            self._writer.close(time.time())
        if self._on_hosts and self._pool.journaling is not None:
            # After the writer: the rows made from dead hosts' journals are committed.
            # Those whose rows were committed went then; this removes the rest (rows
            # never written: no dataset, a group dropped).
            remove_everywhere(self._pool.journaling)

    # --- rollouts -------------------------------------------------------------------

    def _spec(
        self, request: SubmitRequest, agent: str, task: TaskRef, sandbox: str, group_id: str, k: int
    ) -> RolloutSpec:
        return RolloutSpec(
            rollout_id=f"{group_id}__{k}",
            task=task,
            agent=agent,
            trials_dir=self.config.work_dir / "trials",
            sandbox=sandbox,
            attempt=k,
            sampling=request.sampling,
            budget=request.budget,
            deadline_s=request.deadline_s,
            host_userland=self.config.host_userland,
            provenance=self._provenance(agent),
        )

    def _provenance(self, agent: str) -> Provenance:
        """What `agent`'s rows are made with: the harness as the service runs it (no
        profile, no keyword arguments a submit could set), on the service's engine."""
        if agent not in self._provenances:  # an allowed agent: a bounded few
            self._provenances[agent] = harness_provenance(
                agent, profile=None, agent_kwargs={}
            ).with_engine(self._engine)
        return self._provenances[agent]

    async def _run(self, spec: RolloutSpec) -> None:
        started = time.time()
        try:
            async with self._gate:
                record = await self._runner.run(spec)
        except asyncio.CancelledError:
            record = failed_record(
                spec, ErrorType.CANCELLED, "cancelled by the trainer", time.time() - started
            )
        self._finished(record)

    def _never_ran(self, spec: RolloutSpec, submitted: float, task: asyncio.Task[None]) -> None:
        """A rollout cancelled before its task first ran (`_run` never saw the
        cancellation) still ends as its cancelled row."""
        if task.cancelled() and self._tasks.get(spec.rollout_id) is task:
            self._finished(
                failed_record(
                    spec, ErrorType.CANCELLED, "cancelled by the trainer", time.time() - submitted
                )
            )

    def _lost(self, record: RolloutRecord) -> None:
        """A lost try that is retried: its journaled turns go to `out` as a partial row
        of its own (`<rollout_id>@<host>`); the group waits for the retry's row."""
        if self._writer is not None:
            self._writer.add(weights_as_sampled(record, self.config.initial_version))
            self._writer.flush()
            self._pool.committed([record.rollout_id])  # its journal may go (pool.py)

    def _finished(self, record: RolloutRecord) -> None:
        self._tasks.pop(record.rollout_id, None)
        record = weights_as_sampled(record, self.config.initial_version)
        group = self.book.finish(record, self.version)
        if group is None:
            return
        if group.phase is Phase.NO_SIGNAL:
            self._replace(group)
            return
        if group.phase is Phase.READY and self._writer is not None:
            # Written when it becomes ready, not when acknowledged: a trainer that dies
            # before its ack still leaves the group in the dataset. One part per group,
            # committed before the group can be delivered.
            for rollout_id in group.rollout_ids:
                self._writer.add(group.records[rollout_id])
            self._writer.flush()
            self._pool.committed(list(group.rollout_ids))
        self._changed.set()
        if (waiter := self._awaited.get(group.group_id)) is not None and not waiter.done():
            waiter.set_result(None)
