"""The controller in this process, without Ray: its rollouts are `LocalRollouts` (rows
made here after a hold) instead of rollout hosts, and its app is served over loopback.
For the hostile-input, fuzz and retention tests, which need the controller's own rules
and routes but no cluster."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from harbor_ray.cluster.runner import failed_record
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.result import ErrorType
from harbor_ray.online.app import build_controller_app
from harbor_ray.online.controller import Controller, ControllerConfig
from harbor_ray.online.weights import EngineWeights, FakeWeightUpdater
from harbor_ray.trials.spec import RolloutSpec
from tests.fixtures.threaded import serve_in_thread
from tests.online.conftest import KEY


class LocalRollouts:
    """`Rollouts` that never leave this process: each ends as an `agent_error` row after
    `hold_s`, nothing run. For tests of the controller's own rules and the memory
    benchmark; `started` counts the rollouts that began."""

    def __init__(self, hold_s: float = 0.0) -> None:
        self.hold_s = hold_s
        self.started = 0

    async def run(self, spec: RolloutSpec) -> RolloutRecord:
        self.started += 1
        await asyncio.sleep(self.hold_s)
        return failed_record(spec, ErrorType.AGENT_ERROR, "a local stand-in ran", self.hold_s)


def local_controller(
    work_dir: Path,
    *,
    runner: LocalRollouts | None = None,
    updater: EngineWeights | None = None,
    **config: Any,
) -> Controller:
    return Controller(
        ControllerConfig(work_dir=work_dir, **config),
        updater or FakeWeightUpdater(("engine-0",)),
        runner=runner or LocalRollouts(),
    )


@contextlib.contextmanager
def served(controller: Any, **app: Any) -> Iterator[httpx.Client]:
    """`controller`'s app over loopback: a client holding the key."""
    with (
        serve_in_thread(build_controller_app(controller, KEY, **app)) as url,
        httpx.Client(base_url=url, headers={"authorization": f"Bearer {KEY}"}, timeout=60) as http,
    ):
        yield http
