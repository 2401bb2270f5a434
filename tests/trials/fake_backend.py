"""A sandbox backend stand-in for the warm pool (the `SandboxBackend` seam): each
sandbox is a file under `live/` while it runs; every start and stop is a line of
`log` with its wall-clock time. Its state is on disk, so processes share it (a host
killed mid-burst, the reaper that stops what it left)."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
from dataclasses import dataclass
from pathlib import Path

_ids = itertools.count()


@dataclass(frozen=True)
class FakeSandbox:
    sandbox_id: str
    environment: str


@dataclass(frozen=True)
class FakeBackend:
    root: Path
    start_s: float = 0.01  # what creating one takes

    async def start(self, environment: str) -> FakeSandbox:
        await asyncio.sleep(self.start_s)
        sandbox = FakeSandbox(f"{os.getpid()}-{next(_ids)}", environment)
        (self.root / "live").mkdir(parents=True, exist_ok=True)
        (self.root / "live" / sandbox.sandbox_id).touch()
        self._log("start", sandbox.sandbox_id)
        return sandbox

    async def stop(self, sandbox: FakeSandbox) -> None:
        await self.stop_id(sandbox.sandbox_id)

    async def stop_id(self, sandbox_id: str) -> None:
        (self.root / "live" / sandbox_id).unlink()  # a second stop fails: none is doubled
        self._log("stop", sandbox_id)

    def _log(self, what: str, sandbox_id: str) -> None:
        with open(self.root / "log", "a") as log:
            log.write(f"{what} {sandbox_id} {time.time()}\n")

    def events(self, what: str) -> list[float]:
        lines = (self.root / "log").read_text().splitlines() if (self.root / "log").exists() else []
        return [float(t) for w, _, t in (line.split() for line in lines) if w == what]

    def live(self) -> list[str]:
        live = self.root / "live"
        return sorted(p.name for p in live.iterdir()) if live.is_dir() else []


class PoolHost:
    """A rollout host's warm pool alone, as a Ray actor: it draws its starts' tokens
    from the run's bucket actor (`reserve`) and takes `burst` sandboxes at once."""

    def __init__(self, backend: FakeBackend, sizes: dict[str, int], ledger: Path, bucket) -> None:
        from harbor_ray.trials.warm_pool import Ledger, WarmPool

        self.pool = WarmPool(backend, sizes, Ledger(ledger), bucket.reserve.remote)

    def pid(self) -> int:
        return os.getpid()

    async def burst(self, environment: str, count: int) -> int:
        self.pool.open()
        taken = await asyncio.gather(*(self.pool.take(environment) for _ in range(count)))
        return len(taken)
