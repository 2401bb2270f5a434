"""The policy version the controller keeps: weight updates of the engine's replicas,
one at a time and bounded in time, and the version they serve once all took one.

An update that goes on past its bound still counts when it ends: if every replica took
it, the version moves then (`_ended_late`). Each new version is handed to `on_version`
(the capture proxies' policy clock, which stamps turns with it)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from harbor_ray.engine.weights import WeightUpdate
from harbor_ray.errors import (
    CheckpointError,
    FieldError,
    WeightsRefusedError,
    WeightUpdateError,
    WeightVersionError,
)
from harbor_ray.online.weights import EngineWeights, replica_results
from harbor_ray.online.wire import PolicyReply, ReplicaResult, WeightsReply, WeightsRequest

__all__ = ["PolicyKeeper"]

_log = logging.getLogger(__name__)


class PolicyKeeper:
    """The version the engine serves, and the updates that move it."""

    def __init__(
        self,
        updater: EngineWeights,
        version: int,
        *,
        timeout_s: float,
        on_version: Callable[[int], Awaitable[None]] | None = None,
    ) -> None:
        self.version = version
        self._updater, self._timeout_s, self._on_version = updater, timeout_s, on_version
        self._replicas: dict[str, ReplicaResult] = {}
        self._updating = asyncio.Lock()
        self._paused = False
        self._publishing: set[asyncio.Future[None]] = set()  # a late update's version

    async def update(self, request: WeightsRequest) -> WeightsReply:
        """Update every engine replica to `request`'s checkpoint, one update at a time;
        the version moves only once all of them took it."""
        async with self._updating:
            if request.version <= self.version:
                raise FieldError(
                    f"version {request.version} does not exceed the current {self.version}",
                    status=409,
                    field="version",
                )
            try:
                update = await self._update_in_time(request)
            except CheckpointError as exc:
                raise FieldError(str(exc), status=400, field="path") from exc
            except WeightVersionError as exc:
                raise FieldError(str(exc), status=409, field="version") from exc
            except WeightsRefusedError as exc:
                raise WeightUpdateError(
                    f"{exc}; version {self.version} keeps serving", replicas=[]
                ) from exc
            results = self._record(update)
            if not update.ok:
                failed = (
                    ", ".join(f"{r.replica} ({r.step}: {r.error})" for r in results if not r.ok)
                    or "no replica answered"
                )
                raise WeightUpdateError(
                    f"the update failed on {failed}; version {self.version} keeps serving",
                    replicas=results,
                )
            if self._on_version is not None:
                await self._on_version(self.version)
            return WeightsReply(
                version=self.version,
                replicas=results,
                steps=dict(update.step_seconds),
                seconds=update.seconds,
            )

    async def _update_in_time(self, request: WeightsRequest) -> WeightUpdate:
        """The updater's answer, or a WeightUpdateError once `weights_timeout_s` passed,
        whether or not the updater stopped when told to (a call it awaits may not end on
        cancellation): the policy is paused no longer than that. An update that ends
        after its caller was answered is heard then (`_ended_late`)."""
        updating = asyncio.ensure_future(self._updater.update(request.path, request.version))
        self._paused = True
        try:
            await asyncio.wait({updating}, timeout=self._timeout_s)
        finally:  # the bound passed, or the caller left
            self._paused = False
            if not updating.done():
                updating.cancel()
                updating.add_done_callback(self._ended_late)
        if not updating.done():
            raise WeightUpdateError(
                f"the update did not finish in {self._timeout_s:g} s; "
                f"version {self.version} keeps serving",
                replicas=[],
            )
        return updating.result()

    def _record(self, update: WeightUpdate) -> list[ReplicaResult]:
        """Each replica's part in `update`, kept for `policy`; the version if it took."""
        results = replica_results(update)
        self._replicas = {r.replica: r for r in results}
        if update.ok:
            self.version = update.requested_version
        return results

    def _ended_late(self, updating: asyncio.Future[WeightUpdate]) -> None:
        """An update that went on past its timeout ended: if every replica took it after
        all, the controller says what the engine serves (and stamps turns with it)."""
        if updating.cancelled() or updating.exception() is not None:
            return
        update = updating.result()
        if not update.ok or update.requested_version <= self.version:
            return
        _log.warning(
            "the update to version %d took after its timeout: the engine serves it",
            update.requested_version,
        )
        self._record(update)
        if self._on_version is not None:
            publishing = asyncio.ensure_future(self._on_version(self.version))
            self._publishing.add(publishing)
            publishing.add_done_callback(self._publishing.discard)

    def reply(self) -> PolicyReply:
        return PolicyReply(
            version=self.version, paused=self._paused, replicas=list(self._replicas.values())
        )
