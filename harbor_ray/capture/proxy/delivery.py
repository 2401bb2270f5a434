"""Delivering an admitted call's answer to its client, streamed or not, and counting the
call only if the answer reached the server while the client was there.

A call is delivered once its reply's last byte was handed to the server. A client gone
before that has its engine call cancelled and its budget slot given back, and a turn
recorded just before is withdrawn. A disconnect after the server took the reply is not
seen: like TCP, the proxy cannot tell it from a delivered one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from typing import Any

from starlette.requests import ClientDisconnect
from starlette.responses import Response, StreamingResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from harbor_ray.capture.core.completion import Completion
from harbor_ray.capture.core.dialects import Dialect
from harbor_ray.capture.core.dialects.base import EngineCall, ReplyContext
from harbor_ray.capture.proxy.admitted import Admitted, CallSteps
from harbor_ray.capture.proxy.fast_json import JSONResponse
from harbor_ray.capture.proxy.refusals import (
    SESSION_ENDED,
    engine_error_kind,
    error_reply,
    session_ended,
)
from harbor_ray.errors import EngineError, SessionGone

_SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def streamed(
    pipeline: CallSteps, dialect: Dialect, admitted: Admitted, ctx: ReplyContext
) -> ASGIApp:
    """The streamed answer to an admitted call: keep-alives while the engine works, then
    the reply's frames (or an error event; the 200 went out with the first keep-alive).
    An engine that refuses the call before the first keep-alive was due is answered with
    its own status, as an API answers a bad request before its stream starts: agents
    read a 4xx, where many take an error event in a 200 stream for a cut stream and
    retry the same request."""

    async def answer(scope: Scope, receive: Receive, send: Send) -> None:
        task = asyncio.ensure_future(pipeline.generate(admitted))
        delivered = asyncio.Event()
        try:
            gone = asyncio.ensure_future(_disconnected(receive))
            try:
                await asyncio.wait(
                    {task, gone},
                    timeout=pipeline.settings.keepalive_s,
                    return_when=asyncio.FIRST_COMPLETED,
                )
            finally:
                gone.cancel()
            if _left(gone):  # before anything was sent: as a stream cut at its start
                return
            refused = _refusal(dialect, task) if task.done() else None
            if refused is not None:
                await refused(scope, receive, send)
                return
            await _ClosingStream(
                _frames(pipeline, dialect, ctx, task, delivered),
                media_type="text/event-stream",
                headers=_SSE_HEADERS,
            )(scope, receive, send)
        finally:
            if not task.done():
                # The client left while the engine worked: stop the upstream call (which
                # gives its slot back).
                task.cancel()
                await asyncio.wait({task})
            if not delivered.is_set() and not task.cancelled() and task.exception() is None:
                # Recorded, but the stream was cut before its end reached the server.
                await pipeline.withdraw(admitted)

    return answer


def _refusal(dialect: Dialect, task: asyncio.Future[Any]) -> Response | None:
    """The error answer for an engine call that failed before its stream began."""
    if task.cancelled():
        return None
    exc = task.exception()
    if isinstance(exc, EngineError):
        return error_reply(dialect, exc.status, exc.message, engine_error_kind(exc))
    if isinstance(exc, SessionGone):
        return session_ended(dialect)
    return None


def answered(
    dialect: Dialect, call: EngineCall, completion: Completion, ctx: ReplyContext
) -> Response:
    """A completion the engine did not make (the budget's stop), as the call asked."""
    if call.stream:
        return StreamingResponse(
            _iterate(dialect.render_stream(completion, ctx)),
            media_type="text/event-stream",
            headers=_SSE_HEADERS,
        )
    return JSONResponse(dialect.render(completion, ctx))


async def _frames(
    pipeline: CallSteps,
    dialect: Dialect,
    ctx: ReplyContext,
    task: asyncio.Future[Any],
    delivered: asyncio.Event,
) -> AsyncIterator[bytes]:
    """Keep-alives until the engine answers, then its reply's frames or an error event;
    `delivered` once the server asked for more after the last frame (it took them all)."""
    while not task.done():
        done, _ = await asyncio.wait({task}, timeout=pipeline.settings.keepalive_s)
        if not done:
            yield dialect.keepalive
    try:
        completion = task.result()
    except EngineError as exc:
        yield dialect.error_event(exc.status, exc.message, engine_error_kind(exc))
        return
    except SessionGone:
        yield dialect.error_event(401, SESSION_ENDED, "authentication")
        return
    for frame in dialect.render_stream(completion, ctx):
        yield frame
    delivered.set()


class _ClosingStream(StreamingResponse):
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


class Delivery:
    """The non-streamed answer to an admitted call, as an ASGI response: the engine call
    races the client's disconnect, and the turn counts only if the reply reaches the
    server while the client is there.

    Order: engine reply, record, send. A client gone before the reply is cancelled at
    the engine and its slot given back; one gone while the turn was recorded (a round
    trip to the session's owner in the cluster), or whose reply the server would not
    take (ASGI servers raise OSError for a closed connection), has the turn withdrawn.
    """

    def __init__(
        self, pipeline: CallSteps, dialect: Dialect, admitted: Admitted, ctx: ReplyContext
    ) -> None:
        self._pipeline, self._dialect, self._admitted, self._ctx = (
            pipeline,
            dialect,
            admitted,
            ctx,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        pipeline, admitted = self._pipeline, self._admitted
        work = asyncio.ensure_future(pipeline.complete(admitted))
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
                    await pipeline.withdraw(admitted)  # finished as the client left
                return
            try:
                reply = work.result()
                recording = True
                await pipeline.record(admitted, reply)
            except EngineError as exc:
                response = error_reply(
                    self._dialect, exc.status, exc.message, engine_error_kind(exc)
                )
            except SessionGone:
                recording = False  # nothing was kept
                response = session_ended(self._dialect)
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
                await pipeline.withdraw(admitted)


async def _disconnected(receive: Receive) -> None:
    """Return once the client has gone (its request body was read before)."""
    while (await receive())["type"] != "http.disconnect":
        pass


def _left(gone: asyncio.Future[None]) -> bool:
    """Whether `_disconnected` saw the client go (not whether it failed)."""
    return gone.done() and not gone.cancelled() and gone.exception() is None


async def _iterate(frames: Iterable[bytes]) -> AsyncIterator[bytes]:
    for frame in frames:
        yield frame
