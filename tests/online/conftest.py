"""The controller actor on the session's Ray, the stub agent on its hosts, the capture
proxy deployment in front of the fake engine, and the HTTP app served over loopback."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import ray

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.owner import NAMESPACE
from harbor_ray.cluster.policy import policy_actor_name
from harbor_ray.cluster.stub_agent import chat_agent
from harbor_ray.online.app import ActorController, build_controller_app
from harbor_ray.online.controller import ControllerConfig, start_controller
from harbor_ray.online.weights import FakeWeightUpdater
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
        self.http = httpx.Client(base_url=url, headers={"authorization": f"Bearer {KEY}"},
                                 timeout=120)

    def wait_groups(self, count: int, timeout_s: float = 120) -> list[dict]:
        groups: list[dict] = []
        deadline = time.monotonic() + timeout_s
        while len(groups) < count:
            assert time.monotonic() < deadline, f"{len(groups)} groups of {count}"
            groups = self.http.get("/v1/groups", params={"wait_s": 5, "max": 100}
                                   ).json()["groups"]
        return groups


@pytest.fixture
def service_factory(proxy: ProxyTarget, tmp_path: Path):
    started = []

    def make(name: str, *, work=STUB, updater=None, **config) -> Service:
        """`work=None` runs real Harbor trials on the hosts."""
        config = {"proxy": proxy, **config}
        handle = start_controller(
            name, ControllerConfig(work_dir=tmp_path / name, **config),
            updater or FakeWeightUpdater(("engine-0", "engine-1")),
            work=chat_agent(2) if work is STUB else work)
        ray.get(handle.policy.remote())
        started.append((handle, config["proxy"].app))
        app = build_controller_app(ActorController(handle), KEY)
        context = serve_in_thread(app)
        service = Service(handle, context.__enter__(), app)
        started.append(context)
        return service

    yield make
    for thing in reversed(started):
        if hasattr(thing, "__exit__"):
            thing.__exit__(None, None, None)
        else:
            handle, app = thing
            ray.get(handle.shutdown.remote())
            ray.kill(handle)
            ray.kill(ray.get_actor(policy_actor_name(app), namespace=NAMESPACE))
