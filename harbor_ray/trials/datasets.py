"""Harbor datasets, resolved into an ordered list of validated tasks.

`resolve_dataset` takes a spec (`samples`, a task directory, a directory of them,
`<registry.json>:<dataset>[@<version>]`, or a hub or registry dataset marked `hf://` or
`harbor://`) and loads each task with Harbor's `Task`; a task that fails becomes a
`TaskProblem` and never stops the others. A marked dataset is served from the dataset
cache (`dataset_cache`), fetched into it first when missing; any other spec that needs
the network is refused, and the rest only read files. Each spec's meaning and order:
docs/commands.md, "Task datasets".
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from importlib import resources
from pathlib import Path

from harbor.models.registry import DatasetSpec, Registry
from harbor.models.task.config import NetworkMode
from harbor.models.task.paths import TaskPaths
from harbor.models.task.task import Task
from harbor.registry.client.base import resolve_version
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from harbor_ray.errors import DatasetError
from harbor_ray.trials.dataset_cache import (
    HUB_PREFIX,
    REGISTRY_PREFIX,
    default_cache_root,
    local_dataset,
    parse_remote_spec,
)
from harbor_ray.trials.environment_need import EnvironmentNeed, read_need

__all__ = [
    "SAMPLES_SPECS",
    "DatasetError",
    "DatasetReport",
    "TaskProblem",
    "TaskRef",
    "resolve_dataset",
    "select_tasks",
]

SAMPLES_SPECS = frozenset({"samples", "harbor_ray:samples"})

_REGISTRY_SUFFIX = ".json"
_NEEDS_NETWORK = "needs the network, which this deployment does not have"
_REMOTE_MARKS = f"{HUB_PREFIX}ORG/NAME[@REVISION] or {REGISTRY_PREFIX}NAME[@VERSION]"


class TaskRef(BaseModel):
    """One loadable task, with what a rollout needs to know before starting it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(description="The task's directory name, or its name in the registry.")
    path: Path = Field(description="The task directory, absolute.")
    has_solution: bool = Field(
        description="A solve script exists, so the oracle agent can run the task."
    )
    workdir: str | None = Field(
        description="[environment].workdir; None leaves it to the environment "
        "(/app in the bwrap sandbox, the image's WORKDIR in Docker)."
    )
    agent_timeout_sec: float | None = Field(description="[agent].timeout_sec; None: no limit.")
    verifier_timeout_sec: float = Field(description="[verifier].timeout_sec.")
    network_mode: NetworkMode = Field(
        description="[environment].network_mode as Harbor resolves it, the deprecated "
        "allow_internet included. Harbor's default, when task.toml says nothing, is public."
    )
    network_mode_declared: bool = Field(
        description="Whether task.toml states the network mode (or allow_internet). The "
        "bwrap sandbox gives the network only to tasks that ask for it."
    )
    allowed_hosts: tuple[str, ...] = Field(
        default=(), description="Hosts reachable when network_mode is allowlist."
    )
    agent_network_mode: NetworkMode | None = Field(
        default=None, description="[agent].network_mode: an override for the agent phase."
    )
    environment: EnvironmentNeed = Field(
        description="What the task's environment asks of a sandbox (environment_need.py): "
        "whether it needs its own image, and why."
    )


class TaskProblem(BaseModel):
    """A task of the dataset that cannot be run, and why."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    path: Path = Field(description="Where the task was looked for (in its git repo, for one).")
    reason: str


class DatasetReport(BaseModel):
    """A resolved dataset: the tasks that load, in dataset order, and the ones that do not."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    spec: str = Field(description="The spec the dataset was resolved from.")
    tasks: list[TaskRef]
    problems: list[TaskProblem]


def resolve_dataset(spec: str, *, cache: Path | None = None) -> DatasetReport:
    """Resolve a dataset spec (see the module docstring) into its tasks and problems.

    `cache` is the dataset cache for `hf://` and `harbor://` specs (default:
    `default_cache_root()`). Raises `DatasetError` when the spec names no dataset at all:
    a missing path, an unreadable registry, an unknown dataset, a directory without
    tasks, or a source that needs the network and is neither cached nor fetchable.
    """
    if spec in SAMPLES_SPECS:
        loaded = _directory_tasks(_samples_dir())
    elif (remote := parse_remote_spec(spec)) is not None:
        loaded = _directory_tasks(local_dataset(remote, cache or default_cache_root()))
    elif "://" in spec or spec.startswith("git@"):
        raise DatasetError(
            f"{spec!r} is a remote source: resolving it {_NEEDS_NETWORK}. "
            f"Datasets marked {_REMOTE_MARKS} are fetched into the dataset cache."
        )
    elif (registry := _registry_spec(spec)) is not None:
        loaded = _registry_tasks(*registry)
    elif Path(spec).expanduser().is_dir():
        loaded = _directory_tasks(Path(spec).expanduser())
    else:
        raise DatasetError(
            f"{spec!r} is not a task directory, a directory of tasks or "
            "<registry.json>:<dataset>[@<version>]. As a dataset or package name it would "
            f"be looked up in Harbor's remote registry: that {_NEEDS_NETWORK}. "
            f"Datasets marked {_REMOTE_MARKS} are fetched into the dataset cache."
        )
    return DatasetReport(
        spec=spec,
        tasks=[item for item in loaded if isinstance(item, TaskRef)],
        problems=[item for item in loaded if isinstance(item, TaskProblem)],
    )


def select_tasks(report: DatasetReport, names: Sequence[str] | None) -> list[TaskRef]:
    """The named tasks, in dataset order; all of them when `names` is None.

    A name the dataset does not hold is an error that names it, says so when the task
    exists but is broken, and lists the tasks there are: a typo must not silently run
    nothing.
    """
    assert not isinstance(names, str), "names is a sequence of task names, not one string"
    if names is None:
        return list(report.tasks)
    available = [task.name for task in report.tasks]
    missing = [name for name in dict.fromkeys(names) if name not in available]
    if missing:
        broken = {problem.name: problem.reason for problem in report.problems}
        what = [
            f"{name!r} is broken ({broken[name]})" if name in broken else f"{name!r} is unknown"
            for name in missing
        ]
        raise DatasetError(
            f"In dataset {report.spec!r}: {'; '.join(what)}. "
            f"Available tasks: {', '.join(available) or 'none'}."
        )
    wanted = set(names)
    return [task for task in report.tasks if task.name in wanted]


def _samples_dir() -> Path:
    tasks = resources.files("harbor_ray") / "samples" / "tasks"
    # Harbor runs a task from a directory; a zipped install has none to give it.
    if not isinstance(tasks, Path) or not tasks.is_dir():
        raise DatasetError(f"harbor_ray's sample tasks are not a directory here: {tasks}")
    return tasks


def _directory_tasks(directory: Path) -> list[TaskRef | TaskProblem]:
    directory = directory.resolve()
    if (directory / TaskPaths.CONFIG_FILENAME).is_file():
        return [_load_task(directory.name, directory)]
    candidates = sorted(
        (path for path in directory.iterdir() if path.is_dir() and not path.name.startswith(".")),
        key=lambda path: path.name,
    )
    if not any((path / TaskPaths.CONFIG_FILENAME).is_file() for path in candidates):
        raise DatasetError(
            f"{directory} holds no tasks: a task directory has a task.toml, a dataset "
            "directory has task directories."
        )
    return [_load_task(path.name, path) for path in candidates]


def _registry_spec(spec: str) -> tuple[Path, str | None] | None:
    """`<registry.json>:<dataset>[@<version>]` split in two; None for other specs."""
    path, separator, dataset = spec.partition(_REGISTRY_SUFFIX + ":")
    if separator:
        return Path(path + _REGISTRY_SUFFIX).expanduser(), dataset
    if spec.endswith(_REGISTRY_SUFFIX):
        return Path(spec).expanduser(), None
    return None


def _registry_tasks(registry_path: Path, dataset: str | None) -> list[TaskRef | TaskProblem]:
    try:
        registry = Registry.from_path(registry_path)
    except (OSError, ValueError) as error:
        reason = _one_line(error)
        raise DatasetError(f"Cannot read the registry {registry_path}: {reason}") from error
    spec = _find_dataset(registry, registry_path, dataset)
    base = registry_path.resolve().parent
    seen: set[str] = set()
    loaded: list[TaskRef | TaskProblem] = []
    for entry in spec.tasks:
        path = base / entry.path.expanduser()
        if entry.name in seen:
            reason = f"listed more than once in {spec.name}@{spec.version}; the first is used"
            loaded.append(TaskProblem(name=entry.name, path=path, reason=reason))
        elif entry.git_url is not None:
            source = f"{entry.git_url}@{entry.git_commit_id or 'HEAD'}"
            reason = (
                f"fetched with git from {source}: that {_NEEDS_NETWORK}; clone it and "
                "list its local path instead"
            )
            loaded.append(TaskProblem(name=entry.name, path=entry.path, reason=reason))
        else:
            loaded.append(_load_task(entry.name, path))
        seen.add(entry.name)
    return loaded


def _find_dataset(registry: Registry, registry_path: Path, dataset: str | None) -> DatasetSpec:
    listed = ", ".join(f"{spec.name}@{spec.version}" for spec in registry.datasets) or "none"
    if not dataset:
        raise DatasetError(
            f"Name a dataset of {registry_path}: {registry_path}:<dataset>[@<version>]. "
            f"It lists: {listed}."
        )
    name, _, version = dataset.partition("@")
    versions = {spec.version: spec for spec in registry.datasets if spec.name == name}
    if not versions:
        raise DatasetError(f"{registry_path} has no dataset {name!r}. It lists: {listed}.")
    chosen = version or resolve_version(list(versions))
    if chosen not in versions:
        raise DatasetError(
            f"{registry_path} has no version {chosen!r} of {name!r}; it has {', '.join(versions)}."
        )
    return versions[chosen]


def _load_task(name: str, path: Path) -> TaskRef | TaskProblem:
    if not path.is_dir():
        return TaskProblem(name=name, path=path, reason="no such task directory")
    if not (path / TaskPaths.CONFIG_FILENAME).is_file():
        return TaskProblem(name=name, path=path, reason="no task.toml: not a task directory")
    try:
        task = Task(path)
    # What Harbor's own Task.is_valid_dir treats as "not a valid task".
    except (OSError, ValueError, RuntimeError) as error:
        return TaskProblem(name=name, path=path, reason=_describe(error))
    config = task.config
    environment = config.environment
    return TaskRef(
        name=name,
        path=task.task_dir,
        has_solution=_has_solution(task),
        workdir=environment.workdir,
        agent_timeout_sec=config.agent.timeout_sec,
        verifier_timeout_sec=config.verifier.timeout_sec,
        network_mode=environment.network_mode,
        network_mode_declared="network_mode" in environment.model_fields_set,
        allowed_hosts=tuple(environment.allowed_hosts or ()),
        agent_network_mode=config.agent.network_mode,
        environment=read_need(task.paths.environment_dir, environment.docker_image),
    )


def _has_solution(task: Task) -> bool:
    """Whether Harbor's oracle agent finds a solve script (for every step, if any)."""
    task_os = task.config.environment.os
    if task.paths.discovered_solve_path_for(task_os) is not None:
        return True
    steps = task.config.steps or []
    return bool(steps) and all(
        task.paths.discovered_step_solve_path_for(step.name, task_os) is not None for step in steps
    )


def _one_line(error: Exception) -> str:
    return " ".join(str(error).split())


def _describe(error: Exception) -> str:
    """What is wrong with a task, from the error Harbor raised loading it."""
    text = _one_line(error)
    if isinstance(error, tomllib.TOMLDecodeError | ValidationError):
        return f"invalid task.toml: {text}"
    if isinstance(error, OSError):
        return text
    return f"{type(error).__name__}: {text}"
