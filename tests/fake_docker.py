"""Stand-ins for what sandbox backends look for on the host (a `docker` CLI with or
without a daemon, any program on PATH, no cloud credentials), so that tests of a
backend's usability hold wherever they run."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# What boto3 and Docker Sandboxes' cloud client read credentials from.
_CREDENTIAL_VARIABLES = (
    "AWS_ACCESS_KEY_ID",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AWS_PROFILE",
    "AWS_DEFAULT_PROFILE",
    "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    "AWS_CONTAINER_CREDENTIALS_FULL_URI",
    "AWS_WEB_IDENTITY_TOKEN_FILE",
    "SBX_TOKEN",
    "SBX_TOKEN_FILE",
    "SBX_DOCKER_USERNAME",
    "SBX_DOCKER_PAT",
)


def path_with_docker(directory: Path, *, daemon: bool, compose: bool = False) -> str:
    """A PATH whose first `docker` is a script in `directory` that answers `docker info`
    as a CLI with (`daemon`) or without a reachable daemon, and `docker compose` as a CLI
    with (`compose`) or without the Compose v2 plugin."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "docker"
    no_compose = (
        ""
        if compose
        else (
            'if [ "$1" = compose ]; then echo "docker: unknown command: docker compose" >&2; '
            "exit 1; fi\n"
        )
    )
    script.write_text(
        "#!/bin/sh\n"
        + no_compose
        + ("exit 0\n" if daemon else "echo 'Cannot connect to the Docker daemon' >&2\nexit 1\n")
    )
    script.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


def path_with_program(directory: Path, name: str) -> str:
    """A PATH of only `directory`, holding a program `name` that exits 0."""
    directory.mkdir(parents=True, exist_ok=True)
    program = directory / name
    program.write_text("#!/bin/sh\nexit 0\n")
    program.chmod(0o755)
    return str(directory)


def cloud_free_environ(directory: Path) -> dict[str, str]:
    """This process's environment without any AWS or Docker Sandboxes credentials: no
    variables, AWS's files pointed at nothing, and no instance-metadata lookup."""
    env = {k: v for k, v in os.environ.items() if k not in _CREDENTIAL_VARIABLES}
    env.update(
        AWS_CONFIG_FILE=str(directory / "no-aws-config"),
        AWS_SHARED_CREDENTIALS_FILE=str(directory / "no-aws-credentials"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def without_cloud_credentials(monkeypatch: pytest.MonkeyPatch, directory: Path) -> None:
    """`cloud_free_environ`, applied to this process for one test."""
    for name in _CREDENTIAL_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    for name, value in cloud_free_environ(directory).items():
        if os.environ.get(name) != value:
            monkeypatch.setenv(name, value)
