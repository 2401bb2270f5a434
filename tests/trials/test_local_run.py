"""`harbor_ray.trials.local_run.all_unwound`: a cancelled job returns only once every
rollout has unwound (its sandbox torn down), never while one is still tearing down."""

from __future__ import annotations

import asyncio

import pytest

from harbor_ray.trials.local_run import all_unwound


async def test_results_come_in_order() -> None:
    async def after(delay: float, value: int) -> int:
        await asyncio.sleep(delay)
        return value

    assert await all_unwound([after(0.02, 1), after(0, 2)]) == [1, 2]


async def test_cancelled_it_returns_only_once_every_one_has_unwound() -> None:
    unwound: list[str] = []
    started = asyncio.Event()

    async def running() -> None:
        try:
            started.set()
            await asyncio.sleep(30)
        finally:
            await asyncio.sleep(0.05)  # its sandbox's teardown
            unwound.append("torn down")

    async def queued() -> None:
        await asyncio.sleep(30)

    job = asyncio.ensure_future(all_unwound([running(), queued()]))
    await started.wait()
    job.cancel()
    with pytest.raises(asyncio.CancelledError):
        await job
    assert unwound == ["torn down"]
