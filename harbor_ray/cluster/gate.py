"""A gate of `limit` places whose limit can change while rollouts hold and wait for it.

Like `asyncio.Semaphore`, but `resize` moves the limit: a rise lets waiters in at once; a
cut never cancels a holder, it only keeps new ones out until enough have left. Waiters
enter in arrival order. Every place taken is given back once, on the way out of
`async with`, however the body ends (a cancelled waiter takes nothing). A limit is at
least 1: the configs that set it check that (SweepConfig, AdmissionPolicy).
"""

from __future__ import annotations

import asyncio
from collections import deque
from types import TracebackType


class ResizableGate:
    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.held = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    @property
    def waiting(self) -> int:
        return len(self._waiters)

    def resize(self, limit: int) -> None:
        """Allow `limit` holders from now on; those beyond it keep their places."""
        self.limit = limit
        self._wake()

    async def acquire(self) -> None:
        if self.held < self.limit and not self._waiters:
            self.held += 1
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            await waiter  # resolved by _wake, which counts the place as held
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # the place came with the cancellation: give it back
            raise
        finally:
            if waiter in self._waiters:
                self._waiters.remove(waiter)

    def release(self) -> None:
        self.held -= 1
        self._wake()

    def _wake(self) -> None:
        while self._waiters and self.held < self.limit:
            waiter = self._waiters.popleft()
            if not waiter.done():
                self.held += 1
                waiter.set_result(None)

    async def __aenter__(self) -> None:
        await self.acquire()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.release()
