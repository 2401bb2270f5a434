"""The controller's HTTP API (JSON), a Starlette app in front of a `Controller` (in this
process, or the controller actor through `ActorController`).

Every route needs the controller key (`Authorization: Bearer`), compared in constant
time, in exactly one Authorization header (two are refused, whatever they hold): agents
never hold it (they hold session keys, which open only the capture proxy); the MCP tools
at `/mcp` (`mcp_tools`) are behind it too. Only requests naming one of the allowed Host
names reach any route (`harbor_ray.host_names`: loopback by default). A body is read
whole (capped), validated against its model (a 400 naming the first bad field, nothing
started), then handed to the controller; its refusals (`OnlineError`) carry their
status.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterable
from dataclasses import dataclass
from typing import Any

import orjson
import ray
from pydantic import BaseModel, ValidationError
from ray.exceptions import RayTaskError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from harbor_ray.errors import FieldError, OnlineError, OverCapacity, WeightUpdateError
from harbor_ray.host_names import LOOPBACK_NAMES, HostGuard
from harbor_ray.online.controller_calls import ControllerCalls
from harbor_ray.online.mcp_tools import MCP_PATH, build_mcp, first_error
from harbor_ray.online.wire import (
    AckReply,
    AckRequest,
    CancelReply,
    ErrorReply,
    Group,
    GroupsReply,
    PolicyReply,
    StatsReply,
    SubmitReply,
    SubmitRequest,
    WeightsReply,
    WeightsRequest,
    wide_integer,
)
from harbor_ray.query_numbers import parse_count

__all__ = ["ActorController", "build_controller_app", "openapi"]

MAX_BODY_BYTES = 4 * 1024 * 1024
MAX_WAIT_S = 300.0  # a long poll's longest wait
MAX_GROUPS = 1_000

_log = logging.getLogger(__name__)


# Calls that only wait: when their caller gives up, the actor stops waiting too (and
# `run_one` cancels its group) instead of running on for nobody.
_CANCELLED_WITH_CALLER = frozenset({"groups", "run_one"})


class ActorController:
    """`ControllerCalls` on the controller actor: its refusals re-raised as themselves."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle

    def __getattr__(self, name: str) -> Callable[..., Coroutine[Any, Any, Any]]:
        method = getattr(self._handle, name)

        async def call(*args: Any) -> Any:
            ref = method.remote(*args)
            try:
                return await ref
            except asyncio.CancelledError:
                if name in _CANCELLED_WITH_CALLER:
                    ray.cancel(ref)
                raise
            except RayTaskError as exc:
                if isinstance(exc.cause, OnlineError):
                    raise exc.cause from None
                raise

        return call


def _json(
    model: BaseModel | dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    body = model.model_dump(mode="json") if isinstance(model, BaseModel) else model
    return Response(orjson.dumps(body), status, headers, media_type="application/json")


def _error(
    status: int, message: str, field: str | None = None, headers: dict[str, str] | None = None
) -> Response:
    return _json(ErrorReply(error=message, field=field), status, headers)


class _Refused(OnlineError):
    """A request refused before it reached the controller, with the reply it gets."""

    def __init__(self, response: Response) -> None:
        self.response = response


async def _body[M: BaseModel](request: Request, model: type[M]) -> M:
    if request.headers.get("content-type", "").split(";")[0].strip() != "application/json":
        raise _Refused(_error(415, "content-type must be application/json"))
    raw = bytearray()
    async for chunk in request.stream():
        raw += chunk
        if len(raw) > MAX_BODY_BYTES:
            raise _Refused(_error(413, f"body over {MAX_BODY_BYTES} bytes"))
    _refuse_wide(raw)  # before orjson, which reads such an integer as a float or refuses it
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise _Refused(_error(400, f"body is not JSON: {exc}")) from exc
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        where, message = first_error(exc)
        raise _Refused(_error(400, message, where)) from exc


def _refuse_wide(raw: bytes | bytearray) -> None:
    """A 400 naming where a body has an integer past 64 bits: orjson reads one as a
    float (or refuses it as infinite), and `metadata` is returned as given."""
    if (where := wide_integer(raw)) is not None:
        raise _Refused(
            _error(
                400,
                f"{where}: an integer past 64 bits, which would not "
                "come back as given (JSON readers part ways there): "
                "send it as a string",
                where,
            )
        )


def _query_number(request: Request, name: str, default: float, high: float) -> float:
    raw = request.query_params.get(name)
    try:
        value = default if raw is None else float(raw)
    except ValueError:
        value = -1.0
    if not 0 <= value <= high:
        raise _Refused(_error(400, f"{name} must be a number in [0, {high:g}]", name))
    return value


def _query_count(request: Request, name: str, default: int, high: int) -> int:
    raw = request.query_params.get(name)
    value = default if raw is None else parse_count(raw, high)
    if value is None:
        raise _Refused(
            _error(400, f"{name} must be a whole number in [0, {high}], in ASCII digits", name)
        )
    return value


Handler = Callable[[ControllerCalls, Request], Awaitable[Response]]


async def submit(controller: ControllerCalls, request: Request) -> Response:
    return _json(await controller.submit(await _body(request, SubmitRequest)), 202)


async def groups(controller: ControllerCalls, request: Request) -> Response:
    max_groups = _query_count(request, "max", 16, MAX_GROUPS)
    wait_s = _query_number(request, "wait_s", 0, MAX_WAIT_S)
    written = [_group_json(g) for g in await controller.groups(max_groups, wait_s)]
    return Response(
        b'{"groups":[' + b",".join(g for g in written if g) + b"]}", media_type="application/json"
    )


async def ack(controller: ControllerCalls, request: Request) -> Response:
    return _json(await controller.ack((await _body(request, AckRequest)).group_ids))


async def cancel(controller: ControllerCalls, request: Request) -> Response:
    return _json(await controller.cancel(request.path_params["group_id"]))


async def weights(controller: ControllerCalls, request: Request) -> Response:
    return _json(await controller.update_weights(await _body(request, WeightsRequest)))


async def policy(controller: ControllerCalls, request: Request) -> Response:
    return _json(await controller.policy())


async def stats(controller: ControllerCalls, request: Request) -> Response:
    return _json(await controller.stats())


async def health(controller: ControllerCalls, request: Request) -> Response:
    await controller.policy()  # the controller answers
    return _json({"ok": True})


async def document(controller: ControllerCalls, request: Request) -> Response:
    return _json(openapi())


@dataclass(frozen=True)
class Endpoint:
    """One route of the API: its handler, and what the OpenAPI document says of it
    (`summary` empty: not in the document)."""

    method: str
    path: str
    handler: Handler
    summary: str = ""
    body: type[BaseModel] | None = None
    status: int = 200
    reply: type[BaseModel] | None = None


# Every route but the MCP transport's, in one table: the app routes it, the OpenAPI
# document describes it.
ENDPOINTS = (
    Endpoint(
        "POST",
        "/v1/rollouts",
        submit,
        "Submit groups (idempotent by request_id); 429 when over capacity",
        SubmitRequest,
        202,
        SubmitReply,
    ),
    Endpoint(
        "GET",
        "/v1/groups",
        groups,
        "Long-poll finished groups, oldest first (query: "
        "max, wait_s); delivered again until acknowledged",
        reply=GroupsReply,
    ),
    Endpoint(
        "POST", "/v1/groups/ack", ack, "Acknowledge delivered groups", AckRequest, reply=AckReply
    ),
    Endpoint(
        "POST",
        "/v1/groups/{group_id}/cancel",
        cancel,
        "Cancel a group: its rollouts end as cancelled rows",
        reply=CancelReply,
    ),
    Endpoint(
        "POST",
        "/v1/weights",
        weights,
        "Load a checkpoint on every engine replica, then set the policy version",
        WeightsRequest,
        reply=WeightsReply,
    ),
    Endpoint(
        "GET",
        "/v1/policy",
        policy,
        "The policy version and each replica's state",
        reply=PolicyReply,
    ),
    Endpoint(
        "GET", "/v1/stats", stats, "Counts, errors, staleness, rollouts/min", reply=StatsReply
    ),
    Endpoint("GET", "/health", health),
    Endpoint("GET", "/openapi.json", document),
)


class _KeyCheck:
    """Whether a request presents the controller key: in exactly one Authorization
    header (two are refused, not one of them picked: every route and the MCP transport
    decide alike, whatever a proxy in between keeps), compared in constant time."""

    def __init__(self, key: str) -> None:
        assert key, "the controller needs a key (the service always loads or makes one)"
        self._expected = f"Bearer {key}".encode()

    def __call__(self, scope: Scope) -> bool:
        given = [v for k, v in scope.get("headers", ()) if k == b"authorization"]
        return hmac.compare_digest(given[0] if len(given) == 1 else b"", self._expected)


@dataclass(frozen=True)
class _Answer:
    """One endpoint's handler behind the key, its refusals turned into their replies."""

    handler: Handler
    controller: ControllerCalls
    allowed: _KeyCheck

    async def endpoint(self, request: Request) -> Response:
        if not self.allowed(request.scope):
            return _unauthorized()
        try:
            return await self.handler(self.controller, request)
        except _Refused as refused:
            return refused.response
        except OverCapacity as exc:
            return _error(429, str(exc), headers={"retry-after": str(exc.retry_after_s)})
        except WeightUpdateError as exc:
            return _json(
                {"error": str(exc), "replicas": [r.model_dump(mode="json") for r in exc.replicas]},
                exc.status,
            )
        except FieldError as exc:
            return _error(exc.status, str(exc), exc.field)


def build_controller_app(
    controller: ControllerCalls, key: str, *, allowed_hosts: Iterable[str] = LOOPBACK_NAMES
) -> HostGuard:
    """The API over `controller`; `key` is what every caller must present, and
    `allowed_hosts` the Host names it answers (the Starlette app's attributes, `state`
    included, read through)."""
    allowed = _KeyCheck(key)
    mcp = build_mcp(controller)

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with mcp.lifespan:
            yield

    app = Starlette(
        lifespan=lifespan,
        routes=[
            Route(MCP_PATH, _KeyGuard(mcp.app, allowed)),
            *(
                Route(e.path, _Answer(e.handler, controller, allowed).endpoint, methods=[e.method])
                for e in ENDPOINTS
            ),
        ],
    )
    app.state.mcp_in_flight = mcp.in_flight  # MCP tool calls running, and their peak
    return HostGuard(app, allowed_hosts)


def _group_json(group: Group) -> bytes:
    """One group of a `GET /v1/groups` reply as JSON; b"" (left out, logged) if it cannot
    be written, so that one group never blocks the others. Submit's limits on
    `metadata` keep this from happening; this is the guard behind them."""
    try:
        return orjson.dumps(group.model_dump(mode="json"))
    except (orjson.JSONEncodeError, RecursionError, ValueError) as exc:
        _log.warning(
            "group %s cannot be delivered (left out of the reply): %s", group.group_id, exc
        )
        return b""


def _unauthorized() -> Response:
    return _error(401, "missing or wrong controller key", headers={"www-authenticate": "Bearer"})


class _KeyGuard:
    """An ASGI app (the MCP transport) behind the controller key. GET, the stream of
    server-initiated messages, is 405 (as the MCP spec lets a server answer): the
    transport is stateless, so there is nothing to push, and an open stream would only
    wait to be broken by its client."""

    def __init__(self, app: ASGIApp, allowed: _KeyCheck) -> None:
        self.app, self.allowed = app, allowed

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self.allowed(scope):
            await _unauthorized()(scope, receive, send)
            return
        if scope.get("method") == "GET":
            await _error(
                405,
                "the MCP transport is stateless: POST tool calls",
                headers={"allow": "POST, DELETE"},
            )(scope, receive, send)
            return
        await self.app(scope, receive, send)


def openapi() -> dict[str, Any]:
    """The API's OpenAPI 3.1 document, from the wire models."""
    documented = [e for e in ENDPOINTS if e.summary]
    models = {m for e in documented for m in (e.body, e.reply) if m is not None} | {ErrorReply}
    schemas: dict[str, Any] = {}
    for model in sorted(models, key=lambda m: m.__name__):
        schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
        schemas.update(schema.pop("$defs", {}))
        schemas[model.__name__] = schema

    def ref(model: type[BaseModel]) -> dict[str, Any]:
        return {
            "content": {
                "application/json": {"schema": {"$ref": f"#/components/schemas/{model.__name__}"}}
            }
        }

    paths: dict[str, Any] = {}
    for e in documented:
        operation: dict[str, Any] = {
            "summary": e.summary,
            "responses": {
                str(e.status): {"description": "ok", **(ref(e.reply) if e.reply else {})},
                "401": {"description": "missing or wrong controller key"},
                "400": {"description": "a malformed field", **ref(ErrorReply)},
            },
        }
        if e.body is not None:
            operation["requestBody"] = {"required": True, **ref(e.body)}
        paths.setdefault(e.path, {})[e.method.lower()] = operation
    return {
        "openapi": "3.1.0",
        "info": {"title": "harbor_ray online controller", "version": "1"},
        "components": {
            "schemas": schemas,
            "securitySchemes": {"controllerKey": {"type": "http", "scheme": "bearer"}},
        },
        "security": [{"controllerKey": []}],
        "paths": paths,
    }
