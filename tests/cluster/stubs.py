"""Work functions for rollout hosts that need no Harbor (pickled by value into actors)."""

from __future__ import annotations

import asyncio
import builtins
import time
from pathlib import Path

from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.trials.result import RolloutResult
from harbor_ray.trials.spec import CaptureService, RolloutSpec


def ok_row(spec: RolloutSpec, started: float) -> RolloutRecord:
    """A successful rollout (no capture) whose row says when the work ran."""
    return encode_record(RolloutResult(
        rollout_id=spec.rollout_id, task=spec.task.name, attempt=spec.attempt,
        agent=spec.agent, sandbox=spec.sandbox, ok=True, reward=1.0,
        timings={"started_at": started, "ended_at": time.time()},
    ), None)


def barrier_work(directory: str, expected: int, timeout_s: float):
    """Each rollout checks in, then waits until `expected` have checked in (or gives up):
    all of them return only if all of them ran at the same time."""

    async def work(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        started = time.time()
        Path(directory, spec.rollout_id).touch()
        while len(list(Path(directory).iterdir())) < expected:
            if time.time() - started > timeout_s:
                break
            await asyncio.sleep(0.2)
        return ok_row(spec, started)

    return work


def deaf_work(block_task: str, seconds: float):
    """`block_task` blocks its host's event loop (a rollout no cancellation reaches);
    every other task waits a little and succeeds."""

    async def work(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        started = time.time()
        if spec.task.name == block_task:
            time.sleep(seconds)
        else:
            await asyncio.sleep(2)
        return ok_row(spec, started)

    return work


def raising_work(errors: dict[str, str]):
    """Each task named in `errors` raises that builtin exception (a bug in the work, or an
    agent library's own timeout); every other task succeeds."""

    async def work(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        started = time.time()
        name = errors.get(spec.task.name)
        if name is not None:
            raise getattr(builtins, name)(f"raised by {spec.task.name}")
        return ok_row(spec, started)

    return work
