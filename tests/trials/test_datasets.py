"""Dataset specs resolved into tasks: every spec kind, broken tasks, order, selection."""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any

import pytest
from harbor.models.task.config import NetworkMode
from pydantic import ValidationError

from harbor_ray.errors import DatasetError
from harbor_ray.trials.datasets import (
    DatasetReport,
    TaskProblem,
    TaskRef,
    resolve_dataset,
    select_tasks,
)
from harbor_ray.trials.environment_need import EnvironmentNeed, NeedKind

GOOD_TOML = "[agent]\ntimeout_sec = 30.0\n\n[verifier]\ntimeout_sec = 20.0\n"


def write_task(
    directory: Path,
    *,
    toml: str = GOOD_TOML,
    instruction: bool = True,
    test: bool = True,
    solution: bool = True,
) -> Path:
    """A minimal task directory; each flag leaves one part out to break it."""
    (directory / "environment").mkdir(parents=True)
    (directory / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\n")
    (directory / "task.toml").write_text(toml)
    if instruction:
        (directory / "instruction.md").write_text("Do the thing.\n")
    if test:
        (directory / "tests").mkdir()
        (directory / "tests" / "test.sh").write_text(
            "#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n"
        )
    if solution:
        (directory / "solution").mkdir()
        (directory / "solution" / "solve.sh").write_text("#!/bin/bash\ntrue\n")
    return directory


def write_registry(path: Path, datasets: list[dict[str, Any]]) -> Path:
    path.write_text(json.dumps(datasets))
    return path


def dataset(name: str, version: str, tasks: list[dict[str, Any]]) -> dict[str, Any]:
    return {"name": name, "version": version, "description": "", "tasks": tasks}


def names(report: DatasetReport) -> list[str]:
    return [task.name for task in report.tasks]


def problem(report: DatasetReport, name: str) -> TaskProblem:
    [found] = [item for item in report.problems if item.name == name]
    return found


@pytest.fixture
def no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt to open a connection fails the test."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("resolving a dataset tried the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(socket, "getaddrinfo", refuse)


# --- The bundled samples ---------------------------------------------------------------


def test_samples_resolve_by_either_name_sorted_and_sound() -> None:
    report = resolve_dataset("samples")

    assert report.problems == []
    assert len(report.tasks) >= 6
    assert names(report) == sorted(names(report))
    assert all(task.has_solution for task in report.tasks)
    assert all(task.workdir == "/app" for task in report.tasks)
    assert resolve_dataset("harbor_ray:samples").tasks == report.tasks


# --- One task, and a directory of tasks ------------------------------------------------


def test_a_task_directory_is_a_dataset_of_one_with_its_settings(tmp_path: Path) -> None:
    toml = (
        '[agent]\ntimeout_sec = 45.0\nnetwork_mode = "no-network"\n\n'
        "[verifier]\ntimeout_sec = 15.0\n\n"
        '[environment]\nworkdir = "/work"\nallow_internet = false\n'
    )
    task = write_task(tmp_path / "my-task", toml=toml, solution=False)

    with pytest.warns(DeprecationWarning, match="allow_internet"):
        report = resolve_dataset(str(task))

    assert report.problems == []
    assert report.tasks == [
        TaskRef(
            name="my-task",
            path=task,
            has_solution=False,
            workdir="/work",
            agent_timeout_sec=45.0,
            verifier_timeout_sec=15.0,
            # Harbor turns the deprecated allow_internet into a declared network mode.
            network_mode=NetworkMode.NO_NETWORK,
            network_mode_declared=True,
            agent_network_mode=NetworkMode.NO_NETWORK,
            environment=EnvironmentNeed(NeedKind.BASE),
        )
    ]


def test_a_task_silent_about_the_network_gets_harbors_defaults(tmp_path: Path) -> None:
    [task] = resolve_dataset(str(write_task(tmp_path / "plain"))).tasks

    assert task.has_solution
    assert task.workdir is None
    assert task.network_mode is NetworkMode.PUBLIC
    assert not task.network_mode_declared
    assert task.agent_network_mode is None


def test_a_directory_of_tasks_is_sorted_by_name(tmp_path: Path) -> None:
    for name in ["zeta", "alpha", "mid", "Beta"]:
        write_task(tmp_path / name)
    (tmp_path / ".cache").mkdir()
    (tmp_path / "notes.txt").write_text("not a task")

    report = resolve_dataset(str(tmp_path))

    assert names(report) == ["Beta", "alpha", "mid", "zeta"]
    assert report.problems == []
    assert report.spec == str(tmp_path)


def test_broken_tasks_are_reported_by_name_while_the_others_load(tmp_path: Path) -> None:
    write_task(tmp_path / "good-1")
    write_task(tmp_path / "no-instruction", instruction=False)
    write_task(tmp_path / "no-test", test=False)
    write_task(tmp_path / "bad-syntax", toml="[agent\ntimeout_sec = 1\n")
    write_task(tmp_path / "bad-schema", toml='[agent]\ntimeout_sec = "soon"\n')
    (tmp_path / "not-a-task").mkdir()
    write_task(tmp_path / "good-2")

    report = resolve_dataset(str(tmp_path))

    assert names(report) == ["good-1", "good-2"]
    assert [item.name for item in report.problems] == [
        "bad-schema",
        "bad-syntax",
        "no-instruction",
        "no-test",
        "not-a-task",
    ]
    assert "instruction.md" in problem(report, "no-instruction").reason
    assert "tests/test.sh" in problem(report, "no-test").reason
    assert problem(report, "bad-syntax").reason.startswith("invalid task.toml:")
    bad_schema = problem(report, "bad-schema").reason
    assert bad_schema.startswith("invalid task.toml:")
    assert "agent.timeout_sec" in bad_schema
    assert "\n" not in bad_schema
    assert "no task.toml" in problem(report, "not-a-task").reason
    assert problem(report, "no-test").path == tmp_path / "no-test"


def test_a_directory_without_tasks_is_refused(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()

    with pytest.raises(DatasetError, match="holds no tasks"):
        resolve_dataset(str(tmp_path))


# --- Local registries ------------------------------------------------------------------


@pytest.fixture
def registry(tmp_path: Path) -> Path:
    """A registry next to its tasks: two versions of one dataset, and a second dataset."""
    for name in ["alpha", "beta", "zeta"]:
        write_task(tmp_path / "tasks" / name)
    return write_registry(
        tmp_path / "registry.json",
        [
            dataset("demo", "1.0", [{"name": "alpha", "path": "tasks/alpha"}]),
            dataset(
                "demo",
                "2.0",
                [
                    {"name": "zeta", "path": "tasks/zeta"},
                    {"name": "alpha", "path": "tasks/alpha"},
                    {"name": "beta", "path": str(tmp_path / "tasks" / "beta")},
                ],
            ),
            dataset("other", "head", [{"name": "beta", "path": "tasks/beta"}]),
        ],
    )


def test_a_registry_dataset_keeps_its_listed_order(registry: Path) -> None:
    report = resolve_dataset(f"{registry}:demo@2.0")

    assert names(report) == ["zeta", "alpha", "beta"]
    assert report.problems == []
    # Relative paths are taken from the registry file's directory, not the cwd.
    assert report.tasks[0].path == registry.parent / "tasks" / "zeta"


def test_a_registry_dataset_without_version_takes_harbors_choice(registry: Path) -> None:
    assert names(resolve_dataset(f"{registry}:demo")) == ["zeta", "alpha", "beta"]
    assert names(resolve_dataset(f"{registry}:demo@1.0")) == ["alpha"]


@pytest.mark.parametrize(
    ("suffix", "message"),
    [
        ("", r"Name a dataset of .*It lists: demo@1\.0, demo@2\.0, other@head"),
        (":nope", r"has no dataset 'nope'\. It lists: demo@1\.0"),
        (":demo@3.0", r"has no version '3\.0' of 'demo'; it has 1\.0, 2\.0"),
    ],
    ids=["no-name", "unknown-dataset", "unknown-version"],
)
def test_an_unknown_registry_dataset_is_refused_with_what_there_is(
    registry: Path, suffix: str, message: str
) -> None:
    with pytest.raises(DatasetError, match=message):
        resolve_dataset(f"{registry}{suffix}")


def test_an_unreadable_registry_is_refused(tmp_path: Path) -> None:
    (tmp_path / "registry.json").write_text("{not json")

    with pytest.raises(DatasetError, match="Cannot read the registry"):
        resolve_dataset(f"{tmp_path / 'registry.json'}:demo")
    with pytest.raises(DatasetError, match="Cannot read the registry"):
        resolve_dataset(f"{tmp_path / 'missing.json'}:demo")


def test_registry_entries_that_need_git_are_refused_and_the_rest_load(
    tmp_path: Path, no_network: None
) -> None:
    write_task(tmp_path / "local")
    registry = write_registry(
        tmp_path / "registry.json",
        [
            dataset(
                "mixed",
                "1.0",
                [
                    {
                        "name": "remote",
                        "git_url": "https://github.com/example/tasks.git",
                        "git_commit_id": "abc123",
                        "path": "tasks/remote",
                    },
                    {"name": "local", "path": "local"},
                    {"name": "gone", "path": "missing"},
                    {"name": "local", "path": "local"},
                ],
            )
        ],
    )

    report = resolve_dataset(f"{registry}:mixed@1.0")

    assert names(report) == ["local"]
    assert [item.name for item in report.problems] == ["remote", "gone", "local"]
    remote = problem(report, "remote").reason
    assert "https://github.com/example/tasks.git@abc123" in remote
    assert "needs the network, which this deployment does not have" in remote
    assert problem(report, "gone").reason == "no such task directory"
    assert "listed more than once" in report.problems[2].reason


@pytest.mark.parametrize(
    "spec",
    [
        "https://raw.githubusercontent.com/laude-institute/harbor/main/registry.json",
        "git@github.com:example/tasks.git",
        "terminal-bench@2.0",
        "harbor/hello-world",
    ],
)
def test_specs_that_need_the_network_are_refused(spec: str, no_network: None) -> None:
    with pytest.raises(DatasetError, match="needs the network, which this deployment"):
        resolve_dataset(spec)


# --- Selecting tasks -------------------------------------------------------------------


@pytest.fixture
def report(tmp_path: Path) -> DatasetReport:
    for name in ["alpha", "beta", "gamma"]:
        write_task(tmp_path / name)
    write_task(tmp_path / "broken", instruction=False)
    return resolve_dataset(str(tmp_path))


def test_select_without_names_is_every_task(report: DatasetReport) -> None:
    assert select_tasks(report, None) == report.tasks


def test_select_keeps_dataset_order(report: DatasetReport) -> None:
    chosen = select_tasks(report, ["gamma", "alpha", "gamma"])

    assert [task.name for task in chosen] == ["alpha", "gamma"]


def test_select_names_unknown_and_broken_tasks_and_lists_the_rest(
    report: DatasetReport,
) -> None:
    with pytest.raises(DatasetError) as caught:
        select_tasks(report, ["alpha", "typo", "broken"])

    message = str(caught.value)
    assert "'typo' is unknown" in message
    assert "'broken' is broken (" in message and "instruction.md" in message
    assert message.endswith("Available tasks: alpha, beta, gamma.")


def test_select_refuses_a_bare_string(report: DatasetReport) -> None:
    with pytest.raises(AssertionError, match="not one string"):
        select_tasks(report, "alpha")


def test_task_refs_are_frozen(report: DatasetReport) -> None:
    with pytest.raises(ValidationError):
        report.tasks[0].name = "renamed"  # type: ignore[misc]
