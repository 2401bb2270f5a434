"""The MCP tools over a stand-in controller (no Ray): the official client over
streamable HTTP against the real app, 100 tool calls held at once, refusals as tool
errors, the key required."""

from __future__ import annotations

import asyncio
import contextlib

import httpx

from harbor_ray.errors import FieldError, OverCapacity
from harbor_ray.online.app import build_controller_app
from harbor_ray.online.wire import Group, SubmitRequest
from tests.fixtures.threaded import serve_in_thread
from tests.online.conftest import KEY
from tests.online.test_mcp import CALLS, mcp_client


class HeldController:
    """`run_one` holds each call until `CALLS` are waiting at once (or a timeout)."""

    def __init__(self) -> None:
        self.waiting = 0
        self.all_in = asyncio.Event()

    async def run_one(self, request: SubmitRequest) -> Group:
        task = request.tasks[0].task
        if task == "nope":
            raise FieldError("no task 'nope' in the dataset", status=404, field="tasks[0].task")
        if task == "full":
            raise OverCapacity("100 rollouts unfinished", retry_after_s=5)
        self.waiting += 1
        if self.waiting == CALLS:
            self.all_in.set()
        # Fewer at once than CALLS: the wait times out, and the peak says how many.
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.all_in.wait(), 20)
        row = {
            "rollout_id": f"{request.request_id}__0",
            "task": task,
            "ok": True,
            "reward": 1.0,
            "error_type": None,
            "error": None,
            "policy_version_min": 0,
            "policy_version_max": 0,
        }
        return Group(
            group_id=request.request_id,
            request_id=request.request_id,
            task=task,
            n=1,
            metadata={},
            policy_version_min=0,
            policy_version_max=0,
            finished_version=0,
            staleness=0,
            rollouts=[row],
            sequences=[],
            turns=[{"index": 0}, {"index": 1}],
        )

    async def tasks(self, dataset: str | None) -> list[str]:
        return ["fix-bug", "hello-file"]


def test_tool_calls_are_not_capped_and_refusals_are_tool_errors() -> None:
    app = build_controller_app(HeldController(), KEY)  # type: ignore[arg-type]
    with serve_in_thread(app) as url:
        assert httpx.post(f"{url}/mcp", json={}).status_code == 401

        async def run():
            async with mcp_client(url) as mcp:
                listed = await mcp.call_tool("list_tasks", {})
                unknown = await mcp.call_tool("run_rollout", {"task": "nope", "agent": "a"})
                full = await mcp.call_tool("run_rollout", {"task": "full", "agent": "a"})
                bad = await mcp.call_tool("run_rollout", {"task": "t", "agent": "a", "budget": -1})
                held = await asyncio.gather(
                    *(
                        mcp.call_tool("run_rollout", {"task": "hello-file", "agent": "a"})
                        for _ in range(CALLS)
                    )
                )
                return listed, unknown, full, bad, held

        listed, unknown, full, bad, held = asyncio.run(run())
    in_flight = app.state.mcp_in_flight
    assert in_flight.peak == CALLS and in_flight.running == 0
    assert listed.structured_content == {"result": ["fix-bug", "hello-file"]}
    assert unknown.is_error and "tasks[0].task" in unknown.content[0].text
    assert full.is_error and "unfinished" in full.content[0].text
    assert bad.is_error and "budget" in bad.content[0].text
    rows = [r.structured_content for r in held]
    assert all(not r.is_error for r in held)
    assert len({row["rollout_id"] for row in rows}) == CALLS
    assert rows[0]["turns"] == 2 and rows[0]["ok"] is True and rows[0]["reward"] == 1.0
