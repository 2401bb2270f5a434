"""The rule that decides whether a sandbox may run a task's environment, on real task
directories resolved the way every run resolves them."""

from __future__ import annotations

from pathlib import Path

import pytest

from harbor_ray.data.result import RanIn
from harbor_ray.trials.datasets import TaskRef, resolve_dataset
from harbor_ray.trials.environment_need import (
    EnvironmentNeed,
    NeedKind,
    dockerfile_need,
    ran_in,
    refusal,
    uploads_environment_dir,
)

TOML = 'version = "1.0"\n\n[verifier]\ntimeout_sec = 10\n\n[environment]\n'


def task_dir(
    root: Path,
    *,
    dockerfile: str | None = None,
    docker_image: str | None = None,
    compose: bool = False,
    files: dict[str, str] | None = None,
) -> TaskRef:
    directory = root / "task"
    (directory / "environment").mkdir(parents=True)
    (directory / "tests").mkdir()
    (directory / "tests" / "test.sh").write_text(
        "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
    )
    (directory / "instruction.md").write_text("Do it.\n")
    toml = TOML + (f'docker_image = "{docker_image}"\n' if docker_image else "")
    (directory / "task.toml").write_text(toml)
    if dockerfile is not None:
        (directory / "environment" / "Dockerfile").write_text(dockerfile)
    if compose:
        (directory / "environment" / "docker-compose.yaml").write_text("services: {}\n")
    for name, text in (files or {}).items():
        (directory / "environment" / name).write_text(text)
    report = resolve_dataset(str(directory))
    assert report.problems == []
    (task,) = report.tasks
    return task


@pytest.mark.parametrize(
    ("dockerfile", "kind", "why"),
    [
        ("FROM debian:bookworm-slim\n", NeedKind.BASE, ""),
        (
            "# syntax=docker/dockerfile:1\nFROM ubuntu:24.04 AS base\n\nWORKDIR /src\n"
            'LABEL maintainer=x\nCMD ["sleep", "infinity"]\n',
            NeedKind.BASE,
            "",
        ),
        (
            "FROM debian:bookworm-slim\nRUN apt-get update && \\\n    apt-get install -y jq\n",
            NeedKind.BUILD,
            "environment/Dockerfile has RUN",
        ),
        (
            "FROM python:3.12\nWORKDIR /app\nCOPY . /app\nENV X=1\nRUN pip install x\n",
            NeedKind.BUILD,
            "environment/Dockerfile has COPY, ENV, RUN",
        ),
        ("FROM debian\nUSER agent\n", NeedKind.BUILD, "environment/Dockerfile has USER"),
        # A continued line is one instruction; a comment inside it is not one.
        ("FROM debian \\\n  # a comment\n  AS base\nworkdir /w\n", NeedKind.BASE, ""),
    ],
    ids=["from-only", "from-workdir-metadata", "run", "copy-env-run", "user", "continued"],
)
def test_a_dockerfile_needs_its_image_when_it_does_more_than_name_a_base(
    tmp_path: Path, dockerfile: str, kind: NeedKind, why: str
) -> None:
    task = task_dir(tmp_path, dockerfile=dockerfile)

    assert task.environment.kind is kind
    assert task.environment.why == why
    assert task.environment.needs_image is (kind is NeedKind.BUILD)


def test_the_dockerfiles_last_workdir_is_kept() -> None:
    assert dockerfile_need("FROM a\nWORKDIR /x\nWORKDIR /src/app\n").workdir == "/src/app"


def test_a_prebuilt_image_a_compose_file_and_nothing(tmp_path: Path) -> None:
    image = task_dir(tmp_path / "a", docker_image="python:3.12-slim")
    compose = task_dir(tmp_path / "b", compose=True, dockerfile="FROM debian\n")
    nothing = task_dir(tmp_path / "c", files={"data.txt": "x"})

    assert image.environment == EnvironmentNeed(
        NeedKind.IMAGE, "task.toml names docker_image python:3.12-slim", image="python:3.12-slim"
    )
    assert compose.environment.kind is NeedKind.COMPOSE  # compose wins, as in Harbor
    assert nothing.environment == EnvironmentNeed(NeedKind.NONE)


def test_the_files_of_a_task_without_an_image_are_copied_in(tmp_path: Path) -> None:
    nothing = task_dir(tmp_path / "a", files={"data.txt": "x"})
    image = task_dir(tmp_path / "b", docker_image="img", files={"data.txt": "x"})
    built = task_dir(tmp_path / "c", dockerfile="FROM debian\n", files={"data.txt": "x"})

    assert uploads_environment_dir(nothing.path / "environment")
    assert uploads_environment_dir(image.path / "environment")  # Harbor's own rule
    assert not uploads_environment_dir(built.path / "environment")  # the build's job


NEEDS = {
    "none": EnvironmentNeed(NeedKind.NONE),
    "base": EnvironmentNeed(NeedKind.BASE),
    "build": EnvironmentNeed(NeedKind.BUILD, "environment/Dockerfile has RUN"),
    "image": EnvironmentNeed(NeedKind.IMAGE, "task.toml names docker_image x"),
    "compose": EnvironmentNeed(NeedKind.COMPOSE, "environment/docker-compose.yaml ..."),
}


@pytest.mark.parametrize(
    ("need", "refused_on_local", "ran_on_local", "refused_in_image", "ran_in_image"),
    [
        ("none", False, RanIn.HOST, True, None),
        ("base", False, RanIn.HOST, False, RanIn.IMAGE),
        ("build", True, RanIn.HOST_OVERRIDE, False, RanIn.IMAGE),
        ("image", True, RanIn.HOST_OVERRIDE, False, RanIn.IMAGE),
        ("compose", True, RanIn.HOST_OVERRIDE, False, RanIn.IMAGE),
    ],
)
def test_the_rule_for_a_sandbox_with_and_without_the_tasks_image(
    need: str,
    refused_on_local: bool,
    ran_on_local: RanIn,
    refused_in_image: bool,
    ran_in_image: RanIn | None,
) -> None:
    asked = NEEDS[need]

    local = refusal(asked, task="t", sandbox="local", provides_image=False, host_userland=False)
    assert (local is not None) is refused_on_local
    if local is not None:
        # The message names the task, why, and both ways out.
        assert all(
            part in local
            for part in (
                "'t'",
                asked.why,
                "--sandbox container",
                "--host-userland",
                "host_override",
            )
        )
    # Asked for, the host's userland runs anything, and the row says which it was.
    assert (
        refusal(asked, task="t", sandbox="local", provides_image=False, host_userland=True) is None
    )
    assert ran_in(asked, provides_image=False) is ran_on_local

    container = refusal(
        asked, task="t", sandbox="container", provides_image=True, host_userland=False
    )
    assert (container is not None) is refused_in_image
    if ran_in_image is not None:
        assert ran_in(asked, provides_image=True) is ran_in_image
    else:
        assert container is not None and "declares no image" in container
