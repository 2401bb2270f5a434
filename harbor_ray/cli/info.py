"""`harbor-ray info`: what this machine can run."""

from __future__ import annotations

import asyncio
import json
from typing import Annotated

import typer
from rich.console import Console

from harbor_ray.cli.options import (
    AgentsCacheOption,
    DatasetsCacheOption,
    JsonOption,
    SandboxArgOption,
)


def info(
    llm_url: Annotated[
        str | None, typer.Option(help="Also certify this engine and show what it supports.")
    ] = None,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            help="Also resolve these dataset specs (repeatable). `samples` is always shown."
        ),
    ] = None,
    as_json: JsonOption = False,
    probe: Annotated[
        str | None,
        typer.Option(
            metavar="BACKEND",
            help="Also start one real sandbox of this backend, run a command in it and stop "
            "it (with --sandbox-arg's kwargs). Exit 1 if that fails.",
        ),
    ] = None,
    sandbox_arg: SandboxArgOption = None,
    probe_image: Annotated[
        str | None,
        typer.Option(
            help="Image the probe asks of backends that run one (default ubuntu:24.04; "
            "`local` takes none)."
        ),
    ] = None,
    agents_cache: AgentsCacheOption = None,
    datasets_cache: DatasetsCacheOption = None,
) -> None:
    """What this machine can run: sandbox backends, agents (and which agent CLIs are
    installed for the sandbox, at which versions), datasets (and which hub and registry
    datasets are cached), the engine."""
    from harbor_ray.info import gather, render
    from harbor_ray.trials.backends import parse_sandbox_args

    kwargs = parse_sandbox_args(sandbox_arg or [])
    data = asyncio.run(
        gather(
            llm_url,
            ["samples", *(dataset or [])],
            probe=probe,
            sandbox_kwargs=kwargs,
            probe_image=probe_image,
            agents_cache=agents_cache,
            datasets_cache=datasets_cache,
        )
    )
    if as_json:
        print(json.dumps(data, indent=2))
    else:
        render(data, Console())
    if data["probe"] is not None and not data["probe"]["ok"]:
        raise typer.Exit(1)
