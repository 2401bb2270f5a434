"""A bounded request head for uvicorn's httptools protocol, the one our servers run.

httptools puts no limit on a request's URL or headers, and uvicorn adds none (h11's
16 KiB applies to h11 only): one client without a key sending a 100 MB header kept the
server's loop busy for seconds (httptools grows a header by concatenation while it
arrives) and held ~200 MB for the connection. This protocol counts the head as it is
read and, once a limit is passed, answers 414 (the URL) or 431 (the request line and
headers together) and closes the connection: without reading the rest, and before the
app (authentication included) sees the request.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from typing import Any

import orjson
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

_REASONS = {414: "the URL is too long", 431: "the request headers are too large"}


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """`HttpToolsProtocol` that refuses a request head past `max_url_bytes` (URL) or
    `max_header_bytes` (URL and headers)."""

    def __init__(
        self, *args: Any, max_url_bytes: int, max_header_bytes: int, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self._max_url, self._max_head = max_url_bytes, max_header_bytes
        # Bytes received while the current request's head is read: an upper bound of the
        # head so far (a chunk may end the head and start the body).
        self._head_bytes = 0
        self._in_head = True
        self._refused: int | None = None

    def data_received(self, data: bytes) -> None:
        if self._refused is not None:
            return
        if self._in_head:
            self._head_bytes += len(data)
        super().data_received(data)
        if self._refused is None and self._in_head:
            self._refused = self._over_limit(self._head_bytes)
        if self._refused is not None and not self.transport.is_closing():
            self._refuse(self._refused)

    # Parser callbacks: once refused, the rest of the chunk being parsed is ignored.

    def on_message_begin(self) -> None:
        if self._refused is None:
            super().on_message_begin()
            self._in_head, self._head_bytes = True, 0

    def on_url(self, url: bytes) -> None:
        if self._refused is None:
            super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        if self._refused is None:
            super().on_header(name, value)

    def on_headers_complete(self) -> None:
        if self._refused is not None:
            return
        self._in_head = False
        exact = len(self.url) + sum(len(name) + len(value) + 4 for name, value in self.headers)
        self._refused = self._over_limit(exact)
        if self._refused is None:
            super().on_headers_complete()

    def on_body(self, body: bytes) -> None:
        if self._refused is None:
            super().on_body(body)

    def on_message_complete(self) -> None:
        if self._refused is None:
            super().on_message_complete()

    def _over_limit(self, head_bytes: int) -> int | None:
        if len(getattr(self, "url", b"")) > self._max_url:
            return 414
        return 431 if head_bytes > self._max_head else None

    def _refuse(self, status: int) -> None:
        body = orjson.dumps({"error": {"message": _REASONS[status], "code": status}})
        self.transport.write(
            b"".join(
                [
                    STATUS_LINE[status],
                    b"content-type: application/json\r\n",
                    b"content-length: %d\r\n" % len(body),
                    b"connection: close\r\n\r\n",
                    body,
                ]
            )
        )
        self.transport.close()


def bounded_protocol(max_url_bytes: int, max_header_bytes: int) -> Callable[..., asyncio.Protocol]:
    """What uvicorn's `Config(http=...)` takes: it makes a protocol per connection."""
    return functools.partial(
        BoundedHttpToolsProtocol, max_url_bytes=max_url_bytes, max_header_bytes=max_header_bytes
    )
