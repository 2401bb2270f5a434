from harbor_ray.trials.start_rate import StartRate, TokenBucket, wait_turn
from tests.rates import most_in_any_second


def test_a_bucket_lets_its_burst_through_then_one_per_interval() -> None:
    bucket = TokenBucket(StartRate(per_s=5, burst=3), now=0.0)
    assert [bucket.reserve(0.0) for _ in range(5)] == [0.0, 0.0, 0.0, 0.2, 0.4]
    # A quiet spell refills it, never past the burst.
    assert bucket.reserve(100.0) == 0.0
    assert [bucket.reserve(100.0) for _ in range(3)] == [0.0, 0.0, 0.2]


def test_no_rate_is_no_limit() -> None:
    assert StartRate.of(0.0) is None
    assert StartRate.of(5.0) == StartRate(per_s=5.0)


async def test_a_burst_of_500_starts_keeps_to_the_rate() -> None:
    """500 rollouts arrive within a second; each start's moment is the clock at its
    call plus what it was made to wait."""
    now = [0.0]
    waited: list[float] = []
    bucket = TokenBucket(StartRate(per_s=5, burst=2), now=0.0)

    async def reserve() -> float:
        return now[0] + bucket.reserve(now[0])

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    started: list[float] = []
    for i in range(500):
        now[0] = i / 500
        before = len(waited)
        await wait_turn(reserve, clock=lambda: now[0], sleep=sleep)
        started.append(now[0] + (waited[-1] if len(waited) > before else 0.0))
    assert most_in_any_second(started) <= 5 + 2
    assert started == sorted(started)  # in arrival order
    assert max(started) >= (500 - 2) / 5 - 1e-9  # none went early


async def test_a_start_waits_until_its_token_is_due_not_a_wait_from_its_arrival() -> None:
    slept: list[float] = []

    async def sleep(seconds: float) -> None:
        slept.append(seconds)

    async def due_at_1() -> float:
        return 1.0

    await wait_turn(due_at_1, clock=lambda: 0.75, sleep=sleep)  # the answer took 0.25 s
    await wait_turn(due_at_1, clock=lambda: 1.5, sleep=sleep)  # already due: no sleep
    assert slept == [0.25]
