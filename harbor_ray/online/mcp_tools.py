"""The controller's MCP tools, `run_rollout` and `list_tasks` (the official `mcp` SDK,
streamable HTTP), which the controller's app serves at `/mcp` behind its key.

Both tools are coroutines on purpose: the SDK runs a plain function in anyio's worker
threads, whose default limiter admits 40 at a time per process, so a sync tool would
cap concurrent rollouts at 40 without saying so. An async tool only awaits the
controller, so calls in flight are bounded by the controller's capacity, not here.
The transport is stateless (every request stands alone, JSON replies): any HTTP replica
of the controller's app can serve any call, as with the other routes.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import TransportSecuritySettings
from pydantic import BaseModel, ValidationError
from starlette.types import ASGIApp

from harbor_ray.errors import OnlineError
from harbor_ray.online.controller_calls import ControllerCalls
from harbor_ray.online.wire import SubmitRequest

__all__ = ["MCP_PATH", "InFlight", "McpTools", "RolloutSummary", "build_mcp", "first_error"]

MCP_PATH = "/mcp"


class RolloutSummary(BaseModel):
    """What `run_rollout` answers: the rollout's row, in short."""

    rollout_id: str
    task: str
    ok: bool
    reward: float | None
    error_type: str | None
    error: str | None
    turns: int  # model calls recorded
    policy_version_min: int | None
    policy_version_max: int | None


@dataclass
class InFlight:
    """Tool calls running now, and the most at once since the start."""

    running: int = 0
    peak: int = 0

    @contextmanager
    def call(self) -> Iterator[None]:
        self.running += 1
        self.peak = max(self.peak, self.running)
        try:
            yield
        finally:
            self.running -= 1


@dataclass(frozen=True)
class McpTools:
    app: ASGIApp  # serves MCP_PATH
    lifespan: AbstractAsyncContextManager[None]  # runs while `app` serves
    in_flight: InFlight = field(default_factory=InFlight)


def build_mcp(controller: ControllerCalls) -> McpTools:
    """The MCP server over `controller`, as an ASGI app and the lifespan it needs."""
    server = MCPServer(
        name="harbor-ray-controller",
        instructions="Run agent rollouts on the tasks of a Harbor dataset: list_tasks "
                     "names them, run_rollout runs one and answers with its row.")
    in_flight = InFlight()

    @server.tool()
    async def run_rollout(task: str, agent: str, dataset: str | None = None,
                          sandbox: str | None = None, budget: int | None = None,
                          deadline_s: float | None = None) -> RolloutSummary:
        """Run one rollout of `task` with `agent` and wait for its row: reward, ok, error
        type, turns. `dataset` and `sandbox` default to the controller's; `budget` caps
        the model calls, `deadline_s` the rollout's time."""
        with in_flight.call():
            try:
                request = SubmitRequest.model_validate({
                    "request_id": f"mcp-{uuid.uuid4().hex}",
                    "tasks": [{"task": task, "n": 1}], "agent": agent,
                    **_given(dataset=dataset, sandbox=sandbox, budget=budget,
                             deadline_s=deadline_s)})
                group = await controller.run_one(request)
            except ValidationError as exc:
                raise ToolError(first_error(exc)[1]) from exc
            except OnlineError as exc:
                raise ToolError(_refusal(exc)) from exc
        (row,) = group.rollouts
        return RolloutSummary(
            rollout_id=row["rollout_id"], task=row["task"], ok=row["ok"],
            reward=row["reward"], error_type=row["error_type"], error=row["error"],
            turns=len(group.turns), policy_version_min=row["policy_version_min"],
            policy_version_max=row["policy_version_max"])

    @server.tool()
    async def list_tasks(dataset: str | None = None) -> list[str]:
        """The task names of `dataset` (the controller's default when not given)."""
        try:
            return await controller.tasks(dataset)
        except OnlineError as exc:
            raise ToolError(_refusal(exc)) from exc

    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH, stateless_http=True, json_response=True,
        # The controller key guards the route; a browser page cannot present it, which
        # is what the SDK's Host/Origin checks would otherwise protect against.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False))
    return McpTools(app=app, lifespan=server.session_manager.run(), in_flight=in_flight)


def first_error(exc: ValidationError) -> tuple[str | None, str]:
    """(the field, "field: what is wrong") of a validation's first error: what a 400
    and a tool error say, never the value given."""
    first = exc.errors(include_input=False, include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or None
    return where, f"{where or 'body'}: {first['msg']}"


def _given(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _refusal(exc: OnlineError) -> str:
    where = getattr(exc, "field", None)
    return f"{where}: {exc}" if where else str(exc)
