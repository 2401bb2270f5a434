"""One model call through the capture app: authenticate the session key, translate the
agent's dialect, ask the session's owner to admit the call (budget), forward one
non-streamed request to the engine, and hand the turn to the owner.

Sessions live behind a `CallStore`, so the pipeline holds no per-session state. Every
admitted call ends in exactly one record or release: a call that produced no turn, or
whose reply no agent received, gives its budget slot back. How the answer reaches the
agent is delivery.py's.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import orjson
from starlette.requests import Request
from starlette.types import ASGIApp

from harbor_ray.capture.core.auxiliary import is_auxiliary
from harbor_ray.capture.core.budget import budget_stop
from harbor_ray.capture.core.completion import Completion, parse_engine_reply
from harbor_ray.capture.core.continuation import (
    Conversation,
    extend,
)
from harbor_ray.capture.core.count_tokens import count_call
from harbor_ray.capture.core.detect import CallRoute, answering_dialect, detect
from harbor_ray.capture.core.dialects import DIALECTS, Dialect
from harbor_ray.capture.core.dialects.base import ReplyContext
from harbor_ray.capture.core.models_list import models_reply
from harbor_ray.capture.core.normalize import engine_body
from harbor_ray.capture.core.policy_segments import compact, segments_from_spans
from harbor_ray.capture.core.sampling import TurnSampling
from harbor_ray.capture.core.session_keys import extract_key
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.admitted import Admitted, EngineReply
from harbor_ray.capture.proxy.delivery import Delivery, answered, streamed
from harbor_ray.capture.proxy.fast_json import JSONResponse
from harbor_ray.capture.proxy.hosted import HostedUpstream
from harbor_ray.capture.proxy.refusals import (
    NOTHING,
    _ClientGone,
    _HttpError,
    error_reply,
    session_ended,
)
from harbor_ray.capture.proxy.request_body import read_json_object
from harbor_ray.capture.proxy.session import CallStore, SessionGrant
from harbor_ray.capture.proxy.stitching import Stitcher
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.errors import AgentRequestError, EngineError, EngineReplyError, SessionGone

if TYPE_CHECKING:
    from harbor_ray.capture.proxy.settings import CaptureSettings

# A call the upstream refused with 429 and a Retry-After is sent again after that long,
# this many times at most, so that a hosted API's rate limit slows a run instead of
# failing its rows. A longer Retry-After, a 429 without one, or a 429 past the last
# retry reaches the agent as before (its own retries, then an engine_error row).
MAX_RATE_LIMIT_RETRIES = 5
MAX_RETRY_AFTER_S = 60.0


def rate_limit_wait(exc: EngineError, retried: int) -> float | None:
    """How long to wait before sending a call again that failed with `exc` after
    `retried` retries; None: do not."""
    wait = exc.retry_after_s
    if (
        exc.status != 429
        or wait is None
        or wait > MAX_RETRY_AFTER_S
        or retried >= MAX_RATE_LIMIT_RETRIES
    ):
        return None
    return wait


class CallPipeline:
    """The model calls of one app, over its session store and engine."""

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
        self._stitcher = Stitcher(engine)
        # A hosted API in its own format (hosted.py); None for an engine, whose calls
        # take no step more.
        self._hosted = engine if isinstance(engine, HostedUpstream) else None

    async def model_call(self, request: Request, path: str) -> ASGIApp:
        """The answer to a model call to `path` (below the app's mount point)."""
        route = detect(path, request.headers, request.query_params)
        if route is None:
            return error_reply(
                DIALECTS[answering_dialect(path, request.headers)],
                404,
                f"no route {path}",
                "not_found",
            )
        dialect = DIALECTS[route.dialect]
        if route.kind == "models":
            return JSONResponse(models_reply(route.dialect, self.settings.served_model))
        try:
            grant = await self._authenticate(request)
            body = await read_json_object(request, self.settings.max_body_bytes)
            if route.kind == "count_tokens":
                return JSONResponse(await self._count_tokens(dialect, route, body))
            call = dialect.to_engine(body, url_model=route.url_model, url_stream=route.url_stream)
            payload = engine_body(
                call, self.settings.served_model, grant.sampling, self.settings.capture
            )
            messages_json = _encodable(payload)
            conversation = self._conversation(payload)
            native = (
                None
                if self._hosted is None
                else self._hosted.prepare(route.dialect, body, call, payload)
            )
        except _ClientGone:
            return NOTHING
        except _HttpError as exc:
            return error_reply(dialect, exc.status, exc.message, exc.kind)
        except AgentRequestError as exc:
            return error_reply(dialect, exc.status, exc.message, "invalid_request")
        except RecursionError:
            # A translator walking a nested value (a tool's schema) that JSON's own depth
            # limit let through.
            return error_reply(dialect, 400, "request nested too deeply", "invalid_request")

        ctx = ReplyContext(
            response_id=f"hr-{secrets.token_hex(16)}",
            created=int(self.clock()),
            model=call.request_model or self.settings.served_model,
            tool_namespaces=call.tool_namespaces,
        )
        try:
            admission = await self.store.admit(
                grant.session_id, conversation.prefixes() if conversation else ()
            )
        except SessionGone:
            return session_ended(dialect)
        if not admission.admitted:
            return answered(dialect, call, budget_stop(), ctx)
        admitted = Admitted(
            grant.session_id,
            admission.call_index,
            route,
            call,
            payload,
            messages_json,
            is_auxiliary(grant.main_loop, call.request_model, call.body),
            conversation,
            admission.base,
            native,
        )
        if call.stream:
            return streamed(self, dialect, admitted, ctx)
        return Delivery(self, dialect, admitted, ctx)

    def _conversation(self, payload: dict[str, Any]) -> Conversation | None:
        """The request's message digests, when its prompt may be stitched: not with
        stitching off or below the `tokens` capture level (a stitch is made of ids), nor
        when the agent asked for a rendering of its own (echo, an open final message),
        which vLLM then makes from the messages."""
        if (
            not self.settings.stitch
            or self.settings.capture != "tokens"
            or payload.get("echo")
            or payload.get("continue_final_message")
            or payload.get("add_generation_prompt", True) is not True
            or not isinstance(payload.get("messages"), list)
        ):
            return None
        return Conversation(payload["messages"], payload.get("tools"))

    async def _authenticate(self, request: Request) -> SessionGrant:
        key = extract_key(request.headers, request.query_params)
        grant = await self.store.authenticate(key) if key else None
        if grant is None:
            raise _HttpError("invalid or missing session key", status=401, kind="authentication")
        return grant

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

    async def complete(self, admitted: Admitted) -> EngineReply:
        """The engine's answer to an admitted call; here the release of one that
        produced nothing."""
        session_id, index = admitted.session_id, admitted.index
        started, version = self.clock(), self.policy_version()
        prompt = None
        retries = 0
        try:
            while True:
                try:
                    if admitted.native is not None and self._hosted is not None:
                        reply = await self._hosted.send(admitted.native)
                    else:
                        prompt = await self._stitcher.prompt(admitted.payload, admitted.base)
                        reply = await self.engine.request(
                            "POST", "/v1/chat/completions", prompt.payload, session=session_id
                        )
                    break
                except EngineError as exc:
                    if (wait := rate_limit_wait(exc, retries)) is None:
                        raise
                    retries += 1
                    await asyncio.sleep(wait)
            completion = parse_engine_reply(reply)
        except EngineError:
            await self.store.release(session_id, index, "engine_error")
            raise
        except EngineReplyError as exc:
            await self.store.release(session_id, index, "engine_error")
            raise EngineError(f"engine reply unusable: {exc}", status=502) from exc
        except BaseException:
            # Cancelled (client went away) or a bug: the call produced no turn.
            await self.withdraw(admitted)
            raise
        message = (reply.get("choices") or [{}])[0].get("message") or {}
        return EngineReply(
            completion,
            message,
            started,
            version,
            None if prompt is None else prompt.checked(completion),
            retries,
        )

    async def record(self, admitted: Admitted, reply: EngineReply) -> None:
        """Keep the turn (before its reply leaves: a replica killed after answering must
        not take the turn with it); `SessionGone` if the session ended meanwhile."""
        completion, level = reply.completion, self.settings.capture
        # What the level records and no more: an agent that asked for logprobs itself
        # gets them, but a `text` capture does not keep them.
        await self.store.record(
            admitted.session_id,
            TurnRecord(
                index=admitted.index,
                dialect=admitted.route.dialect,
                prompt_ids=completion.prompt_ids if level == "tokens" else None,
                token_ids=completion.token_ids if level == "tokens" else None,
                logprobs=completion.logprobs if level != "text" else None,
                capture_level=level,
                prompt_tokens=completion.prompt_tokens,
                completion_tokens=completion.completion_tokens,
                logprobs_mode=self.settings.logprobs_mode,
                sampling=TurnSampling.of(admitted.payload),
                finish_reason=completion.raw_finish_reason or completion.finish_reason,
                request_messages_json=admitted.messages_json,
                response_message_json=orjson.dumps(reply.message),
                request_model=admitted.call.request_model,
                # Sent as it came to a hosted API, nothing was left out.
                not_forwarded=(
                    ()
                    if admitted.native is not None and admitted.native.as_sent
                    else admitted.call.not_forwarded
                ),
                started_at=reply.started,
                ended_at=self.clock(),
                policy_version_start=reply.version,
                policy_version_end=self.policy_version(),
                policy_segments=compact(
                    segments_from_spans(completion.weight_versions, reply.version), reply.version
                ),
                auxiliary=admitted.auxiliary,
                continuation=reply.continuation,
                upstream_retries=reply.retries,
                conversation_key=b""
                if admitted.conversation is None
                else extend(admitted.conversation.digest, {**reply.message, "role": "assistant"}),
            ),
        )

    async def withdraw(self, admitted: Admitted) -> None:
        """Give back a call whose reply no agent received (and its turn, if recorded),
        whatever cancels the caller meanwhile; a session that ended has nothing to give."""
        with contextlib.suppress(SessionGone):
            await asyncio.shield(self.store.release(admitted.session_id, admitted.index))

    async def generate(self, admitted: Admitted) -> Completion:
        """The engine's completion, recorded (a streamed call's: its frames follow)."""
        reply = await self.complete(admitted)
        try:
            await self.record(admitted, reply)
        except SessionGone:
            raise
        except BaseException:
            # Cancelled mid-record (the client left): the record may still land.
            await self.withdraw(admitted)
            raise
        return reply.completion


def _encodable(payload: dict[str, Any]) -> bytes:
    """The payload's messages encoded (the record keeps them), once the whole payload is
    known to encode: JSON parses 1024 levels deep and integers of any size, the engine
    client's encoder only 254 levels and 64 bits. Refused here, before the call is
    admitted, rather than failing mid-call (a 500, or a stream cut after its 200)."""
    try:
        messages = orjson.dumps(payload["messages"])
        orjson.dumps({k: v for k, v in payload.items() if k != "messages"})
    except orjson.JSONEncodeError as exc:
        raise _HttpError(
            f"request cannot be forwarded: {exc} (nested too deeply, or an integer beyond 64 bits)",
            status=400,
            kind="invalid_request",
        ) from exc
    return messages
