"""The capture proxy: a Starlette app at the boundary between agents and the engine.

It is a boundary, not a brain. For each model call: authenticate the session key,
translate the agent's dialect, ask the session's owner to admit the call (budget),
forward one non-streamed request to the engine, hand the record to the owner, and
answer in the agent's dialect (a synthetic SSE stream when it streams). Sessions live
behind `SessionStore`, so the app holds no per-session state and any replica can
serve any session.

Failures, by where they happen, and what the agent sees (always in its own dialect):
  request     unreadable, oversized, wrong type, untranslatable -> 4xx, nothing recorded
  session     unknown key, or the session ended (closed, owner gone) -> 401;
              budget spent -> a terminal assistant message
  engine      unreachable / timeout / 5xx -> 503 / 504 / 502 (retryable), counted on the
              session; the engine rejected the request -> 400
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import json
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from harbor_ray.capture.budget import budget_stop
from harbor_ray.capture.completion import Completion, EngineReplyError, parse_engine_reply
from harbor_ray.capture.count_tokens import count_call
from harbor_ray.capture.detect import Route as CallRoute
from harbor_ray.capture.detect import detect
from harbor_ray.capture.dialects import DIALECTS, Dialect
from harbor_ray.capture.dialects.base import EngineCall, ErrorKind, ReplyContext, RequestError
from harbor_ray.capture.engine import Engine, EngineError
from harbor_ray.capture.fast_json import JSONResponse
from harbor_ray.capture.keys import extract_key
from harbor_ray.capture.models_list import models_reply
from harbor_ray.capture.normalize import engine_body
from harbor_ray.capture.sampling import Sampling
from harbor_ray.capture.session import SessionGone, SessionGrant, SessionStore
from harbor_ray.capture.sse import KEEPALIVE
from harbor_ray.capture.turn import TurnRecord

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass(frozen=True)
class CaptureSettings:
    """What the app needs to know besides its store and engine."""

    served_model: str
    admin_key: str | None = None
    max_body_bytes: int = 32 * 1024 * 1024
    keepalive_s: float = 10.0
    default_budget: int | None = None
    # Off on cluster replicas: there, sessions are opened and exported by the actors
    # that own them, and /sessions falls through to the model-call route (a 404; a
    # DELETE, which that route does not take, a 405).
    admin_routes: bool = True


class SessionRequest(BaseModel):
    """The body of `POST /sessions`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    budget: int | None = Field(None, ge=0, description="Model calls allowed; None: no limit.")
    sampling: Sampling | None = Field(None, description="Imposed on every call.")


class _HttpError(Exception):
    def __init__(self, status: int, message: str, kind: ErrorKind) -> None:
        self.status, self.message, self.kind = status, message, kind


def build_capture_app(
    store: SessionStore,
    engine: Engine,
    settings: CaptureSettings,
    *,
    clock: Callable[[], float] = time.time,
    on_shutdown: Callable[[], Any] | None = None,
) -> CaptureApp:
    """The ASGI app. `on_shutdown` (e.g. closing the engine client) runs at lifespan end."""
    handler = _CaptureHandler(store, engine, settings, clock)
    instance_id = uuid.uuid4().hex

    async def health(request: Request) -> Response:
        # The instance id lets a launcher tell this server from another one on the port.
        return JSONResponse({"status": "ok", "instance": instance_id})

    admin = [
        Route("/sessions", handler.admin_create, methods=["POST"]),
        Route("/sessions", handler.admin_list, methods=["GET"]),
        Route("/sessions/{session_id}/export", handler.admin_export, methods=["GET"]),
        Route("/sessions/{session_id}", handler.admin_delete, methods=["DELETE"]),
    ]

    async def model_call(request: Request) -> Response:
        return await handler.model_call(request, _route_path(request.scope))

    routes = [
        Route("/health", health, methods=["GET"]),
        *(admin if settings.admin_routes else []),
        Route("/{path:path}", model_call, methods=["GET", "POST"]),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if on_shutdown is not None:
            await on_shutdown()

    router = Starlette(routes=routes, lifespan=lifespan)
    router.state.instance_id = instance_id
    return CaptureApp(handler, router, admin_routes=settings.admin_routes)


class CaptureApp:
    """The ASGI entry. A model call (GET or POST to any path but health and admin) goes
    straight to its handler; everything else, lifespan included, to a Starlette router
    with the same routes. The shortcut is for speed alone: routing and middleware were
    about a tenth of a model call's CPU in the proxy (py-spy, 64 concurrent clients)."""

    def __init__(self, handler: _CaptureHandler, router: Starlette, *, admin_routes: bool
                 ) -> None:
        self._handler, self._router, self._admin_routes = handler, router, admin_routes
        self.state = router.state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] in ("GET", "POST"):
            path = _route_path(scope)
            if path != "/health" and not (self._admin_routes and _is_admin(path)):
                response = await self._handler.model_call(Request(scope, receive), path)
                await response(scope, receive, send)
                return
        await self._router(scope, receive, send)


def _is_admin(path: str) -> bool:
    return path == "/sessions" or path.startswith("/sessions/")


class _CaptureHandler:
    def __init__(
        self,
        store: SessionStore,
        engine: Engine,
        settings: CaptureSettings,
        clock: Callable[[], float],
    ) -> None:
        self.store, self.engine, self.settings, self.clock = store, engine, settings, clock

    # ---- admin routes -------------------------------------------------------------

    def _admin_denied(self, request: Request) -> Response | None:
        expected = self.settings.admin_key
        if expected is None:
            return None
        given = extract_key(request.headers, request.query_params) or ""
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        return JSONResponse({"error": "admin key required"}, status_code=401)

    async def admin_create(self, request: Request) -> Response:
        if denied := self._admin_denied(request):
            return denied
        try:
            spec = SessionRequest.model_validate_json(await request.body() or b"{}")
        except ValidationError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        budget = spec.budget if "budget" in spec.model_fields_set else self.settings.default_budget
        info = await self.store.create(budget=budget, sampling=spec.sampling)
        return JSONResponse(
            {"session_id": info.session_id, "key": info.key, "budget": info.budget,
             "sampling": info.sampling.model_dump(exclude_none=True) if info.sampling else None},
            status_code=201,
        )

    async def admin_list(self, request: Request) -> Response:
        if denied := self._admin_denied(request):
            return denied
        ids = getattr(self.store, "session_ids", None)
        return JSONResponse({"sessions": ids() if ids else []})

    async def admin_export(self, request: Request) -> Response:
        if denied := self._admin_denied(request):
            return denied
        doc = await self.store.export(request.path_params["session_id"])
        if doc is None:
            return JSONResponse({"error": "no such session"}, status_code=404)
        return JSONResponse(doc)

    async def admin_delete(self, request: Request) -> Response:
        if denied := self._admin_denied(request):
            return denied
        if not await self.store.delete(request.path_params["session_id"]):
            return JSONResponse({"error": "no such session"}, status_code=404)
        return Response(status_code=204)

    # ---- model calls --------------------------------------------------------------

    async def model_call(self, request: Request, path: str) -> Response:
        route = detect(path, request.headers, request.query_params)
        if route is None:
            return _error(DIALECTS["chat"], 404, f"no route {path}", "not_found")
        dialect = DIALECTS[route.dialect]
        if route.kind == "models":
            return JSONResponse(models_reply(route.dialect, self.settings.served_model))
        try:
            grant = await self._authenticate(request)
            body = await self._read_json(request)
            if route.kind == "count_tokens":
                return JSONResponse(await self._count_tokens(dialect, route, body))
            call = dialect.to_engine(body, url_model=route.url_model, url_stream=route.url_stream)
            payload = engine_body(call, self.settings.served_model, grant.sampling)
            session_id = grant.session_id
        except _HttpError as exc:
            return _error(dialect, exc.status, exc.message, exc.kind)
        except RequestError as exc:
            return _error(dialect, exc.status, exc.message, "invalid_request")

        ctx = ReplyContext(
            response_id=f"hr-{secrets.token_hex(16)}",
            created=int(self.clock()),
            model=call.request_model or self.settings.served_model,
        )
        try:
            admission = await self.store.admit(session_id)
        except SessionGone:
            return _error(dialect, 401, "session has ended", "authentication")
        if not admission.admitted:
            return self._reply(dialect, call, budget_stop(), ctx)
        generation = self._generate(session_id, admission.call_index, route, call, payload)
        if call.stream:
            return StreamingResponse(
                self._stream(dialect, generation, ctx),
                media_type="text/event-stream",
                headers=_SSE_HEADERS,
            )
        try:
            completion = await generation
        except EngineError as exc:
            return _error(dialect, exc.status, exc.message, _engine_kind(exc))
        return self._reply(dialect, call, completion, ctx)

    async def _authenticate(self, request: Request) -> SessionGrant:
        key = extract_key(request.headers, request.query_params)
        grant = await self.store.authenticate(key) if key else None
        if grant is None:
            raise _HttpError(401, "invalid or missing session key", "authentication")
        return grant

    async def _read_json(self, request: Request) -> dict[str, Any]:
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise _HttpError(415, "content-type must be application/json", "invalid_request")
        limit = self.settings.max_body_bytes
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > limit:
            raise _HttpError(413, f"request body exceeds {limit} bytes", "too_large")
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _HttpError(413, f"request body exceeds {limit} bytes", "too_large")
            chunks.append(chunk)
        try:
            body = orjson.loads(b"".join(chunks))
        except orjson.JSONDecodeError as exc:
            raise _HttpError(
                400, f"request body is not valid JSON: {exc}", "invalid_request"
            ) from exc
        if not isinstance(body, dict):
            raise _HttpError(400, "request body must be a JSON object", "invalid_request")
        return body

    async def _count_tokens(
        self, dialect: Dialect, route: CallRoute, body: dict[str, Any]
    ) -> dict[str, Any]:
        call = count_call(route, body)
        count = await self._engine_count(engine_body(call, self.settings.served_model))
        return dialect.count_tokens_reply(count)

    async def _engine_count(self, payload: dict[str, Any]) -> int:
        """Ask the engine to count (vLLM's /tokenize); estimate if it cannot.

        The count is advisory (agents use it to manage context), never recorded.
        """
        request = {"model": payload["model"], "messages": payload["messages"]}
        try:
            reply = await self.engine.request("POST", "/tokenize", request)
            return int(reply["count"])
        except (EngineError, KeyError, TypeError, ValueError):
            return max(1, len(json.dumps(payload["messages"])) // 4)

    async def _generate(
        self,
        session_id: str,
        index: int,
        route: CallRoute,
        call: EngineCall,
        payload: dict[str, Any],
    ) -> Completion:
        """One engine call; every admitted call ends in exactly one record or release."""
        started = self.clock()
        try:
            reply = await self.engine.request("POST", "/v1/chat/completions", payload)
            completion = parse_engine_reply(reply)
        except EngineError:
            await self.store.release(session_id, index, "engine_error")
            raise
        except EngineReplyError as exc:
            await self.store.release(session_id, index, "engine_error")
            raise EngineError(f"engine reply unusable: {exc}", 502) from exc
        except BaseException:
            # Cancelled (client went away) or a bug: the call produced no turn.
            await asyncio.shield(self.store.release(session_id, index))
            raise
        message = (reply.get("choices") or [{}])[0].get("message") or {}
        await self.store.record(session_id, TurnRecord(
            index=index,
            dialect=route.dialect,
            prompt_ids=completion.prompt_ids,
            token_ids=completion.token_ids,
            logprobs=completion.logprobs,
            finish_reason=completion.raw_finish_reason or completion.finish_reason,
            request_messages_json=orjson.dumps(payload["messages"]),
            response_message_json=orjson.dumps(message),
            request_model=call.request_model,
            started_at=started,
            ended_at=self.clock(),
        ))
        return completion

    async def _stream(
        self,
        dialect: Dialect,
        generation: Any,
        ctx: ReplyContext,
    ) -> AsyncIterator[bytes]:
        task = asyncio.ensure_future(generation)
        try:
            while not task.done():
                done, _ = await asyncio.wait({task}, timeout=self.settings.keepalive_s)
                if not done:
                    yield KEEPALIVE
            try:
                completion = task.result()
            except EngineError as exc:
                yield dialect.error_event(exc.status, exc.message, _engine_kind(exc))
                return
            for frame in dialect.render_stream(completion, ctx):
                yield frame
        finally:
            # The client disconnected while the engine worked: stop the upstream call.
            if not task.done():
                task.cancel()

    def _reply(
        self, dialect: Dialect, call: EngineCall, completion: Completion, ctx: ReplyContext
    ) -> Response:
        if call.stream:
            frames = dialect.render_stream(completion, ctx)
            return StreamingResponse(
                _iterate(frames), media_type="text/event-stream", headers=_SSE_HEADERS
            )
        return JSONResponse(dialect.render(completion, ctx))


def _route_path(scope: Scope) -> str:
    """The path below the app's mount point.

    Mounted under a prefix (Ray Serve's route prefix, an ASGI `root_path`), the scope's
    path is the full one, so `/capture/v1/messages` must be detected as `/v1/messages`.
    """
    path, root = scope["path"], scope.get("root_path", "")
    if root and path.startswith(root) and path[len(root):len(root) + 1] in ("", "/"):
        return path[len(root):] or "/"
    return path


async def _iterate(frames: Any) -> AsyncIterator[bytes]:
    for frame in frames:
        yield frame


def _engine_kind(exc: EngineError) -> ErrorKind:
    if exc.status == 503:
        return "overloaded"
    return "engine" if exc.status >= 500 else "invalid_request"


def _error(dialect: Dialect, status: int, message: str, kind: ErrorKind) -> JSONResponse:
    return JSONResponse(dialect.error_body(status, message, kind), status_code=status)
