"""Many rollouts in this process, with no Ray and no server: `harbor-ray rollout`.

Concurrency is an explicit number, and every rollout runs as a task on this event loop
(not a thread pool: anyio's default limiter silently capped such a pool at 40,
LESSONS.md).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from harbor_ray.capture.sampling import Sampling
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.trials.datasets import TaskRef
from harbor_ray.trials.rollout import CaptureService, RolloutSpec, run_rollout


def make_specs(
    tasks: Sequence[TaskRef],
    attempts: int,
    *,
    agent: str,
    sandbox: str,
    trials_dir: Path,
    sampling: Sampling | None = None,
    budget: int | None = None,
    deadline_s: float | None = None,
    reward_key: str | None = None,
    agent_kwargs: dict[str, Any] | None = None,
    run_id: str | None = None,
) -> list[RolloutSpec]:
    """tasks x attempts, in task order then attempt order (the documented output order)."""
    run_id = run_id or uuid.uuid4().hex[:8]
    return [
        RolloutSpec(
            rollout_id=f"{task.name}__{attempt}__{run_id}",
            task=task,
            agent=agent,
            sandbox=sandbox,
            attempt=attempt,
            trials_dir=trials_dir,
            sampling=sampling,
            budget=budget,
            deadline_s=deadline_s,
            reward_key=reward_key,
            agent_kwargs=agent_kwargs or {},
        )
        for task in tasks
        for attempt in range(attempts)
    ]


async def run_many(
    specs: Sequence[RolloutSpec],
    capture: CaptureService | None,
    *,
    concurrency: int,
    on_result: Callable[[RolloutRecord], None] | None = None,
) -> list[RolloutRecord]:
    """Run every spec, at most `concurrency` at once; records in spec order."""
    if concurrency < 1:
        raise ValueError("concurrency must be at least 1")
    gate = asyncio.Semaphore(concurrency)

    async def one(spec: RolloutSpec) -> RolloutRecord:
        async with gate:
            record = await run_rollout(spec, capture)
        if on_result is not None:
            on_result(record)
        return record

    return list(await asyncio.gather(*(one(spec) for spec in specs)))

