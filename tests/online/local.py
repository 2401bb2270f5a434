"""The controller in this process, without Ray: its rollouts are `LocalRollouts` (rows
made here after a hold) instead of rollout hosts, and its app is served over loopback.
For the hostile-input, fuzz and retention tests, which need the controller's own rules
and routes but no cluster."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from harbor_ray.online.app import build_controller_app
from harbor_ray.online.controller import Controller, ControllerConfig, LocalRollouts
from harbor_ray.online.weights import EngineWeights, FakeWeightUpdater
from tests.fixtures.threaded import serve_in_thread
from tests.online.conftest import KEY


def local_controller(work_dir: Path, *, runner: LocalRollouts | None = None,
                     updater: EngineWeights | None = None, **config: Any) -> Controller:
    return Controller(ControllerConfig(work_dir=work_dir, **config),
                      updater or FakeWeightUpdater(("engine-0",)),
                      runner=runner or LocalRollouts())


@contextlib.contextmanager
def served(controller: Any, **app: Any) -> Iterator[httpx.Client]:
    """`controller`'s app over loopback: a client holding the key."""
    with serve_in_thread(build_controller_app(controller, KEY, **app)) as url, httpx.Client(
            base_url=url, headers={"authorization": f"Bearer {KEY}"}, timeout=60) as http:
        yield http
