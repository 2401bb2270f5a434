import asyncio
import random

import pytest

from harbor_ray.cluster.gate import ResizableGate


async def _hold(
    gate: ResizableGate, entered: list[int], i: int, release: asyncio.Event, peak: list[int]
) -> None:
    async with gate:
        entered.append(i)
        peak[0] = max(peak[0], gate.held)
        await release.wait()


async def test_a_cut_keeps_its_holders_and_admits_no_one_until_they_leave() -> None:
    gate = ResizableGate(4)
    entered: list[int] = []
    release, peak = asyncio.Event(), [0]
    tasks = [asyncio.create_task(_hold(gate, entered, i, release, peak)) for i in range(10)]
    await asyncio.sleep(0)
    assert entered == [0, 1, 2, 3] and gate.waiting == 6
    gate.resize(2)
    await asyncio.sleep(0)
    assert [t.done() for t in tasks[:4]] == [False] * 4  # a cut cancels no holder
    assert gate.held == 4 and len(entered) == 4
    gate.resize(7)
    await asyncio.sleep(0)
    assert entered == [0, 1, 2, 3, 4, 5, 6] and gate.held == 7  # in arrival order
    release.set()
    await asyncio.gather(*tasks)
    assert sorted(entered) == list(range(10)) and gate.held == 0 and peak[0] == 7


async def test_a_cancelled_waiter_takes_no_place_and_loses_none() -> None:
    gate = ResizableGate(1)
    release, peak, entered = asyncio.Event(), [0], []
    holder = asyncio.create_task(_hold(gate, entered, 0, release, peak))
    waiter = asyncio.create_task(_hold(gate, entered, 1, release, peak))
    await asyncio.sleep(0)
    waiter.cancel()
    release.set()
    await holder
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.held == 0 and entered == [0]


async def test_a_waiter_cancelled_as_its_place_came_gives_it_back() -> None:
    gate = ResizableGate(1)
    await gate.acquire()
    waiter = asyncio.create_task(gate.acquire())
    await asyncio.sleep(0)
    gate.release()  # the place goes to the waiter ...
    waiter.cancel()  # ... which is cancelled before it runs
    with pytest.raises(asyncio.CancelledError):
        await waiter
    assert gate.held == 0


async def test_many_acquirers_while_the_limit_moves_never_exceed_it_nor_get_lost() -> None:
    gate = ResizableGate(5)
    rng = random.Random(7)
    done: list[int] = []
    over: list[tuple[int, int]] = []
    limits = [5]

    async def rollout(i: int) -> None:
        async with gate:
            # Held beyond the limit only by those who entered before a cut.
            if gate.held > max(limits[-3:]):
                over.append((gate.held, gate.limit))
            for _ in range(rng.randint(0, 3)):
                await asyncio.sleep(0)
            done.append(i)

    async def steer() -> None:
        for _ in range(200):
            limits.append(rng.randint(1, 12))
            gate.resize(limits[-1])
            await asyncio.sleep(0)

    steering = asyncio.create_task(steer())
    await asyncio.gather(*(rollout(i) for i in range(500)))
    await steering
    assert sorted(done) == list(range(500)) and gate.held == 0 and gate.waiting == 0
    assert over == []
