"""How the capture app refuses a call: its two private signals, and the answers an agent
gets, always in its own dialect.

`_HttpError` carries a refusal the proxy makes itself (key, size, content type, JSON)
with its status; `_ClientGone` says the client left while its request was being read,
and gets no answer at all (`NOTHING`). The signals are raised and caught within the
capture app's modules only.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from harbor_ray.capture.core.dialects import Dialect
from harbor_ray.capture.core.dialects.base import ErrorKind
from harbor_ray.capture.proxy.fast_json import JSONResponse
from harbor_ray.errors import AgentCallError, EngineError

SESSION_ENDED = "session has ended"


class _HttpError(AgentCallError):
    """A call the proxy refuses itself (key, size, content type, JSON), with its status."""

    def __init__(self, message: str, *, status: int, kind: ErrorKind) -> None:
        self.status, self.message, self.kind = status, message, kind


class _ClientGone(AgentCallError):
    """The client disconnected while its request was being read."""


def error_reply(dialect: Dialect, status: int, message: str, kind: ErrorKind) -> JSONResponse:
    return JSONResponse(dialect.error_body(status, message, kind), status_code=status)


def session_ended(dialect: Dialect) -> JSONResponse:
    return error_reply(dialect, 401, SESSION_ENDED, "authentication")


def engine_error_kind(exc: EngineError) -> ErrorKind:
    """What an engine failure is to the agent: busy and overloaded ones are retryable."""
    if exc.status == 503:
        return "overloaded"
    if exc.status == 429:
        return "rate_limited"
    return "engine" if exc.status >= 500 else "invalid_request"


async def _nothing(scope: Scope, receive: Receive, send: Send) -> None:
    """The answer to a client that has gone: none."""


NOTHING: ASGIApp = _nothing
