"""The disconnect and ended-session guarantees where the cluster serves the proxy: the
Serve deployment's replicas (through Serve's route and through a host's relay to their
own sockets) and the hosts' own ingress (`--ingress host`). The app is shared; these
check that the shared paths hold there too (actor store, owners, the servers)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import ray

from harbor_ray.capture.core.budget import BUDGET_MESSAGE
from harbor_ray.capture.core.export import render_export
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.cluster.proxy_deployment import deploy_capture_proxy, remove_capture_proxy
from tests.fixtures.cluster_actors import start_probed_host
from tests.fixtures.fake_engine import free_port
from tests.fixtures.threaded import fake_engine_in_thread
from tests.waiting import eventually

pytestmark = pytest.mark.integration

APP = "capture_faults"
HELLO = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def engine(ray_cluster: None) -> Iterator[tuple[FakeEngine, str]]:
    with fake_engine_in_thread(FakeEngine()) as served:
        yield served


@pytest.fixture(scope="module")
def serve_url(engine: tuple[FakeEngine, str]) -> Iterator[str]:
    url = deploy_capture_proxy(
        engine[1],
        "fake-model",
        replicas=1,
        app_name=APP,
        route_prefix="/capture-faults",
        http_port=free_port(),
    )
    try:
        yield url
    finally:
        remove_capture_proxy(APP)


def host_for(proxy: ProxyTarget) -> Any:
    return start_probed_host(f"t{uuid.uuid4().hex[:8]}", proxy)


@pytest.fixture(scope="module")
def relay_host(serve_url: str) -> Iterator[Any]:
    handle = host_for(ProxyTarget("unused-serve-url", "fake-model", "direct", app=APP))
    yield handle
    ray.kill(handle)


@pytest.fixture(scope="module")
def serving_host(engine: tuple[FakeEngine, str]) -> Iterator[Any]:
    handle = host_for(ProxyTarget(engine[1], "fake-model", ingress="host"))
    yield handle
    ray.kill(handle)


@dataclass(frozen=True)
class Ingress:
    url: str
    owner: Any  # the actor that owns the sessions


@pytest.fixture(params=["serve", "direct", "host"])
def ingress(request: pytest.FixtureRequest, engine: tuple[FakeEngine, str]) -> Ingress:
    engine[0].delay_s = 0.0
    if request.param == "host":
        host = request.getfixturevalue("serving_host")
        return Ingress(ray.get(host.capture_url.remote()), host)
    host = request.getfixturevalue("relay_host")
    if request.param == "serve":
        return Ingress(request.getfixturevalue("serve_url"), host)
    return Ingress(ray.get(host.capture_url.remote()), host)


def _in_flight(owner: Any, session_id: str) -> int:
    """The calls of `session_id` its owner (a RolloutHost) has admitted and not ended."""
    return ray.get(
        owner.__ray_call__.remote(lambda host: len(host.store.state(session_id).in_flight)),
        timeout=10,
    )


async def ask(url: str, key: str) -> str:
    sdk = openai.AsyncOpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=30)
    reply = await sdk.chat.completions.create(model="m", messages=HELLO)
    return reply.choices[0].message.content


async def test_a_client_gone_before_its_reply_costs_no_turn_and_no_budget(
    ingress: Ingress, engine: tuple[FakeEngine, str]
) -> None:
    fake, _ = engine
    info = await ingress.owner.open_session.remote(budget=1, sampling=None)
    # The engine answers long after the client leaves: through Serve the leaving reaches
    # the replica only when Serve's proxy notices it, which under load took over 0.7 s,
    # and an answer handed to Serve's proxy first is (rightly) a delivered turn. The
    # client leaves once the engine has the call: a first call's grant is an actor call
    # away, and leaving before the engine was reached cancels nothing there.
    fake.delay_s, cancelled, calls = 10.0, fake.cancelled, len(fake.calls)
    async with httpx.AsyncClient(timeout=10) as client:
        posting = asyncio.ensure_future(
            client.post(
                f"{ingress.url}/v1/chat/completions",
                json={"model": "m", "messages": HELLO},
                headers={"authorization": f"Bearer {info.key}"},
            )
        )
        await eventually(lambda: len(fake.calls) > calls, 9, "the call reached the engine")
        posting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await posting
    await eventually(
        lambda: fake.cancelled != cancelled,  # the proxy gave up its call
        9,
        "the client left but the engine call ran on",
    )
    fake.delay_s = 0.0
    # The release that follows the cancel is an actor call away: wait for the owner to
    # hold no call of the session.
    await eventually(
        lambda: _in_flight(ingress.owner, info.session_id) == 0,
        9,
        "the cancelled call's slot was not given back",
    )
    # Its slot was given back: the session's one call is still there.
    assert await ask(ingress.url, info.key) == "echo: hi"
    assert await ask(ingress.url, info.key) == BUDGET_MESSAGE
    doc = render_export(await ingress.owner.close_session.remote(info.session_id))
    assert [t["response_message"]["content"] for t in doc["turns"]] == ["echo: hi"]


async def test_a_session_closed_while_its_call_runs_gets_401(
    ingress: Ingress, engine: tuple[FakeEngine, str]
) -> None:
    fake, _ = engine
    info = await ingress.owner.open_session.remote(budget=None, sampling=None)
    assert await ask(ingress.url, info.key) == "echo: hi"  # the grant is cached
    fake.delay_s = 0.5
    calls = len(fake.calls)
    calling = asyncio.ensure_future(ask(ingress.url, info.key))
    deadline = time.monotonic() + 10
    while len(fake.calls) == calls:
        assert time.monotonic() < deadline
        await asyncio.sleep(0.01)
    await ingress.owner.close_session.remote(info.session_id)
    with pytest.raises(openai.AuthenticationError, match="session has ended"):
        await calling
