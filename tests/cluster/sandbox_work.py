"""Rollout work that holds a real bwrap sandbox and nothing else (pickled by value into
hosts): what a rollout's teardown must end, without a Harbor trial's cost."""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import time
from pathlib import Path

from harbor.models.task.config import EnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ErrorType, RolloutResult
from harbor_ray.trials.sandbox.bwrap import BwrapEnvironment
from harbor_ray.trials.spec import CaptureService, RolloutSpec

PROBE = "probe"  # the task name of a rollout that reports on its host (`work`)


def sandbox_work(command: str):
    """Each rollout starts a sandbox (under its spec's `sandboxes_dir`), with a log file
    of its own as a Harbor trial has, runs `command` in it (task names ending in `-exec`;
    the others just wait), and tears it down when cancelled. Task `PROBE` instead reports
    its host: the process (timings' `host_pid`), and as its error the files it opens that
    did not stay open (`closed_under_us`)."""

    async def work(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        started = time.time()
        if spec.task.name == PROBE:
            closed = closed_under_us()
            return _row(
                spec,
                started,
                None if not closed else f"closed under us: {closed}",
                host_pid=os.getpid(),
            )
        trial = Path(spec.trials_dir, spec.rollout_id)
        trial.mkdir(parents=True, exist_ok=True)
        logger = logging.getLogger(f"sandbox_work.{spec.rollout_id}")
        handler = logging.FileHandler(trial / "trial.log")
        logger.addHandler(handler)
        environment = BwrapEnvironment(
            environment_dir=trial / "environment",
            environment_name=spec.task.name,
            session_id=spec.rollout_id,
            trial_paths=TrialPaths(trial),
            task_env_config=EnvironmentConfig(),
            logger=logger,
            **spec.sandbox_kwargs,
        )
        try:
            await environment.start(force_build=False)
            logger.warning("started")
            if spec.task.name.endswith("-exec"):
                await environment.exec(command)
            else:
                await asyncio.sleep(3600)
        finally:
            await environment.stop(delete=True)  # as Harbor's trial does, shielded
            logger.warning("stopped")
            logger.removeHandler(handler)
            handler.close()
        return _row(spec, started, None)

    return work


def closed_under_us(count: int = 64) -> list[int]:
    """Files opened now that a stray close() of a number this process once gave away
    closes (such a close may wait for the collector): the ones found closed."""
    canaries = [os.open(os.devnull, os.O_RDONLY) for _ in range(count)]
    gc.collect()
    closed = []
    for fd in canaries:
        try:
            os.fstat(fd)
            os.close(fd)
        except OSError:
            closed.append(fd)
    return closed


def _row(spec: RolloutSpec, started: float, error: str | None, **more: float) -> RolloutRecord:
    return encode_record(
        RolloutResult(
            rollout_id=spec.rollout_id,
            task=spec.task.name,
            attempt=spec.attempt,
            agent=spec.agent,
            sandbox=spec.sandbox,
            ok=error is None,
            reward=None,
            error=error,
            error_type=None if error is None else ErrorType.INTERNAL,
            timings={"started_at": started, "ended_at": time.time(), **more},
        ),
        None,
    )
