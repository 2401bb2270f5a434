"""The host's relay to the proxy replicas, without Ray: real servers stand in for
replicas (each answers /health with its instance id, as the capture app does), and the
registry is a list the test edits."""

from __future__ import annotations

import contextlib
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harbor_ray.cluster.balancer import Relay, Rotation
from harbor_ray.cluster.replica_registry import ReplicaEntry
from tests.fixtures.fake_engine import free_port
from tests.fixtures.threaded import serve_in_thread


def replica_app(name: str, instance: str | None = None) -> Starlette:
    """Says who it is; echoes what it is sent. `instance` overrides what /health says."""
    own = uuid.uuid4().hex

    async def health(request: Request) -> Response:
        return JSONResponse({"status": "ok", "instance": instance or own})

    async def who(request: Request) -> Response:
        return Response(name)

    async def echo(request: Request) -> Response:
        return Response(await request.body())

    app = Starlette(
        routes=[
            Route("/health", health),
            Route("/who", who),
            Route("/echo", echo, methods=["POST"]),
        ]
    )
    app.state.instance_id = own
    return app


@contextlib.contextmanager
def replica(name: str) -> Iterator[ReplicaEntry]:
    app = replica_app(name)
    with serve_in_thread(app) as url:
        yield ReplicaEntry(name, url, app.state.instance_id)


class Registry:
    """What the relay reads and what it reports dead."""

    def __init__(self, *entries: ReplicaEntry) -> None:
        self.entries = list(entries)
        self.removed: list[ReplicaEntry] = []
        self.fetches = 0

    async def fetch(self) -> list[ReplicaEntry]:
        self.fetches += 1
        return list(self.entries)

    async def remove(self, entry: ReplicaEntry) -> None:
        self.removed.append(entry)
        with contextlib.suppress(ValueError):
            self.entries.remove(entry)


@contextlib.asynccontextmanager
async def relay_for(registry: Registry, **kwargs: float) -> AsyncIterator[str]:
    relay = Relay(registry.fetch, registry.remove, **kwargs)
    url = await relay.start()
    try:
        yield url
    finally:
        await relay.close()


async def who_answers(url: str, calls: int) -> list[str]:
    """One fresh connection per call, as a balancer per connection needs."""
    names = []
    for _ in range(calls):
        async with httpx.AsyncClient(timeout=10) as client:
            names.append((await client.get(f"{url}/who")).text)
    return names


def test_rotation_goes_round_and_skips_what_is_down() -> None:
    a, b, c = (ReplicaEntry(n, f"http://127.0.0.1:{i}", n) for i, n in enumerate("abc", 1))
    rotation = Rotation()
    assert rotation.next() is None
    rotation.replace([a, b, c])
    assert [rotation.next() for _ in range(4)] == [a, b, c, a]
    rotation.down(b)
    rotation.down(b)
    assert [rotation.next() for _ in range(3)] == [c, a, c]
    rotation.down(a)
    rotation.down(c)
    assert rotation.next() is None


async def test_connections_alternate_between_live_replicas() -> None:
    with replica("one") as one, replica("two") as two:
        async with relay_for(Registry(one, two)) as url:
            assert Counter(await who_answers(url, 6)) == {"one": 3, "two": 3}


async def test_a_keep_alive_connection_stays_on_its_replica() -> None:
    with replica("one") as one, replica("two") as two:
        async with relay_for(Registry(one, two)) as url, httpx.AsyncClient() as client:
            names = {(await client.get(f"{url}/who")).text for _ in range(5)}
    assert len(names) == 1


async def test_stale_entries_are_skipped_and_reported() -> None:
    nobody = ReplicaEntry("gone", f"http://127.0.0.1:{free_port()}", "x")
    with replica("live") as live, serve_in_thread(replica_app("impostor")) as other_url:
        impostor = ReplicaEntry("reused-port", other_url, "not-the-one-registered")
        registry = Registry(nobody, impostor, live)
        async with relay_for(registry) as url:
            assert await who_answers(url, 4) == ["live"] * 4
    assert set(registry.removed) == {nobody, impostor}


async def test_a_replica_that_stopped_since_the_fetch_is_refused_reported_and_skipped() -> None:
    with replica("survivor") as survivor:
        with replica("doomed") as doomed:
            registry = Registry(doomed, survivor)
            relay = Relay(registry.fetch, registry.remove, refresh_s=3600)
            url = await relay.start()
            await relay.refresh()
            assert len(relay.rotation) == 2
        try:
            assert await who_answers(url, 4) == ["survivor"] * 4
        finally:
            await relay.close()
    assert registry.removed == [doomed]
    assert registry.fetches == 1


async def test_large_bodies_pass_both_ways_intact() -> None:
    body = bytes(range(256)) * 8192  # 2 MiB
    with replica("one") as one:
        async with relay_for(Registry(one)) as url, httpx.AsyncClient(timeout=30) as client:
            reply = await client.post(f"{url}/echo", content=body)
    assert reply.content == body


async def test_with_no_replica_the_connection_is_closed() -> None:
    registry = Registry(ReplicaEntry("gone", f"http://127.0.0.1:{free_port()}", "x"))
    async with relay_for(registry) as url, httpx.AsyncClient(timeout=10) as client:
        with pytest.raises(httpx.TransportError):
            await client.get(f"{url}/who")
