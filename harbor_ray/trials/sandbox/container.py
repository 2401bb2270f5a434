"""The container sandbox: the bubblewrap sandbox over the task's own image.

Plug it in with `EnvironmentConfig(import_path="harbor_ray.trials.sandbox.container:
ContainerEnvironment", kwargs={...})`; the kwargs are `BwrapEnvironment`'s, and
`images_dir` (where images are unpacked, images.py; default `DEFAULT_IMAGES_DIR`) and
`docker` (the CLI that builds them). A trial gets everything the local sandbox gives
(bwrap.py: one pid namespace, no network but its forwards, files moved inside, the warm
pool) with two differences: its `/` is an overlay of the task's image (its Dockerfile
built, or its docker_image, unpacked once per node), read-only below, its own directory
above, so its writes never reach the image that other trials share; and the task's cpu
and memory limits hold, applied with cgroups (limits.py). What the image sets for its
processes holds too: its ENV (PATH included, after the mounted tools' bin/) for every
command, its WORKDIR where task.toml names none; an image whose USER is not root is
refused, since every command runs as root (one uid is mapped).

Its start writes the trial directory's `environment.json`, `{"kind": "image",
"reference", "digest", "build_s", "built", "log"}`: the rollout puts the image and what
building it cost on the row.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path, PurePosixPath
from typing import Any

from harbor.environments.capabilities import EnvironmentResourceCapabilities
from harbor.environments.definition import COMPOSE_FILE_NAME
from harbor.models.trial.config import ResourceMode

from harbor_ray.errors import EnvironmentUnsupportedError
from harbor_ray.trials.environment_need import NeedKind, read_need
from harbor_ray.trials.images import (
    DEFAULT_IMAGES_DIR,
    ImageRoot,
    docker_problems,
    ensure_image_root,
    image_source,
)
from harbor_ray.trials.rootfs_checks import has_command
from harbor_ray.trials.sandbox.bwrap import BwrapEnvironment
from harbor_ray.trials.sandbox.layout import DEFAULT_WORKDIR, SANDBOX_PATH, tools_path
from harbor_ray.trials.sandbox.limits import Limits, cgroup_problems
from harbor_ray.trials.sandbox.pooled import Recipe
from harbor_ray.trials.sandbox.preflight import find_problems, overlay_problems

__all__ = ["ContainerEnvironment"]

ENVIRONMENT_TYPE = "container"

# Under this, a call for an image that was ready is a lookup, not a wait for a build.
_WAITED_S = 1.0

# USER values that are root (the only user a command can run as).
_ROOT = frozenset({"", "root", "0"})


class ContainerEnvironment(BwrapEnvironment):
    """One trial's bubblewrap sandbox over its task's image (see the module docstring)."""

    def __init__(
        self,
        *args: Any,
        images_dir: str | Path | None = None,
        docker: str = "docker",
        **kwargs: Any,
    ) -> None:
        self._images_dir = Path(images_dir) if images_dir is not None else DEFAULT_IMAGES_DIR
        self._docker = docker
        self._image: ImageRoot | None = None  # once start() has it
        super().__init__(*args, **kwargs)

    @staticmethod
    def type() -> str:
        return ENVIRONMENT_TYPE

    @classmethod
    def resource_capabilities(cls) -> EnvironmentResourceCapabilities:
        return EnvironmentResourceCapabilities(
            cpu_limit=True, memory_limit=True, fractional_cpus=True
        )

    @classmethod
    def preflight(cls) -> None:
        """Harbor's hook: SystemExit naming every missing piece: the bwrap sandbox's
        (preflight.py), the overlay's, the cgroups' and Docker's (images.py)."""
        problems = [*find_problems(), *overlay_problems(), *cgroup_problems(), *docker_problems()]
        if problems:
            raise SystemExit("The container sandbox cannot run here:\n" + "\n".join(problems))

    @property
    def workdir(self) -> PurePosixPath:
        """task.toml's workdir, else the image's WORKDIR, else /app."""
        workdir = self.task_env_config.workdir
        if workdir:
            return PurePosixPath(workdir)
        image_workdir = None if self._image is None else self._image.config.workdir
        return PurePosixPath(image_workdir) if image_workdir else DEFAULT_WORKDIR

    def _validate_definition(self) -> None:
        # A compose file is refused by start(), as a task without an image is.
        self._validate_mounts()

    def _recipe(self) -> Recipe:
        assert self._image is not None  # start() found it first
        limits = Limits(
            cpus=self._resource_limit_value("cpu", auto_mode=ResourceMode.LIMIT),
            memory_mb=self._resource_limit_value("memory", auto_mode=ResourceMode.LIMIT),
        )
        return dataclasses.replace(super()._recipe(), image_root=self._image.rootfs, limits=limits)

    async def start(self, force_build: bool) -> None:
        """Build (or find) the task's image, then start the sandbox over it.

        `force_build` is not followed: an image is found again by the hash of its whole
        build context (images.py), so a build that would change it has a new key.
        """
        self._check_not_started()
        need = read_need(self.environment_dir, self.task_env_config.docker_image)
        if need.kind is NeedKind.COMPOSE:
            raise EnvironmentUnsupportedError(
                f"{COMPOSE_FILE_NAME} tasks need a container engine with Compose: the "
                "container sandbox runs a single environment; use Harbor's docker backend."
            )
        source = image_source(self.environment_dir, need)
        if source is None:
            raise EnvironmentUnsupportedError(
                "the task declares no image (no environment/Dockerfile, no docker_image): "
                "run it on the local sandbox"
            )
        asked = time.monotonic()
        image = await asyncio.to_thread(
            ensure_image_root,
            source,
            self._images_dir,
            timeout_s=self.task_env_config.build_timeout_sec,
            progress=self.logger.info,
            docker=self._docker,
        )
        # What this trial waited for its image: its own build, or another trial's on
        # this node (the lock's wait), which the image's own build_s does not count.
        waited_s = time.monotonic() - asked
        if self._forwards and not has_command(image.rootfs, "python3"):
            # The forward's sandbox half (relay.py) runs on the sandbox's python3.
            raise EnvironmentUnsupportedError(
                f"image {image.reference} has no python3, which the relay to the capture "
                "proxy runs on inside the sandbox (an agent that runs in the sandbox "
                "calls the model through it): install python3 (3.8 or later) in the image"
            )
        if image.config.user.partition(":")[0] not in _ROOT:
            raise EnvironmentUnsupportedError(
                f"image {image.reference} sets USER {image.config.user}, and the container "
                "sandbox runs every command as root (its user namespace maps one uid): "
                "drop USER from the Dockerfile (or set it to root), or use Harbor's docker "
                "backend"
            )
        self._image = image
        image_env = dict(image.config.env)
        # The image's variables over the sandbox's base ones; its PATH after the tools'.
        self._env = {
            **self._env,
            **image_env,
            "PATH": tools_path(self._tools, image_env.get("PATH", SANDBOX_PATH)),
        }
        self.logger.info(f"Running over image {image.reference} ({image.digest[:19]})")
        await self._start_sandbox(
            {
                "kind": "image",
                "reference": image.reference,
                "digest": image.digest,
                "build_s": waited_s if image.built or waited_s >= _WAITED_S else 0.0,
                "built": image.built,
                "log": None if image.log is None else str(image.log),
            }
        )
