"""What a Harbor backend needs to start that Harbor's own preflight does not check.

Harbor's preflight passes vacuously for some backends (none at all, or one that looks at
the SDK only): `singularity` ran without its binary, `ec2` without credentials or a
region, `sbx` without its CLI or a token, and each failed only once a rollout tried to
start. So a backend also counts as usable only if its constructor gets every argument
it requires, and the programs and credentials it reads when it starts are there.

Each check reads what the backend itself reads at start (the same PATH lookup, the same
variables and files), from inputs passed in, and names the fix. The checks per backend
are from Harbor 0.25's environment sources.
"""

from __future__ import annotations

import importlib.util
import inspect
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harbor.environments.base import BaseEnvironment


@dataclass(frozen=True)
class Context:
    """What a check may read: the backend's constructor kwargs, the environment
    variables and the PATH it will start under."""

    kwargs: Mapping[str, Any]
    environ: Mapping[str, str]
    search_path: str

    def which(self, program: str) -> str | None:
        return shutil.which(program, path=self.search_path)


def find_needs(name: str, cls: type, context: Context) -> list[str]:
    """Every missing piece for backend `name` (class `cls`), one line each; [] if none."""
    problems = missing_arguments(cls, context.kwargs)
    check = _CHECKS.get(name)
    if check is not None:
        problems += check(context)
    return problems


def missing_arguments(cls: type, kwargs: Mapping[str, Any]) -> list[str]:
    """Arguments the constructor requires that neither Harbor nor `kwargs` supplies, and
    `kwargs` it does not take."""
    # Harbor's factory passes BaseEnvironment's own parameters; the rest are the
    # backend's, given per rollout (`--sandbox-arg`).
    harbor_supplies = set(inspect.signature(BaseEnvironment.__init__).parameters)
    # The class's own constructor, read for its signature, never called through `cls`.
    parameters = inspect.signature(cls.__init__).parameters  # type: ignore[misc]
    problems = [
        f"its constructor requires `{p.name}`: pass --sandbox-arg {p.name}=VALUE"
        for p in parameters.values()
        if p.default is inspect.Parameter.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in harbor_supplies
        and p.name not in kwargs
    ]
    if not any(p.kind is p.VAR_KEYWORD for p in parameters.values()):
        problems += [
            f"its constructor takes no argument `{key}`" for key in kwargs if key not in parameters
        ]
    return problems


def _singularity(context: Context) -> list[str]:
    # The environment runs `singularity pull` and `singularity exec` by that name.
    if context.which("singularity") is None:
        return [
            "`singularity` not found on PATH: install SingularityCE or Apptainer "
            "(with its `singularity` command)"
        ]
    return []


def _docker(context: Context) -> list[str]:
    # Harbor's preflight asks the daemon only; every start then runs `docker compose`
    # (Compose v2, a CLI plugin), which fails where only the CLI and the daemon exist.
    docker = context.which("docker")
    if docker is None:
        return []  # Harbor's own preflight already says so
    try:
        answered = (
            subprocess.run(
                [docker, "compose", "version"],
                capture_output=True,
                timeout=10,
                env=dict(context.environ),
            ).returncode
            == 0
        )
    except (OSError, subprocess.TimeoutExpired):
        answered = False
    if answered:
        return []
    return [
        "`docker compose` (Compose v2) is not installed, and Harbor's docker backend "
        "starts every trial with it: install the Compose v2 plugin, or use "
        "--sandbox container (the task's image, built with Docker, run without Compose)"
    ]


def _sbx(context: Context) -> list[str]:
    target = context.kwargs.get("target", "cloud")
    if target == "local":
        command = str(context.kwargs.get("sbx_command", "sbx"))
        if context.which(command) is None:
            return [
                f"`{command}` not found on PATH: install Docker Sandboxes' CLI and run "
                "`sbx login` (target=local)"
            ]
        return []
    problems = []
    if importlib.util.find_spec("python_multipart") is None:
        problems.append("the cloud target needs the package python-multipart")
    if not _sbx_cloud_token(context):
        token_env = context.kwargs.get("token_env", "SBX_TOKEN")
        problems.append(
            f"no Docker Sandboxes Cloud credentials: set {token_env} or SBX_TOKEN_FILE (or "
            "pass --sandbox-arg token_file=PATH), or both SBX_DOCKER_USERNAME and "
            "SBX_DOCKER_PAT; or --sandbox-arg target=local for the local `sbx` CLI"
        )
    return problems


def _sbx_cloud_token(context: Context) -> bool:
    """Whether the cloud client will find a token, in the order it looks."""
    path = context.kwargs.get("token_file") or context.environ.get("SBX_TOKEN_FILE")
    if path:
        return Path(path).expanduser().is_file()
    if context.kwargs.get("token_env", "SBX_TOKEN") in context.environ:
        return True
    return all(
        context.environ.get(v, "").strip() for v in ("SBX_DOCKER_USERNAME", "SBX_DOCKER_PAT")
    )


def _ec2(context: Context) -> list[str]:
    problems = []
    mode = context.kwargs.get("launch_mode", "ephemeral")
    needed = {"ephemeral": "ami_id", "attach": "instance_id"}.get(mode)
    if needed is not None and not context.kwargs.get(needed):
        problems.append(
            f"launch_mode {mode} requires `{needed}`: pass --sandbox-arg {needed}=VALUE"
        )
    credentials = _aws_credentials(context.kwargs.get("aws_profile"))
    if credentials is not None:
        problems.append(credentials)
    return problems


def _aws_credentials(profile: str | None) -> str | None:
    """None if boto3 resolves AWS credentials (the chain the environment's client uses:
    variables, shared files, the instance's role), else what is missing."""
    import boto3
    from botocore.exceptions import BotoCoreError

    try:
        found = boto3.Session(profile_name=profile).get_credentials()
    except BotoCoreError as exc:  # an unknown profile, a broken config file
        return f"AWS credentials cannot be resolved: {exc}"
    if found is None:
        return (
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or "
            "configure a profile (aws configure; --sandbox-arg aws_profile=NAME)"
        )
    return None


_CHECKS: Mapping[str, Callable[[Context], list[str]]] = {
    "docker": _docker,
    "singularity": _singularity,
    "sbx": _sbx,
    "ec2": _ec2,
}
