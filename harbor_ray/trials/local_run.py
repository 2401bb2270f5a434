"""Many rollouts in this process, with no Ray and no server: `harbor-ray rollout`.

Concurrency is an explicit number, and every rollout runs as a task on this event loop
(not a thread pool: anyio's default limiter silently capped such a pool at 40,
docs/lessons.md).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from harbor_ray.data.encode import RolloutRecord
from harbor_ray.trials.rollout import CaptureService, RolloutSpec, run_rollout


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

