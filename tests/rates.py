"""How fast things started, from their timestamps (the start-rate tests' measure)."""


def most_in_any_second(times: list[float]) -> int:
    """The most timestamps in any one-second window (each opening at one of them)."""
    times = sorted(times)
    return max(sum(1 for t in times if start <= t < start + 1.0 - 1e-9) for start in times)
