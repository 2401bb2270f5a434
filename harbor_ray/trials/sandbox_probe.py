"""`harbor-ray info --probe BACKEND`: start one real sandbox, run a command in it, stop it.

The checks of `backends` say whether a backend should start; only starting one says
that it does (an account without quota, a daemon that refuses the image, a kernel
without user namespaces). The probe makes the environment object the way a trial does
(Harbor's factory, the same constructor kwargs), starts it, runs `echo` inside, and
stops it with deletion, whatever happened before.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor.environments.factory import EnvironmentFactory
from harbor.models.task.config import EnvironmentConfig as TaskEnvironmentConfig
from harbor.models.trial.paths import TrialPaths

from harbor_ray.trials.backends import LOCAL, check_backend, environment_config

DEFAULT_PROBE_IMAGE = "ubuntu:24.04"
_MARKER = "harbor-ray-probe-ok"


@dataclass(frozen=True)
class ProbeResult:
    """What the probe found. `start_s` and `stop_s` are set for the steps that ran."""

    name: str
    ok: bool
    reason: str
    start_s: float | None = None
    stop_s: float | None = None


async def probe_backend(
    name: str,
    kwargs: Mapping[str, Any] | None = None,
    *,
    image: str = DEFAULT_PROBE_IMAGE,
    timeout_s: float = 600.0,
    clock: Callable[[], float] = time.monotonic,
) -> ProbeResult:
    """Start and stop one sandbox of backend `name`; never raises but for cancellation.

    `image` is the container image asked of backends that run one (`local` runs the
    host's /usr and takes none); `timeout_s` bounds the start and the command.
    """
    status = check_backend(name, kwargs)
    if not status.usable:
        return ProbeResult(name, False, f"not usable: {status.reason}")
    with tempfile.TemporaryDirectory(prefix="harbor-ray-probe-") as directory:
        root = Path(directory)
        (root / "environment").mkdir()
        try:
            environment = EnvironmentFactory.create_environment_from_config(
                config=environment_config(name, kwargs),
                environment_dir=root / "environment",
                environment_name="harbor-ray-probe",
                session_id=f"harbor-ray-probe-{uuid.uuid4().hex[:8]}",
                trial_paths=TrialPaths(trial_dir=root / "trial"),
                task_env_config=TaskEnvironmentConfig(
                    docker_image=None if name == LOCAL else image
                ),
            )
        except Exception as exc:
            return ProbeResult(name, False, f"could not be constructed: {_said(exc)}")
        started = clock()
        try:
            problem = await _start_and_run(environment, timeout_s)
            start_s = clock() - started
        finally:
            stopping = clock()
            stop_problem = await _stop(environment)
        stop_s = clock() - stopping
    if problem is not None:
        return ProbeResult(name, False, problem, start_s, stop_s)
    if stop_problem is not None:
        return ProbeResult(name, False, stop_problem, start_s, stop_s)
    return ProbeResult(name, True, "started, ran a command, stopped", start_s, stop_s)


async def _start_and_run(environment: Any, timeout_s: float) -> str | None:
    try:
        async with asyncio.timeout(timeout_s):
            await environment.start(force_build=False)
            result = await environment.exec(f"echo {_MARKER}")
    except TimeoutError:
        return f"did not start and answer within {timeout_s:g} s"
    except Exception as exc:
        return f"did not start: {_said(exc)}"
    if result.return_code != 0 or _MARKER not in (result.stdout or ""):
        return (
            f"started, but `echo` inside exited {result.return_code}: "
            f"{(result.stderr or result.stdout or '').strip()[:300]}"
        )
    return None


async def _stop(environment: Any) -> str | None:
    # Shielded: a probe interrupted by Ctrl-C still deletes what it started.
    try:
        await asyncio.shield(environment.stop(delete=True))
    except Exception as exc:
        return f"did not stop: {_said(exc)}"
    return None


def _said(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())[:300]
