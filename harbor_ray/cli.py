"""`harbor-ray`: the command line. Each command is a thin shell over the library."""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer
from rich.console import Console

from harbor_ray.capture.app import CaptureSettings, build_capture_app
from harbor_ray.capture.certify import CertificationError, certify
from harbor_ray.capture.engine import HttpEngine
from harbor_ray.capture.server import ServeError, bind, check_exposure, serve
from harbor_ray.capture.session import InMemorySessionStore

app = typer.Typer(
    help="harbor_ray: Harbor tasks as trainable RL environments, with exact token capture.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
console = Console(stderr=True)


@app.callback()
def _root() -> None:
    """harbor_ray: Harbor tasks as trainable RL environments, with exact token capture."""


@app.command()
def proxy(
    llm_url: Annotated[str, typer.Option(
        help="The engine's base URL (a vLLM OpenAI server, e.g. http://127.0.0.1:8000). "
             "Required: there is no default engine.")],
    host: Annotated[str, typer.Option(help="Address to bind. Anything but loopback "
                                           "needs --admin-key.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (0 picks a free one).")] = 8765,
    admin_key: Annotated[str | None, typer.Option(
        help="Key required on the session routes (/sessions...).")] = None,
    budget: Annotated[int | None, typer.Option(
        help="Default model-call budget of a new session (none: unlimited).")] = None,
    model: Annotated[str | None, typer.Option(
        help="Served model id to use (default: the first one the engine lists).")] = None,
    max_body_mb: Annotated[float, typer.Option(
        help="Largest request body accepted, in MiB (larger gets 413).")] = 32.0,
) -> None:
    """Serve the capture proxy in front of an engine, after certifying the engine.

    Mint a session with `POST /sessions` (returns its id and key), point an agent at
    this URL with the key as its API key, and read the capture with
    `GET /sessions/{id}/export`.
    """
    try:
        check_exposure(host, admin_key)
        sock = bind(host, port)
        asyncio.run(_serve_proxy(sock, llm_url, admin_key, budget, model, max_body_mb))
    except (ServeError, CertificationError) as exc:
        console.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from exc
    except KeyboardInterrupt:
        pass


async def _serve_proxy(
    sock, llm_url: str, admin_key: str | None, budget: int | None, model: str | None,
    max_body_mb: float,
) -> None:
    engine = HttpEngine(llm_url)
    try:
        cert = await certify(engine, engine.root, model=model)
    except BaseException:
        await engine.aclose()
        raise
    console.print(f"engine certified: {cert.served_model} at {cert.url} "
                  f"(tool calling: {'yes' if cert.tool_calling else cert.tool_calling_fix})")
    settings = CaptureSettings(
        served_model=cert.served_model, admin_key=admin_key, default_budget=budget,
        max_body_bytes=int(max_body_mb * 1024 * 1024),
    )
    capture = build_capture_app(InMemorySessionStore(), engine, settings,
                                on_shutdown=engine.aclose)

    def ready(url: str) -> None:
        console.print(f"capture proxy ready at [bold]{url}[/bold]")

    await serve(capture, sock, on_ready=ready)


def main() -> None:
    app()


if __name__ == "__main__":
    main()
