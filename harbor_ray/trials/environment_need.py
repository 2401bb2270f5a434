"""What a task's environment asks of its sandbox, and whether a sandbox may run it.

A Harbor task's reward means "the task's checks passed in the task's environment": its
`environment/Dockerfile`, a prebuilt `docker_image`, or a compose file. A sandbox that
runs the task somewhere else (the local sandbox runs it on the host's userland) would
score a correct solution 0, or a wrong one 1, with nothing to tell the two apart. So
the rule is decided here, once, and every surface asks it before a trial starts:

- a task that declares nothing, or a Dockerfile that only names a base image and a
  workdir (and metadata that changes no file: LABEL, ARG, CMD, ...), needs nothing a
  sandbox must build: any sandbox may run it;
- anything else (a Dockerfile that runs, copies, sets variables or a user; a
  `docker_image`; a compose file) needs the task's own image: a sandbox that cannot
  provide it refuses, unless the user asked for the host's userland anyway, and then
  the row says so (`environment`: `host_override`).

Pure: the caller reads the files (`read_need` is the one reader, kept apart).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from harbor_ray.data.result import RanIn

__all__ = [
    "EnvironmentNeed",
    "NeedKind",
    "RanIn",
    "dockerfile_need",
    "ran_in",
    "read_need",
    "refusal",
    "uploads_environment_dir",
]

DOCKERFILE = "Dockerfile"
COMPOSE_FILE = "docker-compose.yaml"

# Dockerfile instructions that change no file, variable or user of the image a command
# runs in. A Dockerfile of these and FROM/WORKDIR asks only for a base system.
_INERT = frozenset(
    {
        "FROM",
        "WORKDIR",
        "LABEL",
        "MAINTAINER",
        "ARG",
        "CMD",
        "ENTRYPOINT",
        "EXPOSE",
        "STOPSIGNAL",
        "HEALTHCHECK",
    }
)


class NeedKind(StrEnum):
    """What a task's environment asks of the sandbox."""

    NONE = "none"  # no Dockerfile, no docker_image: whatever the sandbox runs
    BASE = "base"  # a Dockerfile naming a base image and a workdir only
    BUILD = "build"  # a Dockerfile that makes files, variables or a user
    IMAGE = "image"  # a prebuilt docker_image
    COMPOSE = "compose"  # several services (docker-compose.yaml)


@dataclass(frozen=True)
class EnvironmentNeed:
    """A task's environment as the rule sees it. `why` names what makes it need its
    image (e.g. "environment/Dockerfile has RUN, COPY"); `workdir` is the Dockerfile's
    last WORKDIR, if any."""

    kind: NeedKind
    why: str = ""
    workdir: str | None = None
    image: str | None = None  # task.toml's docker_image, when that is what it asks for

    @property
    def needs_image(self) -> bool:
        return self.kind in (NeedKind.BUILD, NeedKind.IMAGE, NeedKind.COMPOSE)


def dockerfile_need(text: str) -> EnvironmentNeed:
    """A Dockerfile's need: BASE when every instruction is inert, else BUILD naming the
    instructions that are not (in order of first use)."""
    busy: list[str] = []
    workdir = None
    for instruction, argument in _instructions(text):
        if instruction == "WORKDIR":
            workdir = argument.strip().strip("\"'") or workdir
        elif instruction not in _INERT and instruction not in busy:
            busy.append(instruction)
    if busy:
        return EnvironmentNeed(
            NeedKind.BUILD, f"environment/{DOCKERFILE} has {', '.join(busy)}", workdir
        )
    return EnvironmentNeed(NeedKind.BASE, workdir=workdir)


def _instructions(text: str) -> list[tuple[str, str]]:
    """(INSTRUCTION, argument) pairs: comments and blank lines dropped, lines continued
    with a trailing backslash joined. A heredoc's body (RUN <<EOF) reads as more
    instructions, which cannot matter: it follows a RUN or COPY, which already needs
    the image."""
    found: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):  # parser directives are comments too
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = (pending + stripped).strip()
        pending = ""
        if whole:
            word, _, argument = whole.partition(" ")
            found.append((word.upper(), argument))
    if pending.strip():
        word, _, argument = pending.strip().partition(" ")
        found.append((word.upper(), argument))
    return found


def read_need(environment_dir: Path, docker_image: str | None) -> EnvironmentNeed:
    """The need of the task whose environment directory is `environment_dir` and whose
    task.toml names `docker_image` (or None). Harbor's order: compose, then the
    Dockerfile, then the prebuilt image: a Dockerfile wins over docker_image (Harbor's
    choice when told to build), as building needs no registry, and nodes without one
    are the ones the container sandbox serves."""
    if (environment_dir / COMPOSE_FILE).exists():
        return EnvironmentNeed(NeedKind.COMPOSE, f"environment/{COMPOSE_FILE} defines its services")
    dockerfile = environment_dir / DOCKERFILE
    if dockerfile.is_file():
        return dockerfile_need(dockerfile.read_text(errors="replace"))
    if docker_image:
        return EnvironmentNeed(
            NeedKind.IMAGE, f"task.toml names docker_image {docker_image}", image=docker_image
        )
    return EnvironmentNeed(NeedKind.NONE)


def uploads_environment_dir(environment_dir: Path) -> bool:
    """Whether the sandbox copies `environment/` into the workdir at start: Harbor does it
    for a `docker_image` task without a Dockerfile, and harbor_ray's sandboxes also for a
    task that declares no image at all, whose environment/ can only be its files."""
    if (environment_dir / DOCKERFILE).exists() or (environment_dir / COMPOSE_FILE).exists():
        return False
    return environment_dir.is_dir() and any(environment_dir.iterdir())


def refusal(
    need: EnvironmentNeed, *, task: str, sandbox: str, provides_image: bool, host_userland: bool
) -> str | None:
    """Why sandbox `sandbox` must not run `task`, naming the fix; None when it may."""
    if provides_image and need.kind is NeedKind.NONE:
        return (
            f"task {task!r} declares no image (no environment/{DOCKERFILE}, no "
            f"docker_image), which the {sandbox} sandbox needs: run it on the local "
            "sandbox"
        )
    if not need.needs_image or provides_image or host_userland:
        return None
    return (
        f"task {task!r} needs its own environment ({need.why}), which the {sandbox} "
        "sandbox does not build: it would run on this host's userland and its "
        "reward would not be the task's. Run it with --sandbox container (the "
        "task's image, built with Docker), or pass --host-userland to run it on the "
        "host anyway (every row then says environment=host_override)"
    )


def ran_in(need: EnvironmentNeed, *, provides_image: bool) -> RanIn:
    """Where a trial the rule let through runs."""
    if provides_image and need.kind is not NeedKind.NONE:
        return RanIn.IMAGE
    return RanIn.HOST_OVERRIDE if need.needs_image else RanIn.HOST
