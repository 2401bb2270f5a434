"""A lean keep-alive HTTP/1.1 client for one origin: the engine call on the hot path.

The engine is one origin answering with Content-Length or chunked bodies, so one asyncio
Protocol per connection feeding httptools (llhttp, as uvicorn does) and a stack of idle
connections is all the client needs; a general client's machinery cost a large share of
the proxy's CPU (docs/performance.md, "The engine client").

Left out because the engine never needs them: HEAD, 1xx and Upgrade responses, bodies
delimited by the server closing the connection, redirects, proxies, streaming. Header
names and values, and paths, are the caller's own and are sent as given.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from collections.abc import Mapping
from typing import NamedTuple, cast
from urllib.parse import urlsplit

import httptools

from harbor_ray.errors import EngineCallError, EngineConnectError, EngineProtocolError, Http1Timeout

# The port an engine URL that names none is reached at, by its scheme: the one place that
# decides it, so that what checks or hides a URL's host:port sees the port connected to.
DEFAULT_PORTS = {"http": 80, "https": 443}


class Answer(NamedTuple):
    """One response: its status, its whole body, and its Retry-After header's value
    (None without one), by which a rate-limited upstream says when to ask again."""

    status: int
    body: bytes
    retry_after: str | None = None


class _Stale(EngineCallError):
    """The connection closed before any byte of the answer. On a reused connection that is
    the server having closed it while idle (a race with its keep-alive timeout), so the
    request can be sent again on a fresh one."""


class _Connection(asyncio.Protocol):
    """One connection carrying one request at a time; httptools calls the `on_*` methods."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._parser = httptools.HttpResponseParser(self)
        self._answer: asyncio.Future[Answer] | None = None
        self._chunks: list[bytes] = []
        self._retry_after: str | None = None
        self._answered = False
        self.transport: asyncio.Transport
        self.lost: asyncio.Future[None] = loop.create_future()
        self.keep_alive = False
        self.idle_since = 0.0

    def send(self, data: bytes) -> asyncio.Future[Answer]:
        self._answer = answer = self._loop.create_future()
        self._chunks = []
        self._retry_after = None
        self._answered = self.keep_alive = False
        self.transport.write(data)
        return answer

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._answered = True
        try:
            self._parser.feed_data(data)
        except (httptools.HttpParserError, httptools.HttpParserUpgrade) as exc:
            self._fail(EngineProtocolError(f"malformed response: {exc}"))
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(
            EngineProtocolError("connection closed mid-response") if self._answered else _Stale()
        )
        if not self.lost.done():
            self.lost.set_result(None)

    def on_message_begin(self) -> None:
        if self._answer is None or self._answer.done():
            # An answer nobody asked for (e.g. a 408 on an idle connection): the stream
            # is out of step, and raising here makes data_received drop the connection.
            raise EngineProtocolError("unsolicited response")

    def on_header(self, name: bytes, value: bytes) -> None:
        # The one header a caller reads; a name's case is the server's.
        if len(name) == 11 and name.lower() == b"retry-after":
            self._retry_after = value.decode("latin-1").strip()

    def on_body(self, body: bytes) -> None:
        self._chunks.append(body)

    def on_message_complete(self) -> None:
        answer = self._answer
        if answer is not None and not answer.done():
            self.keep_alive = self._parser.should_keep_alive()
            answer.set_result(
                Answer(self._parser.get_status_code(), b"".join(self._chunks), self._retry_after)
            )
        self._chunks = []

    def _fail(self, exc: Exception) -> None:
        if self._answer is not None and not self._answer.done():
            self._answer.set_exception(exc)


class Http1Pool:
    """Keep-alive connections to one `http(s)://host:port[/prefix]` origin.

    At most `max_connections` requests are in flight, and a connection is opened only
    when no idle one is left, so that is also the bound on open connections. Idle ones
    are reused newest first (the oldest are the likeliest to be closed by the server)
    and dropped after `idle_s`: vLLM's uvicorn closes idle connections after 5 s.
    """

    def __init__(
        self,
        url: str,
        *,
        max_connections: int = 1024,
        timeout_s: float = 600.0,
        ssl_context: ssl.SSLContext | None = None,
        idle_s: float = 4.0,
    ) -> None:
        parts = urlsplit(url)
        if parts.scheme not in DEFAULT_PORTS or not parts.hostname:
            raise EngineConnectError(
                f"expected http(s)://host[:port][/prefix], got {url!r}: "
                "give the engine's URL with its scheme"
            )
        tls = parts.scheme == "https"
        default_port = DEFAULT_PORTS[parts.scheme]
        self._host = parts.hostname
        self._port = parts.port or default_port
        self._ssl = (ssl_context or ssl.create_default_context()) if tls else None
        self._prefix = parts.path.rstrip("/")
        host = f"[{self._host}]" if ":" in self._host else self._host
        self._host_line = host if self._port == default_port else f"{host}:{self._port}"
        self._timeout_s = timeout_s
        self._idle_s = idle_s
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: deque[_Connection] = deque()
        self._closed = False

    async def request(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, bytes]:
        """Send one request (`path` below the URL's prefix) and return the status and the
        whole body. Error statuses are returned, not raised; failures raise `Http1Error`."""
        answer = await self.exchange(method, path, body, headers)
        return answer.status, answer.body

    async def exchange(
        self,
        method: str,
        path: str,
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> Answer:
        """`request`'s answer with its Retry-After header."""
        assert not self._closed, "a request on a closed Http1Pool"
        assert method != "HEAD", "HEAD is not supported: its answer would be read as having a body"
        head = f"{method} {self._prefix}{path} HTTP/1.1\r\nHost: {self._host_line}\r\n"
        if body is not None:
            head += f"Content-Length: {len(body)}\r\n"
        if headers:
            head += "".join(f"{name}: {value}\r\n" for name, value in headers.items())
        data = (head + "\r\n").encode("latin-1")
        if body:
            data += body
        try:
            async with asyncio.timeout(self._timeout_s), self._slots:
                return await self._send(data)
        except TimeoutError as exc:
            raise Http1Timeout(f"{method} {path} took over {self._timeout_s}s") from exc

    async def aclose(self) -> None:
        """Close the idle connections; those in use close when their request ends."""
        self._closed = True
        idle, self._idle = list(self._idle), deque()
        for conn in idle:
            conn.transport.abort()
        await asyncio.gather(*(conn.lost for conn in idle))

    async def _send(self, data: bytes) -> Answer:
        conn = self._pop_idle()
        if conn is not None:
            try:
                return await self._exchange(conn, data)
            except _Stale:
                pass
        conn = await self._connect()
        try:
            return await self._exchange(conn, data)
        except _Stale:
            raise EngineProtocolError("connection closed before any response") from None

    async def _exchange(self, conn: _Connection, data: bytes) -> Answer:
        try:
            answer = await conn.send(data)
        except BaseException:
            # Failed or cancelled mid-request: what is left on the wire belongs to no one.
            conn.transport.abort()
            raise
        if conn.keep_alive and not self._closed and not conn.transport.is_closing():
            conn.idle_since = now = asyncio.get_running_loop().time()
            self._idle.append(conn)
            self._prune(now)
        else:
            conn.transport.close()
        return answer

    def _pop_idle(self) -> _Connection | None:
        expired = asyncio.get_running_loop().time() - self._idle_s
        while self._idle:
            conn = self._idle.pop()
            if conn.idle_since > expired and not conn.transport.is_closing():
                return conn
            conn.transport.close()
        return None

    def _prune(self, now: float) -> None:
        """Drop the oldest idle connections once expired or closed by the server, so a
        busy pool that only ever reuses the newest does not keep the dead below them."""
        idle, expired = self._idle, now - self._idle_s
        while idle and (idle[0].idle_since <= expired or idle[0].transport.is_closing()):
            idle.popleft().transport.close()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        conn = _Connection(loop)
        try:
            await loop.create_connection(
                lambda: conn,
                self._host,
                self._port,
                ssl=self._ssl,
                server_hostname=self._host if self._ssl else None,
            )
        except OSError as exc:
            raise EngineConnectError(f"cannot connect to {self._host}:{self._port}: {exc}") from exc
        return conn
