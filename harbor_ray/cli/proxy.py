"""`harbor-ray proxy`: the capture proxy in front of an engine, in this process."""

from __future__ import annotations

import contextlib
import socket
from typing import Annotated

import typer

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.upstream_profile import UpstreamName
from harbor_ray.capture.proxy.app import build_capture_app
from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.engine_adapter import AdaptedEngine, EngineChoice, adapt_engine
from harbor_ray.capture.proxy.hosted import build_upstream, read_key
from harbor_ray.capture.proxy.server import check_exposure, run_server, serve
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.settings import CaptureSettings
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S, HttpEngine
from harbor_ray.cli.options import (
    CaptureOption,
    EngineKindOption,
    EngineTimeoutOption,
    StitchOption,
    UpstreamKeyFileOption,
    UpstreamOption,
    console,
)
from harbor_ray.host_names import LOOPBACK_NAMES, names_served
from harbor_ray.listening import bind


def proxy(
    llm_url: Annotated[
        str | None,
        typer.Option(
            help="The engine's base URL (a vLLM or SGLang OpenAI server, e.g. "
            "http://127.0.0.1:8000). Required with --upstream openai-chat: there is no "
            "default engine; a hosted --upstream defaults to its provider's API."
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to bind. Anything but loopback needs --admin-key.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (0 picks a free one).")] = 8765,
    admin_key: Annotated[
        str | None, typer.Option(help="Key required on the session routes (/sessions...).")
    ] = None,
    budget: Annotated[
        int | None,
        typer.Option(help="Default model-call budget of a new session (none: unlimited)."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option(help="Served model id to use (default: the first one the engine lists)."),
    ] = None,
    max_body_mb: Annotated[
        float, typer.Option(help="Largest request body accepted, in MiB (larger gets 413).")
    ] = 32.0,
    engine_timeout: EngineTimeoutOption = DEFAULT_ENGINE_TIMEOUT_S,
    stitch: StitchOption = True,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            "--allowed-host",
            help="A Host name agents reach the proxy by (repeatable; '*': "
            "any). IP addresses, the loopback names and --host are always answered; other "
            "names get 421 (a guard against DNS rebinding).",
        ),
    ] = None,
    engine_kind: EngineKindOption = "auto",
    capture: CaptureOption = "tokens",
    upstream: UpstreamOption = "openai-chat",
    upstream_key_file: UpstreamKeyFileOption = None,
) -> None:
    """Serve the capture proxy in front of an engine, after certifying the engine.

    Mint a session with `POST /sessions` (returns its id and key), point an agent at
    this URL with the key as its API key, and read the capture with
    `GET /sessions/{id}/export`.
    """
    check_exposure(host, admin_key)
    sock = bind(host, port)
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it stops
        run_server(
            _serve_proxy(
                sock,
                llm_url,
                admin_key,
                budget,
                model,
                max_body_mb,
                engine_timeout,
                stitch,
                names_served((*LOOPBACK_NAMES, *(allowed_host or ())), host),
                engine_kind,
                capture,
                upstream,
                read_key(upstream_key_file),
            )
        )


async def _serve_proxy(
    sock: socket.socket,
    llm_url: str | None,
    admin_key: str | None,
    budget: int | None,
    model: str | None,
    max_body_mb: float,
    engine_timeout: float,
    stitch: bool,
    allowed_hosts: tuple[str, ...],
    engine_kind: EngineChoice,
    capture: CaptureLevel,
    upstream: UpstreamName,
    key: str | None,
) -> None:
    http = build_upstream(upstream, llm_url, key=key, timeout_s=engine_timeout)
    try:
        # A hosted API is no engine to adapt: it is reached in its own format.
        adapted = (
            await adapt_engine(http, engine_kind)
            if isinstance(http, HttpEngine)
            else AdaptedEngine(http, "vllm", stitch=False)
        )
        engine = adapted.engine
        cert = await certify(
            engine, http.root, model=model, engine_kind=adapted.kind, capture=capture
        )
    except BaseException:
        await http.aclose()
        raise
    if stitch and not adapted.stitch:
        console.print(
            f"continuation off: {adapted.kind} takes no stitched prompts here (docs/proxy.md)"
        )
    console.print(
        f"engine certified: {cert.served_model} at {cert.url} "
        f"(tool calling: {'yes' if cert.tool_calling else cert.tool_calling_fix}; "
        f"logprobs: {cert.logprobs_mode}; engine: {cert.engine_kind}; "
        f"upstream: {cert.upstream}; capture: {cert.capture_level})"
    )
    settings = CaptureSettings(
        served_model=cert.served_model,
        admin_key=admin_key,
        default_budget=budget,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
        stitch=stitch and adapted.stitch,
        logprobs_mode=cert.logprobs_mode,
        allowed_hosts=allowed_hosts,
        capture=capture,
    )
    store = InMemorySessionStore()
    app = build_capture_app(store, engine, settings, admin=store, on_shutdown=http.aclose)

    def ready(url: str) -> None:
        console.print(f"capture proxy ready at [bold]{url}[/bold]")

    await serve(app, sock, on_ready=ready)
