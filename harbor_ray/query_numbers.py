"""Whole numbers read from a URL's query string (a cursor, a page size), parsed strictly.

`str.isdigit` is not the test: it passes '²', which `int()` refuses (a 500 where the
check meant a 400), and other scripts' digits, which `int()` reads; `int()` also takes
signs, spaces and underscores, and refuses a string past 4,300 digits. So a count is
ASCII digits only, at most `COUNT_DIGITS` of them; anything else is the caller's to
refuse.
"""

from __future__ import annotations

import re

__all__ = ["COUNT_DIGITS", "parse_count"]

COUNT_DIGITS = 9  # below a billion: more than any count a page asks for
_COUNT = re.compile(rf"[0-9]{{1,{COUNT_DIGITS}}}")


def parse_count(raw: str, high: int) -> int | None:
    """`raw` as a whole number in [0, `high`] written in ASCII digits, or None."""
    if not _COUNT.fullmatch(raw):
        return None
    value = int(raw)
    return value if value <= high else None
