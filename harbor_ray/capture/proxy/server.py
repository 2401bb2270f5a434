"""Serving the capture app on a socket that is provably ours.

docs/lessons.md: a liveness probe that connected to whoever held the port, while the real
bind error died on a background thread, produced 401s and rollouts with zero model
calls. So the socket is bound before the server starts, in the caller's thread
(`harbor_ray.listening`: a taken port fails loudly, at once), and readiness is confirmed
by the app's own instance id, not by "something answered".
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, Literal

import httpx
import uvicorn
import uvloop

from harbor_ray.capture.proxy.app import CaptureApp
from harbor_ray.capture.proxy.head_limit import bounded_protocol
from harbor_ray.capture.proxy.heap import freeze_startup_heap
from harbor_ray.errors import ServeError
from harbor_ray.host_names import is_loopback
from harbor_ray.listening import base_url

# The lifespan modes uvicorn.Config takes.
Lifespan = Literal["auto", "on", "off"]


def check_exposure(host: str, admin_key: str | None) -> None:
    """Session-management routes must not be open to the network."""
    if admin_key is None and not is_loopback(host):
        raise ServeError(
            f"refusing to bind {host} without an admin key: anyone who can reach it could "
            "mint and read sessions. Pass --admin-key, or bind 127.0.0.1."
        )


async def serve(
    app: CaptureApp,
    sock: socket.socket,
    *,
    on_ready: Callable[[str], Awaitable[None] | None] | None = None,
    stop: asyncio.Event | None = None,
    log_level: str = "warning",
    lifespan: Lifespan = "on",
) -> None:
    """Run until signalled, cancelled or `stop` is set; call `on_ready(url)` once the app
    answers as itself. Shutdown is graceful (lifespan end runs, unless `lifespan` is
    "off" because another server runs the same app's) and bounded."""
    server = uvicorn.Server(server_config(app, log_level=log_level, lifespan=lifespan))
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    url = base_url(sock)
    try:
        await _wait_until_ours(url, app.state.instance_id, serving)
        if on_ready is not None:
            result = on_ready(url)
            if asyncio.iscoroutine(result):
                await result
        if stop is None:
            await serving
        else:
            stopped = asyncio.create_task(stop.wait())
            await asyncio.wait({serving, stopped}, return_when=asyncio.FIRST_COMPLETED)
            stopped.cancel()
    finally:
        server.should_exit = True
        if not serving.done():
            await asyncio.wait({serving}, timeout=10)


def server_config(
    app: CaptureApp, *, log_level: str = "warning", lifespan: Lifespan = "on"
) -> uvicorn.Config:
    """How every server of the capture app runs: its request heads bounded by the app's
    settings while they are read (head_limit.py)."""
    settings = app.settings
    # No proxy-headers middleware: nothing here reads the client's address, and it
    # would run on every model call.
    # uvicorn types `http` as a protocol class; it calls it per connection, as it does
    # the factory given here.
    return uvicorn.Config(
        app,
        log_level=log_level,
        access_log=False,
        lifespan=lifespan,
        proxy_headers=False,
        http=bounded_protocol(settings.max_url_bytes, settings.max_header_bytes),  # type: ignore[arg-type]
    )


def run_server[T](main: Coroutine[Any, Any, T]) -> T:
    """`asyncio.run` on uvloop, for a process that serves the proxy: the stdlib loop
    costs measurably more CPU per call (Ray's actors, hence Serve replicas, use uvloop
    already). What the process imported is frozen first (`freeze_startup_heap`)."""
    freeze_startup_heap()
    return asyncio.run(main, loop_factory=uvloop.new_event_loop)


async def _wait_until_ours(url: str, instance_id: str, serving: asyncio.Task[None]) -> None:
    async with httpx.AsyncClient(timeout=2.0) as client:
        for _ in range(200):
            if serving.done():
                serving.result()
                raise ServeError("the server stopped before it became ready")
            try:
                reply = await client.get(f"{url}/health")
                if reply.json().get("instance") == instance_id:
                    return
                raise ServeError(f"{url} is answered by another server")
            except (httpx.TransportError, ValueError):
                await asyncio.sleep(0.05)
    raise ServeError(f"{url} did not become ready")
