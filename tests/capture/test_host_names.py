"""The capture app answers only the Host names it is reached at (a guard against DNS
rebinding): any IP address, the loopback names and those its settings list; any other
name, or two Host headers, gets 421 in the agent's dialect before anything else runs.
Through the real server over loopback, and for a remote endpoint's name."""

from __future__ import annotations

import httpx
import pytest

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.local import serve_capture
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.cluster.ingress import capture_hosts
from harbor_ray.host_names import HostNames, is_loopback
from tests.capture.asgi_client import call

CHAT = {"model": "fake-model", "messages": [{"role": "user", "content": "hi"}]}
REFUSED = ("evil.example", "evil.example:8000", "localhost.evil.example", "127.0.0.1.nip.io")
ANSWERED = ("127.0.0.1:8000", "localhost", "[::1]:9", "10.1.2.3:80", "[fd00::1]")


def _app(allowed: tuple[str, ...] | None = None):
    engine = FakeEngine()
    settings = CaptureSettings(
        served_model="fake-model", **({} if allowed is None else {"allowed_hosts": allowed})
    )
    store = InMemorySessionStore()
    return build_capture_app(store, engine, settings, admin=store), store, engine


@pytest.mark.parametrize("host", REFUSED)
@pytest.mark.parametrize(
    ("path", "shape"), [("/v1/chat/completions", "error"), ("/v1/messages", "type")]
)
async def test_a_name_it_is_not_reached_at_gets_421_in_the_agent_s_dialect(
    host: str, path: str, shape: str
) -> None:
    app, store, engine = _app()
    key = (await store.open_session(budget=3)).key
    reply = await call(app, path, CHAT, key=key, headers={"host": host})
    assert reply.status == 421, reply.body
    assert shape in reply.json()  # OpenAI's {"error": ...}, Anthropic's {"type": "error"}
    assert engine.calls == []
    # Probes and the health route are behind the same check.
    for probe in ("/", "/health"):
        assert (await call(app, probe, b"", method="GET", headers={"host": host})).status == 421


async def test_two_host_headers_are_refused_one_or_none_answered() -> None:
    app, _, _ = _app()
    scope_headers = [(b"host", b"127.0.0.1"), (b"host", b"evil.example")]
    assert not HostNames(any_address=True).admits({"headers": scope_headers})
    assert HostNames(any_address=True).admits({"headers": []})  # HTTP/1.0: no Host
    assert not HostNames().admits({"headers": []})  # the viewer and the controller
    assert (await call(app, "/", b"", method="GET", headers={"host": "10.0.0.1"})).status == 200


async def test_addresses_loopback_and_listed_names_reach_the_engine() -> None:
    app, store, engine = _app(("sandbox-gateway.internal", "localhost", "127.0.0.1", "::1"))
    for host in (*ANSWERED, "sandbox-gateway.internal:4000", "SANDBOX-GATEWAY.internal."):
        key = (await store.open_session(budget=3)).key
        reply = await call(app, "/v1/chat/completions", CHAT, key=key, headers={"host": host})
        assert reply.status == 200, (host, reply.body)
    assert len(engine.calls) == len(ANSWERED) + 2


async def test_any_name_with_a_star() -> None:
    app, store, _ = _app(("*",))
    key = (await store.open_session(budget=3)).key
    reply = await call(app, "/v1/chat/completions", CHAT, key=key, headers={"host": "evil.example"})
    assert reply.status == 200


async def test_the_served_proxy_refuses_a_rebound_name() -> None:
    engine = FakeEngine()
    async with serve_capture(InMemorySessionStore(), engine, "fake-model") as capture:
        session = await capture.open_session(budget=3, sampling=None)
        async with httpx.AsyncClient(base_url=capture.host_url, timeout=10) as client:
            headers = {"authorization": f"Bearer {session.key}"}
            refused = await client.post(
                "/v1/chat/completions", json=CHAT, headers={**headers, "host": "evil.example"}
            )
            answered = await client.post("/v1/chat/completions", json=CHAT, headers=headers)
    assert (refused.status_code, answered.status_code) == (421, 200)
    assert len(engine.calls) == 1


def test_a_remote_endpoint_s_name_is_answered_by_the_replicas() -> None:
    assert "tunnel.example.org" in capture_hosts("http://tunnel.example.org:4000/v1")
    assert "localhost" in capture_hosts(None)
    assert capture_hosts("http://10.0.0.5:4000") == (*capture_hosts(None), "10.0.0.5")


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("localhost", True),
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("0.0.0.0", False),
        ("10.0.0.1", False),
        ("127.evil.example", False),
        ("", False),
    ],
)
def test_only_this_machine_s_own_addresses_are_loopback(host: str, loopback: bool) -> None:
    # What the proxy, the playground and the replica registry decide exposure by.
    assert is_loopback(host) is loopback
