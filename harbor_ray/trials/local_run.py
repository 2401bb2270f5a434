"""Many rollouts in this process, with no Ray and no server: `harbor-ray rollout`.

Concurrency is an explicit number, and every rollout runs as a task on this event loop
(not a thread pool: anyio's default limiter silently capped such a pool at 40,
docs/lessons.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Iterable, Sequence
from typing import Any

from harbor_ray.data.encode import RolloutRecord
from harbor_ray.trials.rollout import run_rollout
from harbor_ray.trials.spec import CaptureService, RolloutSpec
from harbor_ray.trials.stages import StageListener


async def run_many(
    specs: Sequence[RolloutSpec],
    capture: CaptureService | None,
    *,
    concurrency: int,
    on_result: Callable[[RolloutRecord], None] | None = None,
    on_stage: StageListener | None = None,
) -> list[RolloutRecord]:
    """Run every spec, at most `concurrency` at once; records in spec order. `on_stage`
    hears each stage each trial reaches."""
    assert concurrency >= 1, "concurrency must be at least 1 (jobs.rollouts refuses less)"
    gate = asyncio.Semaphore(concurrency)

    async def one(spec: RolloutSpec) -> RolloutRecord:
        async with gate:
            record = await run_rollout(spec, capture, on_stage=on_stage)
        if on_result is not None:
            on_result(record)
        return record

    return await all_unwound(one(spec) for spec in specs)


async def all_unwound[T](work: Iterable[Coroutine[Any, Any, T]]) -> list[T]:
    """Each coroutine's result, in order, all run at once. Cancelled, it cancels each one
    and returns only once every one has unwound. Not `asyncio.gather`: its future is done
    as soon as one child ends cancelled (a rollout still queued), so a job stopped by
    Ctrl-C ended while a running rollout was still tearing its sandbox down, and
    `asyncio.run` then cancelled that teardown too and waited on it for good."""
    async with asyncio.TaskGroup() as group:
        tasks = [group.create_task(each) for each in work]
    return [task.result() for task in tasks]
