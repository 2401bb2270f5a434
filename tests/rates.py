"""How fast things started, from their timestamps (the start-rate tests' measure)."""


def most_in_any_second(times: list[float]) -> int:
    """The most timestamps in any one-second window (each opening at one of them)."""
    times = sorted(times)
    return max(sum(1 for t in times if start <= t < start + 1.0 - 1e-9) for start in times)


def went_early(
    times: list[float], since: float, per_s: float, burst: int = 1
) -> list[tuple[int, float]]:
    """The starts (their rank in time order, their time) that came before a bucket of
    `burst` tokens refilled at `per_s` a second, made no earlier than `since`, could have
    let them go: the k-th start (from 0) takes the (k + 1)-th token, which is not due
    before `since + (k + 1 - burst) / per_s`.

    A start woken late (a busy event loop, a loaded machine) is never early, so, unlike
    a count of starts in a second (late starts bunch with the next ones) or the span from
    the first start (which may itself be late), this check load cannot fail."""
    return [
        (k, t) for k, t in enumerate(sorted(times)) if t < since + (k + 1 - burst) / per_s - 1e-3
    ]  # 1 ms: float and clock reads
