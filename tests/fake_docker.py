"""A stand-in `docker` CLI, so that tests of Docker's usability hold wherever they run
(with or without a Docker daemon on the machine)."""

from __future__ import annotations

import os
from pathlib import Path


def path_with_docker(directory: Path, *, daemon: bool) -> str:
    """A PATH whose first `docker` is a script in `directory` that answers `docker info`
    as a CLI with (`daemon`) or without a reachable daemon."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "docker"
    script.write_text("#!/bin/sh\n" + ("exit 0\n" if daemon else
                      "echo 'Cannot connect to the Docker daemon' >&2\nexit 1\n"))
    script.chmod(0o755)
    return f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"
