"""Waiting in async tests for a condition another process or task brings about."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable


async def eventually(
    condition: Callable[[], bool], timeout_s: float = 10.0, what: str = "the condition"
) -> None:
    """Return once `condition()` holds; fail the test if it does not within `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"not reached in {timeout_s:g} s: {what}"
        await asyncio.sleep(0.05)
