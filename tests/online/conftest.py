"""The controller actor on the session's Ray, the stub agent on its hosts, the capture
proxy deployment in front of the fake engine, and the HTTP app served over loopback."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import ray

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.cluster.host import ProxyTarget, Work
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.owner import NAMESPACE
from harbor_ray.cluster.policy_version import policy_actor_name
from harbor_ray.online.app import ActorController, build_controller_app
from harbor_ray.online.controller import ControllerConfig
from harbor_ray.online.controller_actor import start_controller
from harbor_ray.online.weights import EngineWeights, FakeWeightUpdater
from tests.fixtures.stub_agent import chat_agent
from tests.fixtures.threaded import fake_engine_in_thread, serve_in_thread

KEY = "test-controller-key"
STUB = object()  # the stub agent


@pytest.fixture(scope="module")
def fake_engine(ray_cluster: None) -> Iterator[tuple[FakeEngine, str]]:
    with fake_engine_in_thread(FakeEngine()) as (engine, llm_url):
        yield engine, llm_url


@pytest.fixture(scope="module")
def proxy(fake_engine: tuple[FakeEngine, str]) -> Iterator[ProxyTarget]:
    engine, llm_url = fake_engine
    target = start_capture_proxy(llm_url, engine.model, ingress="direct", replicas=1)
    try:
        yield target
    finally:
        stop_capture_proxy(target)


class Service:
    """A running controller: its actor, and an HTTP client with the key."""

    def __init__(self, handle, url: str, app) -> None:
        self.handle, self.url, self.app = handle, url, app
        self.http = httpx.Client(
            base_url=url, headers={"authorization": f"Bearer {KEY}"}, timeout=120
        )

    def wait_groups(self, count: int, timeout_s: float = 120) -> list[dict]:
        groups: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while len(groups) < count:
            assert time.monotonic() < deadline, f"{len(groups)} groups of {count}"
            groups = self.http.get("/v1/groups", params={"wait_s": 5, "max": 100}).json()["groups"]
        return groups


@contextlib.contextmanager
def running_service(
    name: str, config: ControllerConfig, updater: EngineWeights, work: Work | None
) -> Iterator[Service]:
    """A controller named `name` behind its HTTP app; removed on exit, with its proxy's
    policy version actor."""
    handle = start_controller(name, config, updater, work=work)
    try:
        ray.get(handle.policy.remote())
        app = build_controller_app(ActorController(handle), KEY)
        with serve_in_thread(app) as url:
            yield Service(handle, url, app)
    finally:
        ray.get(handle.shutdown.remote())
        ray.kill(handle)
        assert config.proxy is not None
        ray.kill(ray.get_actor(policy_actor_name(config.proxy.app), namespace=NAMESPACE))


def stub_agent(calls: int, **options: Any) -> Work:
    """The stub agent as tests that expect no failure run it: without retries, so that a
    call refused or lost on the way fails its row instead of being retried unseen."""
    return chat_agent(calls, retries=0, **options)


def assert_updated_mid_group(group: dict[str, Any]) -> None:
    """Each rollout's first call was answered at version 0 and its second at 1 (the
    update landed between them); the group spans both, finished at 1: staleness 1."""
    by_rollout: dict[str, list[dict[str, Any]]] = {}
    for turn in sorted(group["turns"], key=lambda t: t["index"]):
        by_rollout.setdefault(turn["rollout_id"], []).append(turn)
    assert len(by_rollout) == group["n"]
    for turns in by_rollout.values():
        assert [(t["policy_version_start"], t["policy_version_end"]) for t in turns] == [
            (0, 0),
            (1, 1),
        ]
    assert (group["policy_version_min"], group["policy_version_max"]) == (0, 1)
    assert (group["finished_version"], group["staleness"]) == (1, 1)
    assert [(r["policy_version_min"], r["policy_version_max"]) for r in group["rollouts"]] == [
        (0, 1)
    ] * group["n"]


@pytest.fixture
def service_factory(proxy: ProxyTarget, tmp_path: Path):
    with contextlib.ExitStack() as started:

        def make(name: str, *, work=STUB, updater=None, **config) -> Service:
            """`work=None` runs real Harbor trials on the hosts."""
            config = {"proxy": proxy, **config}
            return started.enter_context(
                running_service(
                    name,
                    ControllerConfig(work_dir=tmp_path / name, **config),
                    updater or FakeWeightUpdater(("engine-0", "engine-1")),
                    stub_agent(2) if work is STUB else work,
                )
            )

        yield make
