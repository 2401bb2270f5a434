"""`harbor-ray playground`: tasks, runs and this machine's setup in the browser."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Annotated

import typer

from harbor_ray.cli.options import LlmUrlOption, TokenizerOption, console

# playground.launch's MAX_RUNS and MAX_QUEUED, written again: the command imports the
# playground only when it runs (tests/playground/test_hostile.py checks they agree).
MAX_RUNS, MAX_QUEUED = 2, 8


def playground(
    dataset: Annotated[
        list[str] | None,
        typer.Argument(
            help="Dataset specs to serve (as `harbor-ray rollout --dataset` takes them); "
            "default: samples. Visitors reach only these."
        ),
    ] = None,
    host: Annotated[
        str, typer.Option(help="Address to bind. Beyond loopback, --key-file is required.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to bind (0 picks a free one).")] = 8767,
    llm_url: LlmUrlOption = None,
    key_file: Annotated[
        Path | None,
        typer.Option(
            help="A file holding the key every visitor must give (created, mode 600, when "
            "missing). Required when --host is not loopback."
        ),
    ] = None,
    out: Annotated[
        Path, typer.Option(help="Where runs write their results.jsonl and trials (OUT/<run id>/).")
    ] = Path("playground-runs"),
    share_runs: Annotated[
        bool,
        typer.Option(
            help="Show every visitor's runs to every visitor (default: each sees its own)."
        ),
    ] = False,
    max_runs: Annotated[
        int, typer.Option(min=1, help="Runs at once; the others wait their turn.")
    ] = MAX_RUNS,
    max_queued: Annotated[
        int,
        typer.Option(
            min=0,
            help="Runs waiting their turn at most; a form past them is refused "
            "(429) until one starts.",
        ),
    ] = MAX_QUEUED,
    allow_private_engines: Annotated[
        bool,
        typer.Option(
            "--allow-private-engines",
            help="Let a visitor's engine URL be on loopback or a private network (off: "
            "only public addresses, so the form cannot reach this machine's or its "
            "network's services; --llm-url is always allowed).",
        ),
    ] = False,
    datasets_dir: Annotated[
        Path | None,
        typer.Option(
            help="The one directory runs from the page may write datasets under (the "
            "Parquet dataset sweeps write), each DIR/NAME for a NAME the form gives; "
            "without it the form writes none."
        ),
    ] = None,
    tokenizer: TokenizerOption = None,
    allow_agent: Annotated[
        list[str] | None,
        typer.Option(
            help="An agent import path (module:Class) a form may name besides the Harbor "
            "agents `harbor-ray info` lists (repeatable); no other is run."
        ),
    ] = None,
    allowed_host: Annotated[
        list[str] | None,
        typer.Option(
            help="A Host name it answers besides the loopback names and --host "
            "(repeatable; '*' for any). Others get 421 (no DNS rebinding)."
        ),
    ] = None,
) -> None:
    """Serve a playground in the browser: browse the datasets' tasks (filter as
    you type; instruction, files, task.toml), start a rollout of one through the
    same code as `harbor-ray rollout` (optionally into a dataset), follow each
    run call by call as the model answers, compare runs side by side, and see
    what this machine can run (`harbor-ray info`)."""
    from harbor_ray.playground import serve_playground

    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C is how it stops
        serve_playground(
            dataset or ["samples"],
            out=out,
            host=host,
            port=port,
            llm_url=llm_url,
            key_file=key_file,
            share_runs=share_runs,
            max_runs=max_runs,
            max_queued=max_queued,
            allow_private_engines=allow_private_engines,
            allowed_hosts=allowed_host or (),
            datasets_dir=datasets_dir,
            tokenizer=tokenizer,
            agents=allow_agent or (),
            on_ready=lambda url: console.print(f"playground at [bold]{url}[/bold]"),
        )
