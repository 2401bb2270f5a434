"""Requests that are not model calls but that agents send before their first one.

- A websocket upgrade (codex asks for one on `/v1/responses` before every session).
  It is refused with 426 Upgrade Required, the one answer after which codex falls back
  to HTTP at once: to 403, 404, 405 and 501 (and to a handshake accepted and then
  closed) it retries the websocket several times with backoff first, seconds before its
  first model call. The refusal goes out as an HTTP response through the ASGI
  "websocket.http.response" extension (uvicorn has it); a server without it can only
  be told to close, which it answers with 403. A server that hands the upgrade over as
  a plain HTTP request gets the same 426.
- `HEAD` on any path and `GET /` (claude-code probes `HEAD /` for connectivity): 200,
  before authentication, like `/health`. They say nothing about sessions.
"""

from __future__ import annotations

import orjson
from starlette.datastructures import Headers
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from harbor_ray.capture.core.detect import answering_dialect
from harbor_ray.capture.core.dialects import DIALECTS

UPGRADE_REFUSED = "websocket transport is not supported by this proxy: send the request over HTTP"
_UPGRADE_STATUS = 426


def is_upgrade(scope: Scope) -> bool:
    """An HTTP request asking to become a websocket (a server without websocket
    support passes it on as one)."""
    return Headers(scope=scope).get("upgrade", "").lower() == "websocket"


def _refusal_body(path: str, scope: Scope) -> bytes:
    """The 426's body, in the caller's dialect."""
    dialect = DIALECTS[answering_dialect(path, Headers(scope=scope))]
    return orjson.dumps(dialect.error_body(_UPGRADE_STATUS, UPGRADE_REFUSED, "invalid_request"))


async def refuse_websocket(path: str, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer a websocket scope with a 426 (or a close where the server cannot)."""
    if (await receive())["type"] != "websocket.connect":
        return  # the client went away before its handshake reached the app
    if "websocket.http.response" not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": 1008})
        return
    body = _refusal_body(path, scope)
    await send(
        {
            "type": "websocket.http.response.start",
            "status": _UPGRADE_STATUS,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
            ],
        }
    )
    await send({"type": "websocket.http.response.body", "body": body})


def http_upgrade_refused(path: str, scope: Scope) -> Response:
    return Response(
        _refusal_body(path, scope), status_code=_UPGRADE_STATUS, media_type="application/json"
    )


def probe_answer(scope: Scope, path: str) -> Response | None:
    """200 to a connectivity probe, None for anything else."""
    if scope["method"] == "HEAD":
        return Response(status_code=200)
    if scope["method"] == "GET" and path == "/":
        return Response(b'{"status":"ok"}', media_type="application/json")
    return None
