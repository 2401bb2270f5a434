"""The seam between the controller and the engine's weights.

The controller owns the policy version the service reports (it changes only when every
replica serves the new weights); an `EngineWeights` does the engine's part and answers
with a `harbor_ray.engine.weights.WeightUpdate` (what each replica did, step by step).
The real one is `harbor_ray.engine.weights.WeightUpdater` on the Ray Serve LLM replicas
(`harbor_ray.engine.replicas.serve_weight_updater`); `FakeWeightUpdater` stands in for
tests. What is refused before any replica is touched raises `WeightsRefusedError`.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Sequence
from typing import Protocol

from harbor_ray.engine.weights import ReplicaUpdate, WeightUpdate
from harbor_ray.errors import WeightVersionError
from harbor_ray.online.wire import ReplicaResult

__all__ = ["EngineWeights", "FakeWeightUpdater", "replica_results"]


class EngineWeights(Protocol):
    async def update(self, path: str, version: int) -> WeightUpdate:
        """Load `path` as `version` on every replica, or on none (the old one serves)."""
        ...


# Terminal colour and cursor codes: Ray colours the errors it re-raises from actors.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def replica_results(update: WeightUpdate) -> list[ReplicaResult]:
    """Each replica's part in `update`, as the API reports it: errors as plain text."""
    return [
        ReplicaResult(
            replica=r.replica,
            ok=r.ok,
            version=r.serving_version,
            step=r.failed_step,
            steps=dict(r.seconds),
            error=None if r.error is None else _ESCAPES.sub("", r.error),
            seconds=sum(r.seconds.values()),
        )
        for r in update.replicas
    ]


class FakeWeightUpdater:
    """Replicas that "reload" by sleeping `load_s`; `fail` names replicas that fail the
    reload step (then no replica changes, as with the real updater). Records every call."""

    def __init__(
        self,
        replicas: Sequence[str] = ("engine-0",),
        *,
        load_s: float = 0.0,
        fail: Sequence[str] = (),
    ) -> None:
        self.replicas = tuple(replicas)
        self.version = 0
        self.load_s, self.fail = load_s, set(fail)
        self.calls: list[tuple[str, int]] = []

    async def update(self, path: str, version: int) -> WeightUpdate:
        if version <= self.version:
            raise WeightVersionError(f"version {version} does not increase on {self.version}")
        self.calls.append((path, version))
        started = time.perf_counter()
        await asyncio.sleep(self.load_s)
        took = not (self.fail & set(self.replicas))
        if took:
            self.version = version
        results = tuple(
            ReplicaUpdate(
                replica=name,
                serving_version=self.version,
                seconds={"reload": self.load_s},
                failed_step=None if name not in self.fail else "reload",
                error=f"cannot load {path}" if name in self.fail else None,
            )
            for name in self.replicas
        )
        return WeightUpdate(
            path=path,
            requested_version=version,
            version=self.version,
            replicas=results,
            step_seconds={"reload": self.load_s},
            seconds=time.perf_counter() - started,
        )
