"""`harbor-ray agents install|list`: agent CLIs in the host's cache."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.console import Console

from harbor_ray.cli.options import AgentsCacheOption, JsonOption, console
from harbor_ray.errors import AgentInstallError
from harbor_ray.trials.agent_pins import PINS
from harbor_ray.trials.installs import DEFAULT_CACHE, install

agents_app = typer.Typer(
    help="Agent CLIs installed on the host for the local sandbox, at pinned versions.",
    no_args_is_help=True,
)


@agents_app.command("install")
def agents_install(
    names: Annotated[
        list[str] | None,
        typer.Argument(
            help="Agents to install, by Harbor name (default: every pinned agent).",
            show_default=False,
        ),
    ] = None,
    agents_cache: AgentsCacheOption = None,
) -> None:
    """Install agent CLIs from the npm registry and PyPI into the host's agent cache.

    Each agent is installed at the version pinned in harbor_ray/trials/agent_versions.toml
    into CACHE/<agent>-<version>/, built in a temporary directory and renamed once its
    commands answer `--version`: rerunning skips what is installed, and an interrupted
    install is never taken as complete. The local sandbox mounts the agent's entry
    read-only and puts its commands on PATH, so Harbor's own install step (which would
    fetch nvm, Node or bootstrap scripts from the network) finds the agent present.
    Node comes from the host (npm agents run on the host's `node`).
    """
    unknown = sorted(set(names or ()) - set(PINS))
    if unknown:
        raise AgentInstallError(
            f"no pinned version for {', '.join(unknown)}; pinned: {', '.join(sorted(PINS))}"
        )
    pins = [PINS[name] for name in (names or sorted(PINS))]
    install(
        pins, agents_cache or DEFAULT_CACHE, progress=lambda msg: console.print(f"[dim]{msg}[/dim]")
    )


@agents_app.command("list")
def agents_list(
    agents_cache: AgentsCacheOption = None,
    as_json: JsonOption = False,
) -> None:
    """The pinned agent CLIs, their versions, and whether each is in the cache."""
    from harbor_ray.info import installed_agents, render_installed

    rows = installed_agents(agents_cache)
    if as_json:
        print(json.dumps(rows, indent=2))
    else:
        render_installed(rows, Console())
