"""`harbor-ray images build`: a dataset's task images, built ahead of a sweep."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

import harbor_ray.cli.options as opt
from harbor_ray.cli.options import Exit

images_app = typer.Typer(
    help="The task images the container sandbox runs trials in (built with Docker).",
    no_args_is_help=True,
)


@images_app.command("build")
def images_build(
    dataset: Annotated[
        str,
        typer.Option(
            help="Task dir, dir of task dirs, REGISTRY.json:NAME[@VERSION], or a cached "
            "hub or registry dataset, as `sweep --dataset`."
        ),
    ],
    task: opt.TaskOption = None,
    images_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where images are unpacked on each node: the container sandbox's "
            "`images_dir` (--sandbox-arg images_dir=...). Default: "
            "~/.cache/harbor_ray/images."
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            help="Build on every alive node of this Ray cluster (each node keeps its own "
            "images). Default: this machine only."
        ),
    ] = None,
) -> None:
    """Build and unpack the image of every task that has one (its
    environment/Dockerfile, or its docker_image if the daemon holds it), so that a
    sweep's rollouts start at once and a broken Dockerfile is found before any rollout.

    Images are content-addressed (the Dockerfile and its build context): what is built
    already is reused, and a changed file builds anew. Each build's log is kept under
    IMAGES_DIR/logs/. Exit code 0: every image is ready; 1: some failed (the table names
    their logs); 2: nothing could be built (no Docker daemon, no task with an image).
    """
    from harbor_ray.jobs.images import ImagesRequest, build_images

    request = ImagesRequest(
        dataset=dataset,
        tasks=task,
        ray_address=ray_address,
        images_dir=(images_dir or ImagesRequest.images_dir).resolve(),
    )
    outcomes = build_images(request, progress=opt.notice)
    table = Table(title="task images")
    for column in ("task", "node", "image", "built", "seconds", "log / error"):
        table.add_column(column)
    for o in outcomes:
        table.add_row(
            o.task,
            o.node,
            (o.digest or "-")[:19],
            "[red]failed[/red]" if o.error else ("yes" if o.built else "cached"),
            f"{o.seconds:.1f}",
            o.error or o.log or "",
        )
    Console().print(table)  # the result, on stdout; progress went to stderr
    raise typer.Exit(Exit.SOME_FAILED if any(o.error for o in outcomes) else Exit.ALL_OK)
