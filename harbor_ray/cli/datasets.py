"""`harbor-ray datasets prefetch`: hub and registry datasets into the local cache."""

from __future__ import annotations

from typing import Annotated

import typer

from harbor_ray.cli.options import DatasetsCacheOption, console

datasets_app = typer.Typer(
    help="Datasets from the Hugging Face hub or a Harbor registry, cached as local files.",
    no_args_is_help=True,
)


@datasets_app.command("prefetch")
def datasets_prefetch(
    specs: Annotated[
        list[str],
        typer.Argument(
            help="hf://ORG/NAME[@REVISION] or harbor://NAME[@VERSION][?registry=URL_OR_FILE].",
            show_default=False,
        ),
    ],
    datasets_cache: DatasetsCacheOption = None,
) -> None:
    """Fetch datasets into the cache, so that machines without the network can run them.

    Each is downloaded into CACHE/<kind>/<source>/<revision>/, staged and renamed once
    complete (an interrupted fetch is never taken as cached), with real files in place
    of links; what is cached already is skipped. `--dataset SPEC` then reads the cache.
    Copy the cache to a cluster's machines, or prefetch on each. `harbor-ray info`
    lists what is cached.
    """
    from harbor_ray.trials.dataset_cache import default_cache_root, prefetch_datasets

    prefetch_datasets(
        specs,
        datasets_cache or default_cache_root(),
        progress=lambda msg: console.print(f"[dim]{msg}[/dim]"),
    )
