"""Work functions for rollout hosts that need no Harbor (pickled by value into actors)."""

from __future__ import annotations

import asyncio
import builtins
import time
from pathlib import Path

from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import RolloutResult
from harbor_ray.trials.spec import CaptureService, RolloutSpec


def ok_row(spec: RolloutSpec, started: float) -> RolloutRecord:
    """A successful rollout (no capture) whose row says when the work ran."""
    return encode_record(
        RolloutResult(
            rollout_id=spec.rollout_id,
            task=spec.task.name,
            attempt=spec.attempt,
            agent=spec.agent,
            sandbox=spec.sandbox,
            ok=True,
            reward=1.0,
            timings={"started_at": started, "ended_at": time.time()},
        ),
        None,
    )


def barrier_work(directory: str, expected: int, timeout_s: float, hold_s: float = 0.0):
    """Each rollout checks in, then waits until `expected` have checked in (or gives up),
    then holds for `hold_s`: the first `expected` return only if they ran at the same
    time. Rows say when each ran (`started_at`, `ended_at`)."""

    async def work(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        started = time.time()
        Path(directory, spec.rollout_id).touch()
        while len(list(Path(directory).iterdir())) < expected:
            if time.time() - started > timeout_s:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(hold_s)
        return ok_row(spec, started)

    return work


def peak_running(rows: list[dict]) -> int:
    """The most rollouts whose work ran at one moment, from their rows' own timestamps
    (an end and a start at the same instant do not overlap)."""
    events = sorted(
        (t[key], delta)
        for t in (dict(r["timings"]) for r in rows)
        for key, delta in (("started_at", 1), ("ended_at", -1))
    )
    running = peak = 0
    for _, delta in events:
        running += delta
        peak = max(peak, running)
    return peak


class SlowToStart:
    """`work` that a host can take only once `gate` exists: a host is given its work when
    it is created, and unpickling this waits for the gate, so the host does not start
    before it (a node too busy to start it, made deterministic)."""

    def __init__(self, gate: str, work) -> None:
        self.gate, self.work = gate, work

    def __reduce__(self):
        return _once_open, (self.gate, self.work)


def _once_open(gate: str, work):
    while not Path(gate).exists():
        time.sleep(0.1)
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


def sleeping_work(seconds: float):
    """Each rollout holds for `seconds`, then is one ok row."""

    async def work(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        started = time.time()
        await asyncio.sleep(seconds)
        return ok_row(spec, started)

    return work
