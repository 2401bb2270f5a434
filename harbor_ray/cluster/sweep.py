"""The sweep driver: tasks x attempts on rollout hosts, into one resumable dataset.

Used by `harbor-ray sweep` and by `jobs/sweep.py` (the `ray job submit` entry). It
guarantees at most `concurrency` rollouts at once (and nothing else caps them; with
`max_concurrency` the cap moves between `min_concurrency` and it, steered by the engines'
load: admission.py), every
rollout ends as one row (runner.py), rows committed every `commit_every_s` seconds so a rerun
skips finished ids and duplicates nothing, and the sweep's sandboxes reaped on every
node at start and end (reaper.py). How each holds: docs/sweeps.md.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harbor_ray.cluster.admission import AdmissionController
from harbor_ray.cluster.fleet import FleetSettings
from harbor_ray.cluster.gate import ResizableGate
from harbor_ray.cluster.host import ProxyTarget, Work
from harbor_ray.cluster.journaling import Journaling, remove_everywhere
from harbor_ray.cluster.metrics_poller import steer_gate
from harbor_ray.cluster.pool import HostPool
from harbor_ray.cluster.reaper import reap_everywhere
from harbor_ray.cluster.runner import RetryPolicy, RolloutRunner
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.result import RolloutResult
from harbor_ray.data.writer import DatasetWriter
from harbor_ray.errors import StartError, WarmPoolUnsupportedError
from harbor_ray.trials.backends import ON_THIS_NODE
from harbor_ray.trials.local_run import all_unwound
from harbor_ray.trials.spec import RolloutSpec


@dataclass(frozen=True)
class SweepConfig(FleetSettings):
    """How the driver runs rollouts (the fleet settings and the sweep's own); the specs
    say what each rollout is."""

    out: Path
    proxy: ProxyTarget | None = None  # where agents call the model; None: no agent does
    host_cpus: float = 0.01
    host_start_s: float = 600.0  # a host not running by then is lost (and retried)
    # Finished rows are committed together every this many seconds (0: each on its own).
    # A driver killed in between loses the rows of the last interval (rerun, not doubled).
    commit_every_s: float = 2.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.commit_every_s < 0:
            raise StartError(
                "the commit interval cannot be negative: 0 commits each row on its own"
            )

    @property
    def retry_policy(self) -> RetryPolicy:
        return RetryPolicy(
            retries=self.retries, grace_s=self.grace_s, host_start_s=self.host_start_s
        )

    @property
    def sandboxes_dir(self) -> Path:
        return self.out / "sandboxes"

    @property
    def ledgers_dir(self) -> Path:
        return self.out / "warm_pools"

    @property
    def journaling(self) -> Journaling:
        return Journaling(self.out / "journal", self.journal, self.train_partial)


@dataclass
class SweepStats:
    """What the progress bar and the summary show; updated as rows arrive."""

    total: int
    skipped: int = 0
    started_at: float = field(default_factory=time.time)
    ended_at: float | None = None
    in_flight: int = 0
    peak_in_flight: int = 0
    limit: int = 0  # the cap on rollouts in flight now (it moves when adaptive)
    limits_seen: tuple[int, int] = (0, 0)  # the lowest and highest cap so far
    done: int = 0
    ok: int = 0
    salvaged: int = 0  # partial rows of lost tries that were retried (besides `done`)
    rewards: list[float] = field(default_factory=list)
    by_task: dict[str, Counter[str]] = field(default_factory=dict)
    by_error: Counter[str] = field(default_factory=Counter)
    write_s: float = 0.0  # the driver's time in the dataset writer (buffering, commits)
    # Image builds (and unpacks) the rollouts waited for, apart from their own time.
    builds: int = 0
    build_s: float = 0.0

    def started(self) -> None:
        self.in_flight += 1
        self.peak_in_flight = max(self.peak_in_flight, self.in_flight)

    def finished(self) -> None:
        self.in_flight -= 1

    def capped(self, limit: int) -> None:
        self.limit = limit
        low, high = self.limits_seen
        self.limits_seen = (min(low, limit) if low else limit, max(high, limit))

    def add(self, result: RolloutResult) -> None:
        self.done += 1
        self.ok += result.ok
        if result.reward is not None:
            self.rewards.append(result.reward)
        outcome = "ok" if result.ok else (result.error_type or "failed")
        self.by_task.setdefault(result.task, Counter())[str(outcome)] += 1
        if result.error_type is not None:
            self.by_error[str(result.error_type)] += 1
        if build_s := result.timings.get("environment_build"):
            self.builds += 1
            self.build_s += build_s

    @property
    def failed(self) -> int:
        return self.done - self.ok

    @property
    def mean_reward(self) -> float | None:
        return sum(self.rewards) / len(self.rewards) if self.rewards else None

    def per_minute(self, now: float) -> float:
        return 60.0 * self.done / max(now - self.started_at, 1e-9)


async def run_rollouts(
    specs: Sequence[RolloutSpec],
    config: SweepConfig,
    stats: SweepStats,
    on_result: Callable[[RolloutRecord], None],
    *,
    work: Work | None = None,
    on_lost: Callable[[RolloutRecord], None] = lambda _: None,
) -> None:
    """Run every spec on the pool's hosts, `config.concurrency` at once (or as many as
    the adaptive cap allows); rows to `on_result` in the order they finish, and the
    partial rows of lost tries that were retried to `on_lost`."""
    gate = ResizableGate(config.concurrency)
    stats.capped(gate.limit)
    pool = HostPool(
        rollouts_per_host=config.rollouts_per_host,
        proxy=config.proxy,
        num_cpus=config.host_cpus,
        work=work,
        sandboxes_dir=config.sandboxes_dir,
        start_rate=config.start_rate,
        journaling=config.journaling,
        warm_pool=config.warm_pool,
        ledgers_dir=config.ledgers_dir,
    )
    runner = RolloutRunner(
        pool, config.retry_policy, on_start=stats.started, on_end=stats.finished, on_lost=on_lost
    )

    async def one(spec: RolloutSpec) -> None:
        async with gate:
            record = await runner.run(spec)
        stats.add(record.result)
        on_result(record)

    steering = None
    if (policy := config.admission) is not None:
        steering = asyncio.create_task(
            steer_gate(
                gate,
                AdmissionController(policy),
                config.engine_metrics,
                every_s=config.metrics_every_s,
                on_limit=stats.capped,
            )
        )
    try:
        await all_unwound(one(spec) for spec in specs)
    finally:
        if steering is not None:
            steering.cancel()
        await pool.close()


# The backends whose sandboxes a warm pool can start before their trial (pooled.py).
POOLED_BACKENDS = tuple(sorted(ON_THIS_NODE))


def check_warm_pool(backend: str, sizes: Mapping[str, int]) -> None:
    """Refuse a warm pool on a backend that has none, rather than run without one."""
    if sizes and backend not in POOLED_BACKENDS:
        raise WarmPoolUnsupportedError(
            f"a warm pool (--warm-pool, warm_pool) works with the "
            f"{' and '.join(POOLED_BACKENDS)} sandboxes only, not {backend!r}: a {backend} "
            "sandbox cannot be handed to a trial Harbor builds with its own paths. Drop "
            "the warm pool, or use harbor_ray's own sandbox (--sandbox container or "
            "local)."
        )


def in_sandboxes_dir(specs: Sequence[RolloutSpec], directory: Path) -> list[RolloutSpec]:
    """Sandboxes on the nodes go under the run's own directory, so the reaper knows what
    is its."""
    return [
        dataclasses.replace(
            spec, sandbox_kwargs={**spec.sandbox_kwargs, "sandboxes_dir": str(directory)}
        )
        if spec.sandbox in ON_THIS_NODE
        else spec
        for spec in specs
    ]


async def sweep(
    specs: Sequence[RolloutSpec],
    config: SweepConfig,
    manifest: Mapping[str, Any],
    *,
    on_stats: Callable[[SweepStats], None] | None = None,
    work: Work | None = None,
) -> SweepStats:
    """Reap, skip what OUT already holds, run the rest into OUT, reap again.

    `on_stats` is called after every row (and once at the start), e.g. for a progress bar.
    """
    for backend in {spec.sandbox for spec in specs}:
        check_warm_pool(backend, config.warm_pool)
    reap_everywhere(config.sandboxes_dir, config.ledgers_dir)
    started = time.time()
    # One part per commit: thresholds only bound a commit's memory, the interval sets it.
    writer = DatasetWriter(
        config.out,
        {**manifest, "started_at": started},
        flush_rollouts=1 if config.commit_every_s == 0 else 10_000,
    )
    finished = writer.finished_ids()
    todo = [
        s for s in in_sandboxes_dir(specs, config.sandboxes_dir) if s.rollout_id not in finished
    ]
    stats = SweepStats(total=len(todo), skipped=len(specs) - len(todo), started_at=started)
    notify = on_stats or (lambda _: None)
    notify(stats)

    def timed(write: Callable[[], None]) -> None:
        start = time.perf_counter()
        write()
        stats.write_s += time.perf_counter() - start

    def on_result(record: RolloutRecord) -> None:
        timed(lambda: writer.add(record))
        notify(stats)

    def on_lost(record: RolloutRecord) -> None:
        stats.salvaged += 1
        timed(lambda: writer.add(record))

    async def commit_every(seconds: float) -> None:
        while True:
            await asyncio.sleep(seconds)
            timed(writer.flush)

    committing = (
        asyncio.create_task(commit_every(config.commit_every_s)) if config.commit_every_s else None
    )
    try:
        await run_rollouts(todo, config, stats, on_result, work=work, on_lost=on_lost)
    finally:
        if committing is not None:
            committing.cancel()
        stats.ended_at = time.time()
        timed(lambda: writer.close(stats.ended_at))
        remove_everywhere(config.journaling)  # every row made from them is committed
        reap_everywhere(config.sandboxes_dir, config.ledgers_dir)
    return stats
