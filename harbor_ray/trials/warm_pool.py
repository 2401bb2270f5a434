"""A warm pool: sandboxes started ahead of the rollouts that will use them, a number per
task environment, so that a rollout on a backend that is slow to create one (a cloud
sandbox takes seconds) starts at once.

- `take(environment)` hands over a started sandbox when one is ready, else starts one
  for the caller; either way a refill starts, in the background, through the same start
  bucket as every other start of the run (trials/start_rate.py), so the pool never adds
  creations past the rate.
- Every sandbox the pool started and nobody stopped is in its `Ledger`, a file each
  in a directory on the host's node, from the moment its start returns to the moment its
  stop does, whoever holds it (the pool, or the rollout it was handed to). A host that
  dies leaves its ledger behind, and the reaper stops each sandbox it names
  (`reap_ledger`, run on that node); a host that ends normally `close`s its pool, which
  stops every sandbox it still holds.

The backend is a seam (`SandboxBackend`): what starts and stops one sandbox, and stops
one by the id the ledger kept. No clock is read here.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from harbor_ray.errors import SandboxError
from harbor_ray.trials.start_rate import Reserve, wait_turn

__all__ = [
    "Ledger",
    "PooledSandbox",
    "SandboxBackend",
    "WarmPool",
    "reap_ledger",
]

_SUFFIX = ".pooled"


class PooledSandbox(Protocol):
    @property
    def sandbox_id(self) -> str: ...


class SandboxBackend[S: PooledSandbox](Protocol):
    async def start(self, environment: str) -> S: ...

    async def stop(self, sandbox: S) -> None: ...

    async def stop_id(self, sandbox_id: str) -> None:
        """Stop a sandbox known only by its id (what a dead host's ledger kept)."""
        ...


@dataclass(frozen=True)
class Ledger:
    """The sandboxes a host started and has not stopped: `<id>.pooled` files in
    `directory`, each holding its environment's name."""

    directory: Path

    def add(self, sandbox_id: str, environment: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self._path(sandbox_id).write_text(environment)

    def drop(self, sandbox_id: str) -> None:
        self._path(sandbox_id).unlink(missing_ok=True)

    def listed(self) -> list[str]:
        if not self.directory.is_dir():
            return []
        return sorted(p.name.removesuffix(_SUFFIX) for p in self.directory.glob(f"*{_SUFFIX}"))

    def _path(self, sandbox_id: str) -> Path:
        if not re.fullmatch(r"[A-Za-z0-9_.-]+", sandbox_id):
            raise SandboxError(
                f"the backend named a sandbox {sandbox_id!r}, which cannot be a ledger's file name"
            )
        return self.directory / f"{sandbox_id}{_SUFFIX}"


async def reap_ledger[S: PooledSandbox](ledger: Ledger, backend: SandboxBackend[S]) -> int:
    """Stop every sandbox a dead host's ledger names; how many. One that fails to stop
    stays listed for the next reap."""
    stopped = 0
    for sandbox_id in ledger.listed():
        try:
            await backend.stop_id(sandbox_id)
        except Exception:  # the next reap tries again
            continue
        ledger.drop(sandbox_id)
        stopped += 1
    with contextlib.suppress(OSError):
        ledger.directory.rmdir()
    return stopped


class WarmPool[S: PooledSandbox]:
    """Started sandboxes of `backend`, `sizes[environment]` of each kept ready."""

    def __init__(
        self,
        backend: SandboxBackend[S],
        sizes: Mapping[str, int],
        ledger: Ledger,
        reserve: Reserve | None = None,
    ) -> None:
        self._backend, self._sizes, self._ledger = backend, dict(sizes), ledger
        self._reserve = reserve
        self._ready: dict[str, list[S]] = {name: [] for name in self._sizes}
        self._wanted = {name: asyncio.Event() for name in self._sizes}
        self._refills: dict[str, asyncio.Task[None]] = {}
        # Stops of sandboxes whose start outlived the one awaiting it (a refill ended
        # by `close`, a `take` cancelled): awaited by `close`.
        self._cleanups: set[asyncio.Task[None]] = set()
        self._closed = False

    def size(self, environment: str) -> int:
        """How many of `environment` the pool keeps ready (0: it has no pool)."""
        return self._sizes.get(environment, 0)

    def ready(self, environment: str) -> int:
        return len(self._ready.get(environment, ()))

    def open(self) -> None:
        """Begin filling every environment's pool."""
        for name in self._sizes:
            self.open_environment(name)

    def open_environment(self, environment: str) -> None:
        """Begin filling `environment`'s pool, if it has one and it is not filling yet:
        for a backend that learns how to start an environment's sandbox from its first
        rollout (trials/sandbox/pooled.py)."""
        size = self._sizes.get(environment, 0)
        if size > 0 and environment not in self._refills and not self._closed:
            self._refills[environment] = asyncio.create_task(self._refill(environment, size))
            self._wanted[environment].set()

    async def take(self, environment: str) -> S:
        """A started sandbox of `environment`, now the caller's to `release`: a ready one
        if there is, else one started now (after its token)."""
        assert not self._closed, "take after close"
        if ready := self._ready.get(environment):
            sandbox = ready.pop(0)
            self._wanted[environment].set()
            return sandbox
        return await self._start(environment)

    async def release(self, sandbox: S) -> None:
        """Stop a sandbox `take` handed out (its rollout ended)."""
        await self._backend.stop(sandbox)
        self._ledger.drop(sandbox.sandbox_id)

    async def close(self) -> None:
        """Stop refilling, stop every ready sandbox and every one a start under way
        brings. Sandboxes handed out stay their takers' to release."""
        self._closed = True
        for refill in self._refills.values():
            refill.cancel()
        await asyncio.gather(*self._refills.values(), return_exceptions=True)
        for ready in self._ready.values():
            while ready:
                await self.release(ready.pop())
        while self._cleanups:
            await asyncio.gather(*self._cleanups, return_exceptions=True)

    async def _refill(self, environment: str, size: int) -> None:
        wanted, ready = self._wanted[environment], self._ready[environment]
        while True:
            await wanted.wait()
            wanted.clear()
            while len(ready) < size:
                ready.append(await self._start(environment))

    async def _start(self, environment: str) -> S:
        if self._reserve is not None:
            await wait_turn(self._reserve)
        # A start is never cut short: its sandbox would exist with no name anywhere.
        task = asyncio.ensure_future(self._started(environment))
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            cleanup = asyncio.ensure_future(self._stop_when_started(task))
            self._cleanups.add(cleanup)
            cleanup.add_done_callback(self._cleanups.discard)
            raise

    async def _started(self, environment: str) -> S:
        sandbox = await self._backend.start(environment)
        self._ledger.add(sandbox.sandbox_id, environment)  # no await between: no gap
        return sandbox

    async def _stop_when_started(self, task: asyncio.Future[S]) -> None:
        with contextlib.suppress(Exception):  # a start that failed left nothing
            await self.release(await task)
