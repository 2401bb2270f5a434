"""The inference engine behind a one-method seam, and the real HTTP client for it.

The hot path uses `Http1Pool` (http1.py): httpx's AsyncClient collapses under
concurrency, and aiohttp's client, which holds up, still costs several times the pool's
CPU per call (docs/performance.md, "The engine client").

Errors from the engine side form one family, `EngineError`, carrying the status the
agent should see: 502/503/504 (retryable) when the engine failed or is unreachable,
429 (retryable) when the engine is too busy, 400 when it rejected the request itself
(retrying would not help).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any, Protocol

import orjson

from harbor_ray.capture.proxy.http1 import Http1Pool
from harbor_ray.errors import EngineConnectError, EngineError, Http1Error, Http1Timeout

_JSON = {"content-type": "application/json"}


SESSION_HEADER = "x-session-id"
"""Names the capture session a call belongs to: Ray Serve's session header (its
`SERVE_SESSION_ID` default), which a session-affine engine (harbor_ray/engine/routing.py)
routes on, so a session's calls reach the replica holding its prefix."""


class Engine(Protocol):
    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> dict[str, Any]:
        """Send one request (path below the API root, e.g. `/v1/chat/completions`) for
        `session` (None: no session's call, e.g. a count or a probe)."""
        ...


def engine_status_error(status: int, detail: str, retry_after: str | None = None) -> EngineError:
    """The error for an engine that answered `status`: its 5xx is the agent's 502
    (retry), its 429 the agent's 429 (too busy now: retry later, after `retry_after`
    when it said, which the proxy may do itself: pipeline.py), any other 4xx the agent's
    400 (the request itself was refused; retrying won't help).
    """
    agent_status = 502 if status >= 500 else 429 if status == 429 else 400
    return EngineError(
        f"engine answered {status}: {detail}",
        status=agent_status,
        retry_after_s=retry_after_seconds(retry_after) if status == 429 else None,
    )


def retry_after_seconds(value: str | None) -> float | None:
    """A Retry-After header's delay in seconds; None for none, or for the HTTP-date
    form (no hosted API we reach sends it, and reading it would need a clock here)."""
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return seconds if 0 <= seconds < float("inf") else None


DEFAULT_ENGINE_TIMEOUT_S = 600.0


def api_root(url: str) -> str:
    """Accept `http://host:port` or `http://host:port/v1` for the same engine."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


class HttpEngine:
    """The engine over HTTP, through a keep-alive pool (`Http1Pool`) made on first use
    inside the loop that serves requests (a pool never outlives its loop) and closed by
    `aclose` (the app's lifespan)."""

    def __init__(
        self,
        url: str,
        *,
        timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S,
        max_connections: int = 1024,
        headers: Mapping[str, str] | None = None,
    ) -> None:
        self.root = api_root(url)
        # Made once: a hosted upstream's credential headers ride on every request, and
        # an engine without them keeps the hot path's plain JSON header.
        self._get_headers = dict(headers) if headers else None
        self._post_headers = {**_JSON, **(headers or {})}
        self._timeout_s = timeout_s
        self._max_connections = max_connections
        self._pool: Http1Pool | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def _connections(self) -> Http1Pool:
        loop = asyncio.get_running_loop()
        if self._pool is None or self._loop is not loop:
            self._pool = Http1Pool(
                self.root, max_connections=self._max_connections, timeout_s=self._timeout_s
            )
            self._loop = loop
        return self._pool

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> dict[str, Any]:
        data = orjson.dumps(body) if body is not None else None
        try:
            status, raw, retry_after = await self._connections().exchange(
                method, path, data, self._headers(data is not None, session)
            )
        except Http1Timeout as exc:
            raise EngineError(f"engine timed out on {path}", status=504) from exc
        except EngineConnectError as exc:
            raise EngineError(f"engine unreachable at {self.root}: {exc}", status=503) from exc
        except Http1Error as exc:
            raise EngineError(f"engine request failed: {exc}", status=502) from exc
        if status >= 400:
            raise engine_status_error(status, _error_detail(raw), retry_after)
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise EngineError(f"engine answered non-JSON on {path}", status=502) from exc
        if not isinstance(value, dict):
            raise EngineError(f"engine answered a non-object on {path}", status=502)
        return value

    def _headers(self, post: bool, session: str | None) -> dict[str, str] | None:
        headers = self._post_headers if post else self._get_headers
        if session is None:
            return headers
        return {**(headers or {}), SESSION_HEADER: session}

    async def aclose(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.aclose()


def _error_detail(raw: bytes) -> str:
    text = raw.decode(errors="replace")
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return text[:300]
    if isinstance(body, dict):
        error = body.get("error", body)
        if isinstance(error, dict):
            return str(error.get("message") or error)[:300]
        return str(error)[:300]
    return text[:300]
