"""The controller's MCP tools, `run_rollout` and `list_tasks` (the official `mcp` SDK,
streamable HTTP), which the controller's app serves at `/mcp` behind its key.

Both tools are coroutines on purpose: the SDK runs a plain function in anyio's worker
threads, whose default limiter admits 40 at a time per process, so a sync tool would
cap concurrent rollouts at 40 without saying so. An async tool only awaits the
controller, so calls in flight are bounded by the controller's capacity, not here.
The transport is stateless (every request stands alone, JSON replies): any HTTP replica
of the controller's app can serve any call, as with the other routes. Two answers are
ours rather than the SDK's: a request whose `id` is no string or integer is an invalid
request (the SDK takes it for a notification and answers nothing), and a prompt the
server does not have is the caller's mistake (the SDK logs a traceback for it).
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterator
from contextlib import AbstractAsyncContextManager, contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.context import Context
from mcp.server.mcpserver.exceptions import ToolError
from mcp.server.transport_security import (
    DEFAULT_MAX_REQUEST_BODY_SIZE,
    TransportSecuritySettings,
)
from mcp.shared.dispatcher import as_request_id
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS, INVALID_REQUEST, GetPromptResult, InputRequiredResult
from pydantic import BaseModel, ValidationError
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

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
    server = _ControllerServer(
        name="harbor-ray-controller",
        instructions="Run agent rollouts on the tasks of a Harbor dataset: list_tasks "
        "names them, run_rollout runs one and answers with its row.",
    )
    in_flight = InFlight()

    @server.tool()
    async def run_rollout(
        task: str,
        agent: str,
        dataset: str | None = None,
        sandbox: str | None = None,
        budget: int | None = None,
        deadline_s: float | None = None,
    ) -> RolloutSummary:
        """Run one rollout of `task` with `agent` and wait for its row: reward, ok, error
        type, turns. `dataset` and `sandbox` default to the controller's; `budget` caps
        the model calls, `deadline_s` the rollout's time."""
        with in_flight.call():
            try:
                request = SubmitRequest.model_validate(
                    {
                        "request_id": f"mcp-{uuid.uuid4().hex}",
                        "tasks": [{"task": task, "n": 1}],
                        "agent": agent,
                        **_given(
                            dataset=dataset, sandbox=sandbox, budget=budget, deadline_s=deadline_s
                        ),
                    }
                )
                group = await controller.run_one(request)
            except ValidationError as exc:
                raise ToolError(first_error(exc)[1]) from exc
            except OnlineError as exc:
                raise ToolError(_refusal(exc)) from exc
        (row,) = group.rollouts
        return RolloutSummary(
            rollout_id=row["rollout_id"],
            task=row["task"],
            ok=row["ok"],
            reward=row["reward"],
            error_type=row["error_type"],
            error=row["error"],
            turns=len(group.turns),
            policy_version_min=row["policy_version_min"],
            policy_version_max=row["policy_version_max"],
        )

    @server.tool()
    async def list_tasks(dataset: str | None = None) -> list[str]:
        """The task names of `dataset` (the controller's default when not given)."""
        try:
            return await controller.tasks(dataset)
        except OnlineError as exc:
            raise ToolError(_refusal(exc)) from exc

    app = server.streamable_http_app(
        streamable_http_path=MCP_PATH,
        stateless_http=True,
        json_response=True,
        # The controller key guards the route; a browser page cannot present it, which
        # is what the SDK's Host/Origin checks would otherwise protect against.
        transport_security=TransportSecuritySettings(enable_dns_rebinding_protection=False),
    )
    return McpTools(
        app=_RequestIds(app), lifespan=server.session_manager.run(), in_flight=in_flight
    )


class _ControllerServer(MCPServer[Any]):
    """The SDK's server, but `prompts/get` of a prompt it does not have (it has none) is
    an invalid-params error: the SDK raises a ValueError for it, which its dispatcher
    answers with code 0 and logs, with a traceback, on every call."""

    async def get_prompt(
        self,
        name: str,
        arguments: dict[str, Any] | None = None,
        context: Context[Any, Any] | None = None,
    ) -> GetPromptResult | InputRequiredResult:
        if name not in {prompt.name for prompt in await self.list_prompts()}:
            raise MCPError(
                INVALID_PARAMS,
                f"no prompt {name!r}: this server has no "
                "prompts (its tools: run_rollout, list_tasks)",
            )
        return await super().get_prompt(name, arguments, context)


class _RequestIds:
    """The MCP transport behind a check of each request's `id`: a string or an integer
    (JSON-RPC 2.0 as MCP has it: never null, a fraction, an object or a list). The SDK
    reads a request with any other id as a notification, and a notification is answered
    with 202 and nothing, so its caller waits for an answer that never comes; here it
    gets an invalid-request error (id null, since its own cannot be echoed). A body is
    read no further than the SDK's own limit, then handed on as it came."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("method") != "POST":
            await self.app(scope, receive, send)
            return
        read: deque[Message] = deque()
        body = bytearray()
        while len(body) <= DEFAULT_MAX_REQUEST_BODY_SIZE:
            read.append(message := await receive())
            body += message.get("body", b"")
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        whole = read[-1]["type"] == "http.request" and not read[-1].get("more_body")
        if whole and (problem := _id_problem(bytes(body))) is not None:
            await JSONResponse(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {"code": INVALID_REQUEST, "message": problem},
                },
                400,
            )(scope, receive, send)
            return

        async def replay() -> Message:
            return read.popleft() if read else await receive()

        await self.app(scope, replay, send)


def _id_problem(body: bytes) -> str | None:
    """What is wrong with the id of the request `body` holds, or None (not a request,
    not JSON, a batch: the SDK's to answer)."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(message, dict) or "method" not in message or "id" not in message:
        return None
    if as_request_id(message["id"]) is not None:
        return None
    given = _JSON_KINDS.get(type(message["id"]), "that")
    return (
        f"id: a request's id is a string or an integer, not {given}; leave it out "
        "for a notification"
    )


_JSON_KINDS = {
    dict: "an object",
    list: "a list",
    float: "a fraction",
    bool: "true or false",
    type(None): "null",
}


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
