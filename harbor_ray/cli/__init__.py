"""`harbor-ray`: the command line. Each command is a thin shell over the library: it
parses its flags into the library's request and shows what comes back.

One module per command group; the flags several commands share are declared once in
`options`. This module builds the app and holds the one place where an error harbor_ray
raises on purpose (`HarborRayError`) becomes a message and exit code 2 (130 for a job
stopped by SIGINT or SIGTERM, `Interrupted`): commands do not
catch them. The library each command calls is imported when the command runs, so that
`harbor-ray --help` does not import Ray, vLLM or Harbor.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from harbor_ray.cli import (
    agents,
    datasets,
    engine,
    images,
    info,
    playground,
    proxy,
    qualify,
    report,
    rollout,
    sweep,
)
from harbor_ray.cli.options import Exit, console
from harbor_ray.errors import HarborRayError, Interrupted
from harbor_ray.switches import set_switches

__all__ = ["app", "main"]


class _Commands(TyperGroup):
    """The root group: the one place a `HarborRayError` becomes a message and an exit
    code (130 for `Interrupted`, else 2), whichever command (or subcommand) raised it."""

    # typer.Context is what typer passes; the base names click's, which typer vendors
    # privately (typer._click).
    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]
        try:
            return super().invoke(ctx)
        except Interrupted as exc:
            console.print(f"[yellow]interrupted:[/yellow] {exc}")
            raise typer.Exit(Exit.INTERRUPTED) from exc
        except HarborRayError as exc:
            console.print(f"[red]error:[/red] {exc}")
            for note in getattr(exc, "__notes__", ()):  # where the command's logs are
                console.print(note)
            raise typer.Exit(Exit.COULD_NOT_START) from exc


app = typer.Typer(
    cls=_Commands,
    help="harbor_ray: Harbor tasks as trainable RL environments, with exact token capture.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)


@app.callback()
def _root() -> None:
    """harbor_ray: Harbor tasks as trainable RL environments, with exact token capture."""


app.command()(proxy.proxy)
app.command()(info.info)
app.add_typer(engine.model_app, name="model")
app.add_typer(engine.engine_app, name="engine")
app.add_typer(agents.agents_app, name="agents")
app.add_typer(datasets.datasets_app, name="datasets")
app.add_typer(images.images_app, name="images")
app.command()(rollout.rollout)
app.command()(qualify.qualify)
app.command()(sweep.sweep)
app.command()(report.report)
app.command()(report.view)
app.command()(report.compare)
app.command()(playground.playground)


def main() -> None:
    set_switches()
    app()
