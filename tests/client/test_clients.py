"""Both clients over a scripted httpx transport: they send what the exchange says, map
transport failures (never sent, or answer lost) and sleep between tries; the async
client behaves as the blocking one."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import orjson
import pytest

from harbor_ray.client import AsyncClient, Client, ClientError, Retry

SUBMITTED = {"groups": [{"group_id": "g", "task": "t", "n": 2}], "policy_version": 0}
FAST = Retry(attempts=3, backoff_s=0.0)


def scripted(script: list[Callable[[httpx.Request], httpx.Response]], seen: list):
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return script.pop(0)(request)

    return handle


def refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("refused", request=request)


def reset(request: httpx.Request) -> httpx.Response:
    raise httpx.ReadError("reset", request=request)


def full(request: httpx.Request) -> httpx.Response:
    return httpx.Response(429, json={"error": "full"}, headers={"retry-after": "0"})


def accepted(request: httpx.Request) -> httpx.Response:
    return httpx.Response(202, json=SUBMITTED)


def test_both_clients_retry_a_refused_connection_and_a_429_with_one_request_id() -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(scripted([refused, full, accepted], seen))
    with Client("http://c/", "k", retry=FAST, http=httpx.Client(transport=transport)) as c:
        assert c.submit({"t": 2}, "a").groups[0].group_id == "g"
    assert [str(r.url) for r in seen] == ["http://c/v1/rollouts"] * 3
    assert {r.headers["authorization"] for r in seen} == {"Bearer k"}
    assert len({orjson.loads(r.content)["request_id"] for r in seen}) == 1

    async_seen: list[httpx.Request] = []

    async def run() -> str:
        transport = httpx.MockTransport(scripted([refused, full, accepted], async_seen))
        async with AsyncClient(
            "http://c", "k", retry=FAST, http=httpx.AsyncClient(transport=transport)
        ) as c:
            return (await c.submit({"t": 2}, "a")).groups[0].group_id

    assert asyncio.run(run()) == "g" and len(async_seen) == 3


def test_a_weight_update_whose_answer_was_lost_is_not_resent() -> None:
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(scripted([reset], seen))
    client = Client("http://c", "k", retry=FAST, http=httpx.Client(transport=transport))
    with client, pytest.raises(ClientError) as caught:
        client.update_weights("/ckpt", 1)
    assert len(seen) == 1 and caught.value.status is None
    assert "ReadError" in str(caught.value)


def test_groups_acknowledges_the_batch_taken_before_polling_again() -> None:
    group = {
        "group_id": "a",
        "request_id": "r",
        "task": "t",
        "n": 1,
        "metadata": {},
        "policy_version_min": 0,
        "policy_version_max": 0,
        "finished_version": 0,
        "staleness": 0,
        "rollouts": [],
        "sequences": [],
        "turns": [],
    }
    seen: list[httpx.Request] = []
    transport = httpx.MockTransport(
        scripted(
            [
                lambda r: httpx.Response(200, json={"groups": [group]}),
                lambda r: httpx.Response(200, json={"acknowledged": ["a"], "unknown": []}),
            ],
            seen,
        )
    )
    with Client("http://c", "k", http=httpx.Client(transport=transport)) as c:
        batches = c.groups(total=1)
        assert [g.group_id for g in next(batches)] == ["a"]
        assert len(seen) == 1  # holding the batch: nothing acknowledged yet
        assert next(batches, None) is None
    assert seen[1].url.path == "/v1/groups/ack"
    assert orjson.loads(seen[1].content) == {"group_ids": ["a"]}
