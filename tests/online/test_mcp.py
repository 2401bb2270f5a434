"""The controller's MCP tools through the official `mcp` client over streamable HTTP,
against the running app (controller actor, stub agent on rollout hosts, capture proxy
deployment, fake engine)."""

from __future__ import annotations

import asyncio

import httpx
import httpx2
import pytest
import ray
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from tests.fixtures.gate import Gate, held_after
from tests.online.conftest import KEY, stub_agent

pytestmark = pytest.mark.integration

CALLS = 100
TASK = "hello-file"


def mcp_client(url: str) -> Client:
    http = httpx2.AsyncClient(
        headers={"authorization": f"Bearer {KEY}"},
        timeout=httpx2.Timeout(30, read=300),
        # One connection per call in flight, with room to spare: the pool must not be
        # what holds calls back.
        limits=httpx2.Limits(max_connections=4 * CALLS, max_keepalive_connections=CALLS),
    )
    return Client(streamable_http_client(f"{url}/mcp", http_client=http))


def test_100_tool_calls_in_flight_at_once(service_factory) -> None:
    # Each rollout waits at the gate after its first call until all 100 are there: then
    # they, and the tool calls that started them, were all in flight at once.
    gate = Gate.remote()
    service = service_factory(
        "mcp",
        capacity=CALLS,
        concurrency=CALLS,
        rollouts_per_host=CALLS // 2,
        work=stub_agent(2, between=held_after(0, gate)),
    )
    in_flight = service.app.state.mcp_in_flight
    assert httpx.post(f"{service.url}/mcp", json={}).status_code == 401  # no key

    async def run() -> tuple[list, int]:
        async with mcp_client(service.url) as mcp:
            tools = {t.name for t in (await mcp.list_tools()).tools}
            assert {"run_rollout", "list_tasks"} <= tools
            listed = await mcp.call_tool("list_tasks", {})
            assert not listed.is_error and TASK in listed.structured_content["result"]
            unknown = await mcp.call_tool("run_rollout", {"task": "nope", "agent": "x"})
            assert unknown.is_error and "tasks[0].task" in unknown.content[0].text

            async def open_once_all_wait() -> int:
                arrived = await gate.arrived.remote(CALLS, 300)
                await gate.open.remote()  # all of them, or the count that came in time
                return arrived

            opener = asyncio.create_task(open_once_all_wait())
            results = await asyncio.gather(
                *(
                    mcp.call_tool("run_rollout", {"task": TASK, "agent": "terminus-2"})
                    for _ in range(CALLS)
                )
            )
            return results, await opener

    results, waiting_at_once = asyncio.run(run())
    assert waiting_at_once == CALLS  # the rollouts, too, all ran at once
    assert in_flight.peak == CALLS and in_flight.running == 0
    rows = [r.structured_content for r in results]
    assert all(not r.is_error for r in results), results[0]
    assert len({row["rollout_id"] for row in rows}) == CALLS
    assert all(row["ok"] and row["reward"] == 1.0 and row["turns"] == 2 for row in rows)
    # The tool's groups were the tool's: never in a trainer's long poll.
    stats = ray.get(service.handle.stats.remote())
    assert (stats.finished, stats.groups_ready) == (CALLS, 0)
    assert service.http.get("/v1/groups").json()["groups"] == []
