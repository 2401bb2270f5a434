"""`harbor-ray view`: the report and viewer served on loopback, following the dataset.

Routes: `/` the page (the same self-contained page as report.html, told to poll),
`/data.json` the current document, `/version` the dataset's version (what the page polls:
a directory listing, so polling costs nothing while no rows land). The document is
rebuilt only when the version changed, off the event loop, one rebuild at a time.

The page carries the rollouts' stored messages: serve it to others only knowingly
(`--host`); the default is loopback. It answers only requests naming a Host it is served
at (`harbor_ray.host_names`: the loopback names, the address bound, and those given with
`--allowed-host`), so a web page cannot read it through DNS rebinding.
"""

from __future__ import annotations

import asyncio
import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

import uvicorn
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Route

from harbor_ray.errors import ServeError, ViewerError
from harbor_ray.host_names import LOOPBACK_NAMES, HostGuard, names_served
from harbor_ray.listening import base_url, bind
from harbor_ray.report.build import report_document
from harbor_ray.report.page import render_page
from harbor_ray.report.tables import dataset_version
from harbor_ray.report.tokenizer import Tokenizers

__all__ = ["LiveReport", "build_view_app", "serve_view", "view_in_thread"]

_NO_CACHE = {"cache-control": "no-store"}


class LiveReport:
    """The document of a dataset directory, rebuilt when its version changes."""

    def __init__(
        self, out: str | os.PathLike[str], *, pass_reward: float = 1.0, tokenizer: str | None = None
    ) -> None:
        self.out = Path(out)
        self.pass_reward = pass_reward
        self.tokenizers = Tokenizers(tokenizer)
        self._version: str | None = None
        self._document = b""
        self._lock = asyncio.Lock()

    def version(self) -> str:
        return dataset_version(self.out)

    async def document(self) -> bytes:
        async with self._lock:
            if self._version != self.version():
                # Version read first (inside report_document too): rows committed while
                # it is built are picked up by the next request, never hidden.
                self._version = self.version()
                self._document = await run_in_threadpool(
                    report_document,
                    self.out,
                    pass_reward=self.pass_reward,
                    tokenizers=self.tokenizers,
                )
            return self._document


async def page(request: Request) -> Response:
    """The report page, told to poll `/version` every `poll_s` seconds."""
    live: LiveReport = request.app.state.live
    return HTMLResponse(
        render_page(
            await live.document(),
            title=f"harbor_ray view: {live.out}",
            live_poll_s=request.app.state.poll_s,
        ),
        headers=_NO_CACHE,
    )


async def data(request: Request) -> Response:
    """The current document, as the page reads it."""
    return Response(
        await request.app.state.live.document(), media_type="application/json", headers=_NO_CACHE
    )


async def version(request: Request) -> Response:
    """The dataset's version: what the page polls."""
    return PlainTextResponse(request.app.state.live.version(), headers=_NO_CACHE)


ROUTES = (Route("/", page), Route("/data.json", data), Route("/version", version))


def build_view_app(
    live: LiveReport, *, poll_s: float = 2.0, allowed_hosts: Iterable[str] = LOOPBACK_NAMES
) -> HostGuard:
    app = Starlette(routes=list(ROUTES))
    app.state.live, app.state.poll_s = live, poll_s
    return HostGuard(app, allowed_hosts)


def _server(live: LiveReport, poll_s: float, allowed_hosts: Iterable[str]) -> uvicorn.Server:
    app = build_view_app(live, poll_s=poll_s, allowed_hosts=allowed_hosts)
    return uvicorn.Server(
        uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    )


def serve_view(
    out: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 8766,
    poll_s: float = 2.0,
    pass_reward: float = 1.0,
    allowed_hosts: Iterable[str] = (),
    tokenizer: str | None = None,
    on_ready: Callable[[str], object] = print,
) -> None:
    """Serve the view of `out` until interrupted. The port is bound here, so a taken one
    fails at once (ViewerError) rather than on the server's thread, and so is a
    `tokenizer` that cannot be loaded (ReportError). It answers the Host names
    `allowed_hosts`, the loopback names and `host` (when not a wildcard)."""
    live = LiveReport(out, pass_reward=pass_reward, tokenizer=tokenizer)
    sock = _bound(host, port)
    on_ready(base_url(sock))
    allowed = names_served((*LOOPBACK_NAMES, *allowed_hosts), host)
    asyncio.run(_server(live, poll_s, allowed).serve(sockets=[sock]))


@contextmanager
def view_in_thread(
    out: str | os.PathLike[str],
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    poll_s: float = 2.0,
    pass_reward: float = 1.0,
) -> Iterator[str]:
    """The view served from a thread of this process (e.g. beside a sweep), yielding its
    URL; stopped on exit."""
    sock = _bound(host, port)
    server = _server(
        LiveReport(out, pass_reward=pass_reward), poll_s, names_served(LOOPBACK_NAMES, host)
    )
    thread = threading.Thread(
        target=lambda: asyncio.run(server.serve(sockets=[sock])),
        name="harbor-ray-view",
        daemon=True,
    )
    thread.start()
    try:
        yield base_url(sock)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


def _bound(host: str, port: int) -> socket.socket:
    """The viewer's listening socket, or a ViewerError naming why there is none."""
    try:
        return bind(host, port)
    except ServeError as exc:  # the shared server's word; the viewer has its own
        raise ViewerError(f"the viewer cannot start: {exc}") from exc
