"""The warm pool against a backend stand-in: a burst of 500 starts keeps to the rate,
the pool refills to its size, and after `close` every start has its stop."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from harbor_ray.trials.start_rate import StartRate, TokenBucket
from harbor_ray.trials.warm_pool import Ledger, WarmPool, reap_ledger
from tests.rates import went_early
from tests.trials.fake_backend import FakeBackend
from tests.waiting import eventually

RATE = 200.0
SIZES = {"env-a": 3, "env-b": 2}


def _reserve(rate: float):
    bucket = TokenBucket(StartRate(per_s=rate), time.monotonic())

    async def reserve() -> float:
        return time.time() + bucket.reserve(time.monotonic())

    return reserve


async def test_a_burst_keeps_to_the_rate_the_pool_refills_and_nothing_leaks(tmp_path: Path) -> None:
    backend = FakeBackend(tmp_path)
    since = time.time()  # the bucket is made after this
    pool = WarmPool(backend, SIZES, Ledger(tmp_path / "ledger"), _reserve(RATE))
    pool.open()
    await eventually(lambda: all(pool.ready(e) == n for e, n in SIZES.items()))
    assert len(backend.events("start")) == sum(SIZES.values())

    taken = await asyncio.gather(*(pool.take("env-a" if i % 2 else "env-b") for i in range(500)))
    assert len({s.sandbox_id for s in taken}) == 500
    # Refilled to its size, through the same bucket as the burst.
    await eventually(lambda: all(pool.ready(e) == n for e, n in SIZES.items()))
    starts = backend.events("start")
    assert len(starts) == 500 + sum(SIZES.values())
    assert went_early(starts, since, RATE) == []  # late is allowed, early is not

    await asyncio.gather(*(pool.release(s) for s in taken))
    await pool.close()
    assert len(backend.events("stop")) == len(backend.events("start"))
    assert backend.live() == [] and Ledger(tmp_path / "ledger").listed() == []


async def test_close_mid_burst_stops_what_the_starts_under_way_bring(tmp_path: Path) -> None:
    backend = FakeBackend(tmp_path, start_s=0.2)
    pool = WarmPool(backend, {"env-a": 20}, Ledger(tmp_path / "ledger"), _reserve(RATE))
    pool.open()
    takes = [asyncio.ensure_future(pool.take("env-a")) for _ in range(30)]
    await asyncio.sleep(0.1)  # starts are under way, none ended
    for take in takes[:10]:
        take.cancel()  # a rollout cancelled while its sandbox starts
    await pool.close()
    handed = await asyncio.gather(*takes[10:])  # theirs, whenever the pool closed
    await asyncio.gather(*(pool.release(s) for s in handed))
    assert backend.live() == []
    assert len(backend.events("stop")) == len(backend.events("start")) > 20


async def test_the_reaper_stops_what_a_dead_hosts_ledger_names(tmp_path: Path) -> None:
    """The host 'dies': its pool is never closed; its ledger is all that is left."""
    backend = FakeBackend(tmp_path)
    pool = WarmPool(backend, {"env-a": 4}, Ledger(tmp_path / "ledger"))
    pool.open()
    await eventually(lambda: pool.ready("env-a") == 4)
    in_use = await pool.take("env-a")  # a rollout's: listed too
    await eventually(lambda: pool.ready("env-a") == 4)
    assert len(backend.live()) == 5 and in_use.sandbox_id in backend.live()
    assert await reap_ledger(Ledger(tmp_path / "ledger"), backend) == 5
    assert backend.live() == [] and not (tmp_path / "ledger").exists()
