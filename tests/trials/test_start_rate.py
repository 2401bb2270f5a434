
from harbor_ray.trials.start_rate import StartLimiter, StartRate, TokenBucket, host_share


def _most_in_any_second(times: list[float]) -> int:
    times = sorted(times)
    return max(sum(1 for t in times if start <= t < start + 1.0 - 1e-9) for start in times)


def test_a_bucket_lets_its_burst_through_then_one_per_interval() -> None:
    bucket = TokenBucket(StartRate(per_s=5, burst=3), now=0.0)
    assert [bucket.reserve(0.0) for _ in range(5)] == [0.0, 0.0, 0.0, 0.2, 0.4]
    # A quiet spell refills it, never past the burst.
    assert bucket.reserve(100.0) == 0.0
    assert [bucket.reserve(100.0) for _ in range(3)] == [0.0, 0.0, 0.2]


async def test_a_burst_of_500_starts_keeps_to_the_rate() -> None:
    """500 rollouts arrive within a second; each start's moment is the clock at its
    call plus what it was made to wait."""
    now = [0.0]
    waited: list[float] = []

    async def sleep(seconds: float) -> None:
        waited.append(seconds)

    limiter = StartLimiter(StartRate(per_s=5, burst=2), clock=lambda: now[0], sleep=sleep)
    started: list[float] = []
    for i in range(500):
        now[0] = i / 500
        before = len(waited)
        await limiter.wait()
        started.append(now[0] + (waited[-1] if len(waited) > before else 0.0))
    assert _most_in_any_second(started) <= 5 + 2
    assert started == sorted(started)  # in arrival order
    assert max(started) >= (500 - 2) / 5 - 1e-9  # none went early


def test_each_host_takes_an_even_share_of_the_run_s_rate() -> None:
    assert host_share(0.0, 100, 8) is None
    assert host_share(5.0, 100, 8) == StartRate(per_s=5.0 / 13)  # 13 hosts for 100
