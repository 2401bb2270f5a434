"""The capture proxy: a Starlette app at the boundary between agents and the engine.

It is a boundary, not a brain. For each model call: authenticate the session key,
translate the agent's dialect, ask the session's owner to admit the call (budget),
forward one non-streamed request to the engine, hand the record to the owner, and
answer in the agent's dialect (a synthetic SSE stream when it streams). Sessions live
behind a `CallStore`, so the app holds no per-session state and any replica can
serve any session. Only an app given an `AdminStore` (where the sessions live) has
the admin routes that open, list, export and delete them.

This module is the ASGI entry: the head limits, the routing, the settings. A model
call's steps are pipeline.py's (stitching.py makes a continued call's prompt), its
answer's delivery delivery.py's, the refusals' answers refusals.py's, the admin routes
admin.py's. Not model calls (preflight.py): a websocket upgrade gets 426 at once (codex
then uses HTTP), `HEAD` and `GET /` a 200.

Failures, by where they happen, and what the agent sees (always in its own dialect):
  host        a Host that is not an IP address or an allowed name, or two -> 421, first
              (host_names.py: a guard against DNS rebinding)
  request     head (URL, headers) too large -> 414 / 431 before anything else; unreadable,
              oversized, wrong type, untranslatable, not encodable for the engine (nested
              too deeply, an integer out of range) -> 4xx; nothing recorded
  session     unknown key, or the session ended (closed, deleted, owner gone), even while
              the call ran -> 401; budget spent -> a terminal assistant message
  engine      unreachable / timeout / 5xx -> 503 / 504 / 502, too busy (429) -> 429, all
              retryable and counted on the session; the engine rejected the request -> 400
  client      gone before its reply was handed to the server -> the engine call is
              cancelled, its budget slot given back, nothing recorded (a turn recorded
              just before is withdrawn); a call is delivered once its reply's last byte
              was handed to the server
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Callable
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from harbor_ray.capture.core.detect import answering_dialect
from harbor_ray.capture.core.dialects import DIALECTS, Dialect
from harbor_ray.capture.proxy.admin import AdminRoutes, is_admin_path
from harbor_ray.capture.proxy.fast_json import JSONResponse
from harbor_ray.capture.proxy.pipeline import CallPipeline
from harbor_ray.capture.proxy.preflight import (
    http_upgrade_refused,
    is_upgrade,
    probe_answer,
    refuse_websocket,
)
from harbor_ray.capture.proxy.refusals import error_reply
from harbor_ray.capture.proxy.session import AdminStore, CallStore
from harbor_ray.capture.proxy.settings import CaptureSettings
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.host_names import REFUSED_HOST, HostNames


def build_capture_app(
    store: CallStore,
    engine: Engine,
    settings: CaptureSettings,
    *,
    admin: AdminStore | None = None,
    clock: Callable[[], float] = time.time,
    policy_version: Callable[[], int | None] = lambda: 0,
    on_shutdown: Callable[[], Any] | None = None,
) -> CaptureApp:
    """The ASGI app. `on_shutdown` (e.g. closing the engine client) runs at lifespan end.
    `policy_version` is read when a call is forwarded and when its reply arrives (the
    turn's `policy_version_start`/`_end`); it must be cheap (the online service's is a
    cached value, `PolicyClock` in harbor_ray/cluster/policy_version.py). Offline runs
    record version 0.

    Without `admin` (cluster replicas, whose sessions their owner actors open and
    export; `serve_capture`, whose caller does) there are no admin routes: /sessions
    falls through to the model-call route (a 404; a DELETE, which that route does not
    take, a 405)."""
    pipeline = CallPipeline(store, engine, settings, clock, policy_version)
    instance_id = uuid.uuid4().hex

    async def health(request: Request) -> Response:
        # The instance id lets a launcher tell this server from another one on the port.
        return JSONResponse({"status": "ok", "instance": instance_id})

    admin_routes = [] if admin is None else AdminRoutes(admin, settings).routes()

    async def model_call(request: Request) -> ASGIApp:
        return await pipeline.model_call(request, _route_path(request.scope))

    routes = [
        Route("/health", health, methods=["GET"]),
        *admin_routes,
        Route("/{path:path}", model_call, methods=["GET", "POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:
            await on_shutdown()

    router = Starlette(routes=routes, lifespan=lifespan)
    router.state.instance_id = instance_id
    return CaptureApp(pipeline, router, admin_routes=bool(admin_routes))


class CaptureApp:
    """The ASGI entry. A model call (GET or POST to any path but health and admin) goes
    straight to its pipeline; everything else, lifespan included, to a Starlette router
    with the same routes. The shortcut is for speed alone (docs/performance.md)."""

    def __init__(self, pipeline: CallPipeline, router: Starlette, *, admin_routes: bool) -> None:
        self._pipeline, self._router, self._admin_routes = pipeline, router, admin_routes
        self.state = router.state
        self.settings = pipeline.settings
        self._hosts = HostNames(self.settings.allowed_hosts, any_address=True)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not self._hosts.admits(scope):
            await _host_refused(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await refuse_websocket(_route_path(scope), scope, receive, send)
            return
        if scope["type"] == "http":
            path = _route_path(scope)
            response: ASGIApp | None = _head_refused(scope, path, self.settings)
            if response is None and is_upgrade(scope):
                response = http_upgrade_refused(path, scope)
            if response is None:
                response = probe_answer(scope, path)
            if (
                response is None
                and path != "/health"
                and not (self._admin_routes and is_admin_path(path))
            ):
                if scope["method"] in ("GET", "POST"):
                    response = await self._pipeline.model_call(Request(scope, receive), path)
                else:
                    response = error_reply(
                        _dialect_for(path, scope),
                        405,
                        f"method {scope['method']} is not allowed on {path}",
                        "invalid_request",
                    )
            if response is not None:
                await response(scope, receive, send)
                return
        await self._router(scope, receive, send)


async def _host_refused(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] == "websocket":
        await send({"type": "websocket.close", "code": 1008})
        return
    await error_reply(
        _dialect_for(_route_path(scope), scope), 421, REFUSED_HOST, "invalid_request"
    )(scope, receive, send)


def _head_refused(scope: Scope, path: str, settings: CaptureSettings) -> Response | None:
    """414 / 431 for a request head past the limits, before authentication."""
    url = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    if url > settings.max_url_bytes:
        return error_reply(
            _dialect_for(path, scope),
            414,
            f"the URL exceeds {settings.max_url_bytes} bytes",
            "too_large",
        )
    head = url + sum(len(name) + len(value) + 4 for name, value in scope["headers"])
    if head > settings.max_header_bytes:
        return error_reply(
            _dialect_for(path, scope),
            431,
            f"the request headers exceed {settings.max_header_bytes} bytes",
            "too_large",
        )
    return None


def _dialect_for(path: str, scope: Scope) -> Dialect:
    return DIALECTS[answering_dialect(path, Request(scope).headers)]


def _route_path(scope: Scope) -> str:
    """The path below the app's mount point.

    Mounted under a prefix (Ray Serve's route prefix, an ASGI `root_path`), the scope's
    path is the full one, so `/capture/v1/messages` must be detected as `/v1/messages`.
    """
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root) : len(root) + 1] in ("", "/"):
        return path[len(root) :] or "/"
    return path
