"""Calling the capture app in this process as an ASGI server would, with a client that
can leave at any moment: while it sends its body, while the engine works, or never.

As ASGI servers of spec 2.4 do, a send after the client left raises OSError; a reply
counts as received only if its last body message was sent while the client was there.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import orjson

from harbor_ray.capture.proxy.app import CaptureApp


@dataclass
class Exchange:
    status: int | None = None
    body: bytearray = field(default_factory=bytearray)
    received: bool = False  # the whole reply reached the client

    def json(self) -> Any:
        return orjson.loads(bytes(self.body))


async def call(
    app: CaptureApp,
    path: str,
    body: bytes | dict[str, Any],
    *,
    key: str | None = None,
    method: str = "POST",
    headers: dict[str, str] | None = None,
    leave: asyncio.Event | None = None,
    leave_mid_body: bool = False,
) -> Exchange:
    """One request. `leave` set: the client disconnects; `leave_mid_body`: it sends half
    of its body and goes."""
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    all_headers = {
        "content-type": "application/json",
        "content-length": str(len(raw)),
        **({"authorization": f"Bearer {key}"} if key else {}),
        **(headers or {}),
    }
    path, _, query = path.partition("?")
    scope = {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query.encode(),
        "root_path": "",
        "headers": [(k.encode(), v.encode()) for k, v in all_headers.items()],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    leave = leave or asyncio.Event()
    done = asyncio.Event()
    out = Exchange()
    parts = [raw[: len(raw) // 2]] if leave_mid_body else [raw]

    async def receive() -> dict[str, Any]:
        if parts:
            chunk = parts.pop(0)
            return {"type": "http.request", "body": chunk, "more_body": leave_mid_body}
        if leave_mid_body:
            return {"type": "http.disconnect"}
        waits = [asyncio.ensure_future(leave.wait()), asyncio.ensure_future(done.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        if leave.is_set() or leave_mid_body:
            raise OSError("the client has gone")
        if message["type"] == "http.response.start":
            out.status = message["status"]
        elif message["type"] == "http.response.body":
            out.body += message.get("body", b"")
            if not message.get("more_body", False):
                out.received = True
                done.set()

    await app(scope, receive, send)
    return out
