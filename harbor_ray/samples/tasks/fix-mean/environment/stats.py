"""Small statistics helpers."""


def mean(values):
    """The arithmetic mean of a non-empty list of numbers."""
    return sum(values) // len(values)


def median(values):
    """The middle value of a non-empty list of numbers.

    For an even count, the mean of the two middle values.
    """
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return mean(ordered[middle - 1 : middle + 1])
