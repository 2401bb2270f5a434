"""The prefix cache's salt: one per load of weights, never one per version number.

A version number names weights only within one trainer's count: the online service
starts again at 0 on an engine that lived on, and a test or a rollback loads other
weights under a number the engine has served before. vLLM keeps a prefix's KV under its
salt, so a salt made from the number alone lets new requests reuse blocks that other
weights computed (it did, in CI: a turn re-scored 0.49 nats off the weights it was
sampled with)."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import Any

from harbor_ray.engine.versions import VersionedServer


class _Client:
    def __init__(self) -> None:
        self.labels: list[str] = []

    async def update_weight_version(self, version: str) -> None:
        self.labels.append(version)


def _server() -> tuple[VersionedServer, _Client]:
    client = _Client()
    server: Any = VersionedServer.__new__(VersionedServer)
    server.engine = SimpleNamespace(_engine_client=client)
    return server, client


def _salt(server: VersionedServer, salt: str | None = None) -> str:
    request = SimpleNamespace(cache_salt=salt)
    server._salt(request)
    return str(request.cache_salt)


def test_the_same_version_number_loaded_twice_gets_two_salts() -> None:
    server, client = _server()
    asyncio.run(server.set_weight_version("1"))
    one = _salt(server)
    asyncio.run(server.set_weight_version("2"))
    two = _salt(server)
    asyncio.run(server.set_weight_version("1"))  # other weights, a number seen before
    again = _salt(server)
    assert client.labels == ["1", "2", "1"]  # vLLM's label stays the caller's number
    assert len({one, two, again}) == 3
    assert one.startswith("weights-1-") and again.startswith("weights-1-")


def test_requests_between_two_loads_share_one_salt() -> None:
    server, _ = _server()
    asyncio.run(server.set_weight_version("3"))
    assert _salt(server) == _salt(server)


def test_a_caller_s_own_salt_is_kept() -> None:
    server, _ = _server()
    assert _salt(server, "mine") == "mine"


def test_two_replicas_never_share_a_salt() -> None:
    # Each replica has its own cache; distinct salts cost nothing and keep a salt
    # meaningful if a cache is ever shared (an offloaded KV store).
    (a, _), (b, _) = _server(), _server()
    asyncio.run(a.set_weight_version("1"))
    asyncio.run(b.set_weight_version("1"))
    assert _salt(a) != _salt(b)
