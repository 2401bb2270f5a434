"""The seam between the controller and the engine's weights.

The controller owns the version bookkeeping (`version` must increase, the policy version
changes only when every replica serves the new weights, a failed update leaves the old
one); a `WeightUpdater` does the engine's part: pause generation keeping in-flight
requests, reload the checkpoint on every replica, reset or salt the prefix cache,
resume, each step under its own timeout, and say per replica what happened. The real
one acts on the Ray Serve LLM replicas; `FakeWeightUpdater` stands in for tests.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Protocol

from harbor_ray.online.wire import ReplicaResult

__all__ = ["FakeWeightUpdater", "WeightUpdater"]


class WeightUpdater(Protocol):
    async def update(self, path: str, version: int) -> Sequence[ReplicaResult]:
        """Load `path` as `version` on every replica; one result per replica. A replica
        that failed says which step, and serves its old version."""
        ...


class FakeWeightUpdater:
    """Replicas that "load" by sleeping `load_s`; `fail` names replicas that fail the
    load step (they keep their version). Records every call for tests."""

    def __init__(self, replicas: Sequence[str] = ("engine-0",), *, load_s: float = 0.0,
                 fail: Sequence[str] = ()) -> None:
        self.serving = dict.fromkeys(replicas, 0)
        self.load_s, self.fail = load_s, set(fail)
        self.calls: list[tuple[str, int]] = []

    async def update(self, path: str, version: int) -> list[ReplicaResult]:
        self.calls.append((path, version))
        await asyncio.sleep(self.load_s)
        failed = bool(self.fail & self.serving.keys())
        results = []
        for replica, old in self.serving.items():
            if failed:
                # All or none, as a real update must: the old version keeps serving.
                error = f"cannot load {path}" if replica in self.fail else None
                results.append(ReplicaResult(replica=replica, ok=replica not in self.fail,
                                             version=old, step="load" if error else None,
                                             error=error, seconds=self.load_s))
                continue
            self.serving[replica] = version
            results.append(ReplicaResult(replica=replica, ok=True, version=version,
                                         seconds=self.load_s))
        return results
