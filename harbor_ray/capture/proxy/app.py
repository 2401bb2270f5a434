"""The capture proxy: a Starlette app at the boundary between agents and the engine.

It is a boundary, not a brain. For each model call: authenticate the session key,
translate the agent's dialect, ask the session's owner to admit the call (budget),
forward one non-streamed request to the engine, hand the record to the owner, and
answer in the agent's dialect (a synthetic SSE stream when it streams). Sessions live
behind a `CallStore`, so the app holds no per-session state and any replica can
serve any session. Only an app given an `AdminStore` (where the sessions live) has
the admin routes that open, list, export and delete them.

Not model calls (probes.py): a websocket upgrade gets 426 at once (codex then uses
HTTP), `HEAD` and `GET /` a 200.

Failures, by where they happen, and what the agent sees (always in its own dialect):
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

import asyncio
import contextlib
import hmac
import secrets
import time
import uuid
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.applications import Starlette
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from harbor_ray.capture.core.auxiliary import MainLoop, is_auxiliary
from harbor_ray.capture.core.budget import budget_stop
from harbor_ray.capture.core.completion import Completion, parse_engine_reply
from harbor_ray.capture.core.continuation import (
    Continuation,
    ContinuationBase,
    Conversation,
    Fallback,
    extend,
    has_non_text_content,
    stitch,
    turn_closing,
)
from harbor_ray.capture.core.count_tokens import count_call
from harbor_ray.capture.core.detect import Route as CallRoute
from harbor_ray.capture.core.detect import answering_dialect, detect
from harbor_ray.capture.core.dialects import DIALECTS, Dialect
from harbor_ray.capture.core.dialects.base import EngineCall, ErrorKind, ReplyContext
from harbor_ray.capture.core.keys import extract_key
from harbor_ray.capture.core.models_list import models_reply
from harbor_ray.capture.core.normalize import engine_body
from harbor_ray.capture.core.sampling import INT64_MAX, Sampling, TurnSampling
from harbor_ray.capture.core.sse import KEEPALIVE
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.fast_json import JSONResponse
from harbor_ray.capture.proxy.probes import (
    http_upgrade_refused,
    is_upgrade,
    probe_answer,
    refuse_websocket,
)
from harbor_ray.capture.proxy.session import AdminStore, CallStore, SessionGrant
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.errors import (
    AgentCallError,
    AgentRequestError,
    EngineError,
    EngineReplyError,
    SessionGone,
)

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


@dataclass(frozen=True)
class CaptureSettings:
    """What the app needs to know besides its store and engine."""

    served_model: str
    admin_key: str | None = None
    max_body_bytes: int = 32 * 1024 * 1024
    # The request head: the URL (path and query), and the request line and headers
    # together. The servers of this package refuse a larger one while reading it
    # (server.py); the app checks again for servers that do not (Serve's HTTP proxy).
    max_url_bytes: int = 16 * 1024
    max_header_bytes: int = 64 * 1024
    keepalive_s: float = 10.0
    default_budget: int | None = None
    # A call that continues a recorded turn's conversation gets that turn's prompt +
    # sampled ids as the start of its prompt (continuation.py); False: the engine
    # renders every prompt from the messages.
    stitch: bool = True
    # Which logprobs the engine returns (`Certification.logprobs_mode`), recorded with
    # every turn; None: not known (the engine was not certified here).
    logprobs_mode: str | None = None


class SessionRequest(BaseModel):
    """The body of `POST /sessions`."""

    model_config = ConfigDict(extra="forbid", strict=True)

    budget: int | None = Field(None, ge=0, le=INT64_MAX,
                               description="Model calls allowed; None: no limit.")
    sampling: Sampling | None = Field(None, description="Imposed on every call.")
    main_model: str | None = Field(
        None, max_length=1024,
        description="The model name the agent's main loop asks for: calls asking for "
                    "another are marked auxiliary (side calls).")
    agent: str | None = Field(
        None, max_length=1024,
        description="The agent's Harbor name, for its own side-call rules.")


class _HttpError(AgentCallError):
    """A call the proxy refuses itself (key, size, content type, JSON), with its status."""

    def __init__(self, message: str, *, status: int, kind: ErrorKind) -> None:
        self.status, self.message, self.kind = status, message, kind


class _ClientGone(AgentCallError):
    """The client disconnected while its request was being read."""


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
    cached value, harbor_ray/online/policy.py). Offline runs record version 0.

    Without `admin` (cluster replicas, whose sessions their owner actors open and
    export; `serve_capture`, whose caller does) there are no admin routes: /sessions
    falls through to the model-call route (a 404; a DELETE, which that route does not
    take, a 405)."""
    handler = _CaptureHandler(store, engine, settings, clock, policy_version)
    instance_id = uuid.uuid4().hex

    async def health(request: Request) -> Response:
        # The instance id lets a launcher tell this server from another one on the port.
        return JSONResponse({"status": "ok", "instance": instance_id})

    admin_routes = [] if admin is None else _AdminRoutes(admin, settings).routes()

    async def model_call(request: Request) -> Response:
        return await handler.model_call(request, _route_path(request.scope))

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
    return CaptureApp(handler, router, admin_routes=bool(admin_routes))


class CaptureApp:
    """The ASGI entry. A model call (GET or POST to any path but health and admin) goes
    straight to its handler; everything else, lifespan included, to a Starlette router
    with the same routes. The shortcut is for speed alone: routing and middleware were
    about a tenth of a model call's CPU in the proxy (py-spy, 64 concurrent clients)."""

    def __init__(self, handler: _CaptureHandler, router: Starlette, *, admin_routes: bool
                 ) -> None:
        self._handler, self._router, self._admin_routes = handler, router, admin_routes
        self.state = router.state
        self.settings = handler.settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
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
            if response is None and path != "/health" and not (
                    self._admin_routes and _is_admin(path)):
                if scope["method"] in ("GET", "POST"):
                    response = await self._handler.model_call(Request(scope, receive), path)
                else:
                    response = _error(_dialect_for(path, scope), 405,
                                      f"method {scope['method']} is not allowed on {path}",
                                      "invalid_request")
            if response is not None:
                await response(scope, receive, send)
                return
        await self._router(scope, receive, send)


def _head_refused(scope: Scope, path: str, settings: CaptureSettings) -> Response | None:
    """414 / 431 for a request head past the limits, before authentication."""
    url = len(scope.get("raw_path") or b"") + len(scope.get("query_string") or b"")
    if url > settings.max_url_bytes:
        return _error(_dialect_for(path, scope), 414,
                      f"the URL exceeds {settings.max_url_bytes} bytes", "too_large")
    head = url + sum(len(name) + len(value) + 4 for name, value in scope["headers"])
    if head > settings.max_header_bytes:
        return _error(_dialect_for(path, scope), 431,
                      f"the request headers exceed {settings.max_header_bytes} bytes",
                      "too_large")
    return None


def _dialect_for(path: str, scope: Scope) -> Dialect:
    return DIALECTS[answering_dialect(path, Request(scope).headers)]


def _is_admin(path: str) -> bool:
    return path == "/sessions" or path.startswith("/sessions/")


class _AdminRoutes:
    """Opening, listing, exporting and deleting sessions, over the store that holds them."""

    def __init__(self, admin: AdminStore, settings: CaptureSettings) -> None:
        self.admin, self.settings = admin, settings

    def routes(self) -> list[Route]:
        return [
            Route("/sessions", self.create_session, methods=["POST"]),
            Route("/sessions", self.list_sessions, methods=["GET"]),
            Route("/sessions/{session_id}/export", self.export_session, methods=["GET"]),
            Route("/sessions/{session_id}", self.delete_session, methods=["DELETE"]),
        ]

    def _denied(self, request: Request) -> Response | None:
        expected = self.settings.admin_key
        if expected is None:
            return None
        given = extract_key(request.headers, request.query_params) or ""
        if hmac.compare_digest(given.encode(), expected.encode()):
            return None
        return JSONResponse({"error": "admin key required"}, status_code=401)

    async def create_session(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        try:
            body = await _read_body(request, self.settings.max_body_bytes)
            spec = SessionRequest.model_validate_json(body or b"{}")
        except _ClientGone:
            return _NOTHING
        except _HttpError as exc:
            return JSONResponse({"error": exc.message}, status_code=exc.status)
        except ValidationError as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)
        budget = spec.budget if "budget" in spec.model_fields_set else self.settings.default_budget
        main_loop = (MainLoop(model=spec.main_model, agent=spec.agent)
                     if spec.main_model or spec.agent else None)
        info = await self.admin.create(budget=budget, sampling=spec.sampling,
                                       main_loop=main_loop)
        return JSONResponse(
            {"session_id": info.session_id, "key": info.key, "budget": info.budget,
             "sampling": info.sampling.model_dump(exclude_none=True) if info.sampling else None},
            status_code=201,
        )

    async def list_sessions(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        return JSONResponse({"sessions": self.admin.session_ids()})

    async def export_session(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        doc = await self.admin.export(request.path_params["session_id"])
        if doc is None:
            return JSONResponse({"error": "no such session"}, status_code=404)
        return JSONResponse(doc)

    async def delete_session(self, request: Request) -> Response:
        if denied := self._denied(request):
            return denied
        if not await self.admin.delete(request.path_params["session_id"]):
            return JSONResponse({"error": "no such session"}, status_code=404)
        return Response(status_code=204)


class _CaptureHandler:
    def __init__(
        self,
        store: CallStore,
        engine: Engine,
        settings: CaptureSettings,
        clock: Callable[[], float],
        policy_version: Callable[[], int | None],
    ) -> None:
        self.store, self.engine, self.settings, self.clock = store, engine, settings, clock
        self.policy_version = policy_version
        # The chat template's end of an assistant turn, learned from the engine once:
        # (ids,) when known, (None,) when its renderings do not show it.
        self._closing: tuple[np.ndarray | None] | None = None

    # ---- model calls --------------------------------------------------------------

    async def model_call(self, request: Request, path: str) -> ASGIApp:
        route = detect(path, request.headers, request.query_params)
        if route is None:
            return _error(DIALECTS[answering_dialect(path, request.headers)], 404,
                          f"no route {path}", "not_found")
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
            messages_json = _encodable(payload)
            conversation = self._conversation(payload)
        except _ClientGone:
            return _NOTHING
        except _HttpError as exc:
            return _error(dialect, exc.status, exc.message, exc.kind)
        except AgentRequestError as exc:
            return _error(dialect, exc.status, exc.message, "invalid_request")
        except RecursionError:
            # A translator walking a nested value (a tool's schema) that JSON's own depth
            # limit let through.
            return _error(dialect, 400, "request nested too deeply", "invalid_request")

        ctx = ReplyContext(
            response_id=f"hr-{secrets.token_hex(16)}",
            created=int(self.clock()),
            model=call.request_model or self.settings.served_model,
            tool_namespaces=call.tool_namespaces,
        )
        try:
            admission = await self.store.admit(
                grant.session_id, conversation.prefixes() if conversation else ())
        except SessionGone:
            return _session_ended(dialect)
        if not admission.admitted:
            return self._reply(dialect, call, budget_stop(), ctx)
        admitted = _Admitted(grant.session_id, admission.call_index, route, call, payload,
                             messages_json,
                             is_auxiliary(grant.main_loop, call.request_model, call.body),
                             conversation, admission.base)
        if call.stream:
            return _Stream(self._stream(dialect, admitted, ctx),
                           media_type="text/event-stream", headers=_SSE_HEADERS)
        return _Delivery(self, dialect, admitted, ctx)

    def _conversation(self, payload: dict[str, Any]) -> Conversation | None:
        """The request's message digests, when its prompt may be stitched: not with
        stitching off, nor when the agent asked for a rendering of its own (echo, an
        open final message), which vLLM then makes from the messages."""
        if (not self.settings.stitch or payload.get("echo")
                or payload.get("continue_final_message")
                or payload.get("add_generation_prompt", True) is not True
                or not isinstance(payload.get("messages"), list)):
            return None
        return Conversation(payload["messages"], payload.get("tools"))

    async def _authenticate(self, request: Request) -> SessionGrant:
        key = extract_key(request.headers, request.query_params)
        grant = await self.store.authenticate(key) if key else None
        if grant is None:
            raise _HttpError("invalid or missing session key", status=401, kind="authentication")
        return grant

    async def _read_json(self, request: Request) -> dict[str, Any]:
        content_type = request.headers.get("content-type", "")
        if content_type.split(";")[0].strip().lower() != "application/json":
            raise _HttpError("content-type must be application/json", status=415,
                             kind="invalid_request")
        raw = await _read_body(request, self.settings.max_body_bytes)
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise _HttpError(
                f"request body is not valid JSON: {exc}", status=400, kind="invalid_request"
            ) from exc
        if not isinstance(body, dict):
            raise _HttpError("request body must be a JSON object", status=400,
                             kind="invalid_request")
        return body

    async def _count_tokens(
        self, dialect: Dialect, route: CallRoute, body: dict[str, Any]
    ) -> dict[str, Any]:
        call = count_call(route, body)
        payload = engine_body(call, self.settings.served_model)
        count = await self._engine_count(payload, _encodable(payload))
        return dialect.count_tokens_reply(count)

    async def _engine_count(self, payload: dict[str, Any], messages_json: bytes) -> int:
        """Ask the engine to count (vLLM's /tokenize); estimate if it cannot.

        The count is advisory (agents use it to manage context), never recorded.
        """
        request = {"model": payload["model"], "messages": payload["messages"]}
        try:
            reply = await self.engine.request("POST", "/tokenize", request)
            return int(reply["count"])
        except (EngineError, KeyError, TypeError, ValueError):
            return max(1, len(messages_json) // 4)

    async def _complete(self, admitted: _Admitted) -> _EngineReply:
        """The engine's answer to an admitted call. Every admitted call ends in exactly one
        record or release: here the release of one that produced nothing."""
        session_id, index = admitted.session_id, admitted.index
        started, version = self.clock(), self.policy_version()
        try:
            prompt = await self._prompt(admitted)
            reply = await self.engine.request("POST", "/v1/chat/completions", prompt.payload)
            completion = parse_engine_reply(reply)
        except EngineError:
            await self.store.release(session_id, index, "engine_error")
            raise
        except EngineReplyError as exc:
            await self.store.release(session_id, index, "engine_error")
            raise EngineError(f"engine reply unusable: {exc}", status=502) from exc
        except BaseException:
            # Cancelled (client went away) or a bug: the call produced no turn.
            await self._withdraw(admitted)
            raise
        message = (reply.get("choices") or [{}])[0].get("message") or {}
        return _EngineReply(completion, message, started, version,
                            prompt.checked(completion))

    async def _prompt(self, admitted: _Admitted) -> _Prompt:
        """The engine body: the stitched prompt ids in it when the call continues a
        recorded turn and the engine's renderings allow (else why not). Never raises
        but for cancellation: a failed stitch is a fallback, not a failed call."""
        base, payload = admitted.base, admitted.payload
        if base is None:
            return _Prompt(payload)
        messages = payload["messages"]
        if has_non_text_content(messages):
            return _Prompt.fallback(payload, base, Fallback.NON_TEXT_CONTENT)
        try:
            closing = await self._turn_closing(payload)
            if closing is None:
                return _Prompt.fallback(payload, base, Fallback.UNKNOWN_TURN_END)
            history, full = await asyncio.gather(
                self._tokenize(payload, messages[:base.messages], generation=False),
                self._tokenize(payload, messages, generation=True))
        except (EngineError, KeyError, TypeError, ValueError):
            return _Prompt.fallback(payload, base, Fallback.NO_TOKENIZE)
        ids = stitch(base, closing, history, full)
        if isinstance(ids, Fallback):
            return _Prompt.fallback(payload, base, ids)
        stitched = {**payload, "kv_transfer_params": {"prompt_token_ids": ids.tolist()}}
        return _Prompt(stitched, Continuation(base.turn, True), ids)

    async def _turn_closing(self, payload: dict[str, Any]) -> np.ndarray | None:
        """What the template puts after an assistant message (learned once, from a
        probe conversation rendered open and with an empty reply)."""
        if self._closing is None:
            probe: list[dict[str, Any]] = [{"role": "user", "content": "hi"}]
            open_ids, closed_ids = await asyncio.gather(
                self._tokenize(payload, probe, generation=True, tools=False),
                self._tokenize(payload, [*probe, {"role": "assistant", "content": ""}],
                               generation=False, tools=False))
            self._closing = (turn_closing(open_ids, closed_ids),)
        return self._closing[0]

    async def _tokenize(self, payload: dict[str, Any], messages: list[Any], *,
                        generation: bool, tools: bool = True) -> list[int]:
        """The engine's rendering of `messages` with the template the call uses."""
        request: dict[str, Any] = {"model": payload["model"], "messages": messages,
                                   "add_generation_prompt": generation}
        for key in ("tools", "chat_template_kwargs") if tools else ():
            if payload.get(key) is not None:
                request[key] = payload[key]
        tokens = (await self.engine.request("POST", "/tokenize", request))["tokens"]
        # Every id's type at C speed: a genexpr's frame per id was a visible share of a
        # host's CPU per call (two renderings of the whole conversation per stitched call).
        if not isinstance(tokens, list) or not set(map(type, tokens)) <= {int}:
            raise ValueError("/tokenize answered no token list")
        return tokens

    async def _record(self, admitted: _Admitted, reply: _EngineReply) -> None:
        """Keep the turn (before its reply leaves: a replica killed after answering must
        not take the turn with it); `SessionGone` if the session ended meanwhile."""
        completion = reply.completion
        await self.store.record(admitted.session_id, TurnRecord(
            index=admitted.index,
            dialect=admitted.route.dialect,
            prompt_ids=completion.prompt_ids,
            token_ids=completion.token_ids,
            logprobs=completion.logprobs,
            logprobs_mode=self.settings.logprobs_mode,
            sampling=TurnSampling.of(admitted.payload),
            finish_reason=completion.raw_finish_reason or completion.finish_reason,
            request_messages_json=admitted.messages_json,
            response_message_json=orjson.dumps(reply.message),
            request_model=admitted.call.request_model,
            not_forwarded=admitted.call.not_forwarded,
            started_at=reply.started,
            ended_at=self.clock(),
            policy_version_start=reply.version,
            policy_version_end=self.policy_version(),
            auxiliary=admitted.auxiliary,
            continuation=reply.continuation,
            conversation_key=b"" if admitted.conversation is None else extend(
                admitted.conversation.digest, {**reply.message, "role": "assistant"}),
        ))

    async def _withdraw(self, admitted: _Admitted) -> None:
        """Give back a call whose reply no agent received (and its turn, if recorded),
        whatever cancels the caller meanwhile; a session that ended has nothing to give."""
        with contextlib.suppress(SessionGone):
            await asyncio.shield(self.store.release(admitted.session_id, admitted.index))

    async def _generate(self, admitted: _Admitted) -> Completion:
        reply = await self._complete(admitted)
        try:
            await self._record(admitted, reply)
        except SessionGone:
            raise
        except BaseException:
            # Cancelled mid-record (the client left): the record may still land.
            await self._withdraw(admitted)
            raise
        return reply.completion

    async def _stream(
        self,
        dialect: Dialect,
        admitted: _Admitted,
        ctx: ReplyContext,
    ) -> AsyncIterator[bytes]:
        task = asyncio.ensure_future(self._generate(admitted))
        delivered = False
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
            except SessionGone:
                yield dialect.error_event(401, _SESSION_ENDED, "authentication")
                return
            for frame in dialect.render_stream(completion, ctx):
                yield frame
            # Asked for more after the last frame: the server took the whole stream.
            delivered = True
        finally:
            if not task.done():
                # The client disconnected while the engine worked: stop the upstream call
                # (which gives its slot back).
                task.cancel()
            elif not delivered and not task.cancelled() and task.exception() is None:
                # Recorded, but the stream was cut before its end reached the server.
                await self._withdraw(admitted)

    def _reply(
        self, dialect: Dialect, call: EngineCall, completion: Completion, ctx: ReplyContext
    ) -> Response:
        if call.stream:
            frames = dialect.render_stream(completion, ctx)
            return StreamingResponse(
                _iterate(frames), media_type="text/event-stream", headers=_SSE_HEADERS
            )
        return JSONResponse(dialect.render(completion, ctx))


@dataclass(frozen=True)
class _Admitted:
    """A model call that holds a slot of its session's budget."""

    session_id: str
    index: int
    route: CallRoute
    call: EngineCall
    payload: dict[str, Any]
    messages_json: bytes  # the payload's messages, encoded once for the record
    auxiliary: bool = False  # a side call (capture.core.auxiliary)
    conversation: Conversation | None = None  # None: its prompt is never stitched
    base: ContinuationBase | None = None  # the recorded turn it continues


@dataclass(frozen=True)
class _Prompt:
    """What the engine is sent for one call, and how its prompt came about."""

    payload: dict[str, Any]
    continuation: Continuation | None = None
    stitched_ids: np.ndarray | None = None

    @classmethod
    def fallback(cls, payload: dict[str, Any], base: ContinuationBase, why: Fallback
                 ) -> _Prompt:
        return cls(payload, Continuation(base.turn, False, why))

    def checked(self, completion: Completion) -> Continuation | None:
        """The continuation as it happened: an engine that rendered the messages
        itself (vLLM does for some requests) did not take the stitched prompt."""
        if self.stitched_ids is None or self.continuation is None or (
                completion.prompt_ids is not None
                and np.array_equal(completion.prompt_ids, self.stitched_ids)):
            return self.continuation
        return Continuation(self.continuation.turn, False, Fallback.ENGINE_IGNORED)


@dataclass(frozen=True)
class _EngineReply:
    completion: Completion
    message: dict[str, Any]  # the engine reply's message, as recorded
    started: float
    version: int | None  # the policy version when the call was forwarded
    continuation: Continuation | None = None


class _Stream(StreamingResponse):
    """A streamed answer whose generator is closed as soon as the response ends, however
    it ends, so that a stream cut by a disconnect gives its call back at once rather
    than whenever the abandoned generator is collected."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        except (ClientDisconnect, OSError):
            pass  # nobody left to tell (servers of ASGI 2.4 raise these for a closed socket)
        finally:
            await self.body_iterator.aclose()  # type: ignore[attr-defined]


class _Delivery:
    """The non-streamed answer to an admitted call, as an ASGI response: the engine call
    races the client's disconnect, and the turn counts only if the reply reaches the
    server while the client is there.

    Order: engine reply, record, send. A client gone before the reply is cancelled at
    the engine and its slot given back; one gone while the turn was recorded (a round
    trip to the session's owner in the cluster), or whose reply the server would not
    take (ASGI servers raise OSError for a closed connection), has the turn withdrawn.
    A disconnect after the server took the reply is not seen: like TCP, the proxy cannot
    tell it from a delivered one.
    """

    def __init__(self, handler: _CaptureHandler, dialect: Dialect, admitted: _Admitted,
                 ctx: ReplyContext) -> None:
        self._handler, self._dialect, self._admitted, self._ctx = handler, dialect, admitted, ctx

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler, admitted = self._handler, self._admitted
        work = asyncio.ensure_future(handler._complete(admitted))
        gone = asyncio.ensure_future(_disconnected(receive))
        recording = delivered = False
        try:
            done, _ = await asyncio.wait({work, gone}, return_when=asyncio.FIRST_COMPLETED)
            if gone in done and not _left(gone):
                await asyncio.wait({work})  # the server cannot tell: the engine alone decides
            if _left(gone):
                work.cancel()
                await asyncio.wait({work})
                if not work.cancelled() and work.exception() is None:
                    await handler._withdraw(admitted)  # finished as the client left
                return
            try:
                reply = work.result()
                recording = True
                await handler._record(admitted, reply)
            except EngineError as exc:
                response = _error(self._dialect, exc.status, exc.message, _engine_kind(exc))
            except SessionGone:
                recording = False  # nothing was kept
                response = _session_ended(self._dialect)
            else:
                if _left(gone):
                    return  # left while the turn was recorded: withdrawn below
                response = JSONResponse(self._dialect.render(reply.completion, self._ctx))
            await response(scope, receive, send)
            delivered = True
        except OSError:
            pass  # the server could not send it: the client is gone
        finally:
            gone.cancel()
            if not work.done():
                work.cancel()
            if recording and not delivered:
                await handler._withdraw(admitted)


async def _read_body(request: Request, limit: int) -> bytes:
    """The whole body, refused (413) past the limit before more of it is read."""
    declared = request.headers.get("content-length")
    if declared and declared.isdigit() and int(declared) > limit:
        raise _HttpError(f"request body exceeds {limit} bytes", status=413, kind="too_large")
    chunks, size = [], 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise _HttpError(f"request body exceeds {limit} bytes", status=413,
                                 kind="too_large")
            chunks.append(chunk)
    except ClientDisconnect as exc:
        # Clients leave mid-body routinely (a cancelled call); nobody is left to answer.
        raise _ClientGone from exc
    return b"".join(chunks)


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (its request body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _left(gone: asyncio.Future[None]) -> bool:
    """Whether `_disconnected` saw the client go (not whether it failed)."""
    return gone.done() and not gone.cancelled() and gone.exception() is None


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer to a client that has gone: none."""


_NOTHING: ASGIApp = _nothing
_SESSION_ENDED = "session has ended"


def _session_ended(dialect: Dialect) -> Response:
    return _error(dialect, 401, _SESSION_ENDED, "authentication")


def _encodable(payload: dict[str, Any]) -> bytes:
    """The payload's messages encoded (the record keeps them), once the whole payload is
    known to encode: JSON parses 1024 levels deep and integers of any size, the engine
    client's encoder only 254 levels and 64 bits. Refused here, before the call is
    admitted, rather than failing mid-call (a 500, or a stream cut after its 200)."""
    try:
        messages = orjson.dumps(payload["messages"])
        orjson.dumps({k: v for k, v in payload.items() if k != "messages"})
    except orjson.JSONEncodeError as exc:
        raise _HttpError(f"request cannot be forwarded: {exc} (nested too deeply, or "
                         "an integer beyond 64 bits)", status=400,
                         kind="invalid_request") from exc
    return messages


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
    if exc.status == 429:
        return "rate_limited"
    return "engine" if exc.status >= 500 else "invalid_request"


def _error(dialect: Dialect, status: int, message: str, kind: ErrorKind) -> JSONResponse:
    return JSONResponse(dialect.error_body(status, message, kind), status_code=status)
