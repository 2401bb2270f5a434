"""`harbor-ray images build`: a dataset's task images built and unpacked ahead of a
sweep, on this machine or on every node of a Ray cluster.

The container sandbox builds a task's image the first time a trial of it starts on a
node (trials/images.py: once per image per node, other trials wait), so a sweep that
skips this step pays each build inside its first rollouts. Done ahead, the sweep's
rollouts start at once, and a Dockerfile that does not build is found before any
rollout is spent on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harbor_ray.errors import EnvironmentBuildError, StartError
from harbor_ray.jobs.runs import Progress, silent, tasks_of
from harbor_ray.trials.datasets import TaskRef
from harbor_ray.trials.environment_need import NeedKind
from harbor_ray.trials.images import (
    DEFAULT_IMAGES_DIR,
    ImageSource,
    docker_problems,
    ensure_image_root,
    image_source,
)

__all__ = ["ImageOutcome", "ImagesRequest", "build_images"]


@dataclass(frozen=True)
class ImagesRequest:
    """What to build; the fields are `harbor-ray images build`'s flags."""

    dataset: str = "samples"
    tasks: Sequence[str] | None = None  # None: every task
    images_dir: Path = DEFAULT_IMAGES_DIR  # the container sandbox's `images_dir`
    ray_address: str | None = None  # None: this machine only; else every alive node
    docker: str = "docker"


@dataclass(frozen=True)
class ImageOutcome:
    """One task's image on one node: built (or found ready), or why not."""

    task: str
    node: str  # the node's IP address, or "local"
    digest: str | None
    built: bool
    seconds: float
    log: str | None
    error: str | None = None


def build_images(request: ImagesRequest, *, progress: Progress = silent) -> list[ImageOutcome]:
    """Build every image the request's tasks need, on this machine or on each node.
    Tasks that declare no image are skipped (said to `progress`); a task whose image
    fails is an outcome with its error and log, and the others go on."""
    wanted = _sources(tasks_of(request.dataset, request.tasks, progress), progress)
    if request.ray_address is None:
        if problems := docker_problems(request.docker):
            raise StartError("images cannot be built here: " + "; ".join(problems))
        return _build_here(wanted, request.images_dir, request.docker, "local", progress)
    return _build_on_each_node(wanted, request, progress)


def _sources(tasks: Sequence[TaskRef], progress: Progress) -> list[tuple[str, ImageSource]]:
    found = []
    for task in tasks:
        source = image_source(task.path / "environment", task.environment)
        if source is None:
            progress(
                f"{task.name}: "
                + (
                    "declares no image (runs on the local sandbox)"
                    if task.environment.kind is NeedKind.NONE
                    else "a compose task (the container sandbox runs one environment)"
                )
                + ": skipped"
            )
        else:
            found.append((task.name, source))
    if not found:
        raise StartError("no task of the dataset declares an image: nothing to build")
    return found


def _build_here(
    wanted: Sequence[tuple[str, ImageSource]],
    images_dir: Path,
    docker: str,
    node: str,
    progress: Progress,
) -> list[ImageOutcome]:
    outcomes = []
    for task, source in wanted:

        def said(line: str, task: str = task) -> None:
            progress(f"{node} {task}: {line}")

        try:
            root = ensure_image_root(source, images_dir, docker=docker, progress=said)
        except EnvironmentBuildError as exc:
            progress(f"{node} {task}: failed: {exc}")
            outcomes.append(ImageOutcome(task, node, None, False, 0.0, exc.log, str(exc)))
            continue
        outcomes.append(
            ImageOutcome(
                task,
                node,
                root.digest,
                root.built,
                root.build_s,
                None if root.log is None else str(root.log),
            )
        )
    return outcomes


def _build_on_each_node(
    wanted: Sequence[tuple[str, ImageSource]], request: ImagesRequest, progress: Progress
) -> list[ImageOutcome]:
    import ray

    from harbor_ray.cluster.nodes import alive_nodes, on_each, this_node

    def on_node() -> list[ImageOutcome]:
        here = this_node().ip
        if problems := docker_problems(request.docker):
            return [
                ImageOutcome(task, here, None, False, 0.0, None, "; ".join(problems))
                for task, _ in wanted
            ]
        return _build_here(wanted, request.images_dir, request.docker, here, silent)

    ray.init(address=request.ray_address, log_to_driver=False)
    try:
        nodes = alive_nodes()
        progress(f"building {len(wanted)} images on each of {len(nodes)} nodes")
        outcomes = []
        for node, result in on_each(ray.remote(on_node), nodes):
            if isinstance(result, BaseException):
                outcomes += [
                    ImageOutcome(
                        task, node.ip, None, False, 0.0, None, f"the node failed: {result}"
                    )
                    for task, _ in wanted
                ]
            else:
                outcomes += result
        return outcomes
    finally:
        ray.shutdown()
