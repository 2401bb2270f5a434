"""The capture proxy inside the current process, over sessions this process owns:
`harbor-ray rollout`, rollout hosts with `--ingress host`, and tests.

One rollout runs end to end in one process (an in-memory session store, the proxy on a
loopback port), so that when it works and the cluster does not, the fault is known to
be in the serving layer (docs/architecture.md, property 3).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

from harbor_ray.capture.core.capture_level import CaptureLevel, covers
from harbor_ray.capture.proxy.app import CaptureApp, build_capture_app
from harbor_ray.capture.proxy.certify import Certification, certify
from harbor_ray.capture.proxy.engine_adapter import EngineChoice, adapt_engine
from harbor_ray.capture.proxy.server import serve
from harbor_ray.capture.proxy.session import (
    InMemorySessionStore,
    StoreSessions,
    TurnListener,
)
from harbor_ray.capture.proxy.settings import CaptureSettings
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.errors import CertificationError
from harbor_ray.listening import bind


@dataclass(frozen=True)
class LocalCapture(StoreSessions):
    """What a rollout needs of a capture service, when its sessions live in this process:
    here the in-process proxy's store; in the cluster, the rollout host's (its agents
    then call the proxy replicas, which ask the host)."""

    store: InMemorySessionStore
    served_model: str
    host_url: str
    # Where agents in sandboxes off the host's node (cloud backends) reach the proxy:
    # the address the user configured (`--proxy-url`); None: not configured.
    remote_url: str | None = None
    # The engine's certification, when this process made it (`local_capture`).
    certification: Certification | None = None


@contextlib.asynccontextmanager
async def local_capture(
    engine: Engine,
    url: str,
    *,
    model: str | None = None,
    host: str = "127.0.0.1",
    stitch: bool = True,
    wrap: Callable[[CaptureApp], CaptureApp] | None = None,
    capture: CaptureLevel = "tokens",
    engine_kind: EngineChoice = "auto",
    certified: Certification | None = None,
    on_turn: TurnListener | None = None,
) -> AsyncIterator[LocalCapture]:
    """Certify `engine` for the `capture` level, behind the adapter for `engine_kind`
    (`auto`: found from its answers), serve the proxy on a free loopback port, stop it
    on exit. `certified`: the engine's certification made already (its kind and model
    are used, and it is not certified again). `wrap`, when given, wraps the proxy's app
    (e.g. to watch what it answers); the wrapper keeps the app's `settings` and `state`,
    which the server reads. `on_turn` hears each turn as it is recorded
    (`InMemorySessionStore`'s)."""
    adapted = await adapt_engine(
        engine, engine_kind if certified is None else certified.engine_kind
    )
    if certified is None:
        certification = await certify(
            adapted.engine, url, model=model, capture=capture, engine_kind=adapted.kind
        )
    elif covers(certified.capture_level, capture):
        certification = certified
    else:
        raise CertificationError(
            f"the engine was certified at the {certified.capture_level!r} level, below {capture!r}"
        )
    async with serve_capture(
        InMemorySessionStore(on_turn=on_turn),
        adapted.engine,
        certification.served_model,
        host=host,
        stitch=stitch and adapted.stitch,
        wrap=wrap,
        logprobs_mode=certification.logprobs_mode,
        capture=capture,
    ) as capture_app:
        yield dataclasses.replace(capture_app, certification=certification)


@contextlib.asynccontextmanager
async def serve_capture(
    store: InMemorySessionStore,
    engine: Engine,
    served_model: str,
    *,
    host: str = "127.0.0.1",
    stitch: bool = True,
    wrap: Callable[[CaptureApp], CaptureApp] | None = None,
    policy_version: Callable[[], int | None] = lambda: 0,
    logprobs_mode: str | None = None,
    capture: CaptureLevel = "tokens",
) -> AsyncIterator[LocalCapture]:
    """Serve the proxy over `store` on a free port of `host` (the engine certified
    already), in the running loop; stop it on exit. `policy_version` stamps each turn
    (`build_capture_app`'s); `logprobs_mode` is the certification's
    (`CaptureSettings.logprobs_mode`); `capture` what each call records.

    Sessions are opened and closed through `LocalCapture`, in this process, so the app
    has no admin routes: the agents it serves must not list, mint, read or delete
    sessions (their neighbours' included)."""
    app = build_capture_app(
        store,
        engine,
        CaptureSettings(
            served_model=served_model, stitch=stitch, logprobs_mode=logprobs_mode, capture=capture
        ),
        policy_version=policy_version,
    )
    served = app if wrap is None else wrap(app)
    sock = bind(host, 0)
    ready: asyncio.Future[str] = asyncio.get_running_loop().create_future()
    stop = asyncio.Event()
    serving = asyncio.create_task(serve(served, sock, on_ready=ready.set_result, stop=stop))
    first: set[asyncio.Future[Any]] = {serving, ready}
    done, _ = await asyncio.wait(first, return_when=asyncio.FIRST_COMPLETED)
    if serving in done:
        serving.result()  # raises why it stopped
    try:
        yield LocalCapture(store, served_model, ready.result())
    finally:
        stop.set()
        await serving
