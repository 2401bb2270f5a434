"""The tasks the playground serves: the datasets named on its command line, resolved
once, and every lookup a visitor makes checked against them.

A visitor names a dataset by the spec it was served under, a task by its name in that
dataset and a file by its path relative to the task directory. Anything else (another
dataset, `../`, an absolute path, a link leading out of the task) is refused with a
`PlaygroundRefusal`, whatever exists on disk: the page reads only what is listed here.
"""

from __future__ import annotations

import tomllib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from harbor_ray.errors import PlaygroundRefusal
from harbor_ray.trials.datasets import DatasetReport, TaskRef

__all__ = ["Catalog", "TaskSummary"]

_INSTRUCTION = "instruction.md"
_SETTINGS = "task.toml"
_MAX_FILES = 500  # a task listing this many files is a repository, not a task
_MAX_FILE_BYTES = 256 * 1024
_SUMMARY_CHARS = 200


@dataclass(frozen=True)
class TaskSummary:
    """One row of the task browser: enough to filter on as the visitor types."""

    dataset: str
    name: str
    summary: str  # the instruction's opening, on one line
    has_solution: bool


class Catalog:
    """The datasets served, by spec, and the checked lookups into them."""

    def __init__(self, reports: Sequence[DatasetReport]) -> None:
        self._tasks: dict[str, dict[str, TaskRef]] = {
            report.spec: {task.name: task for task in report.tasks} for report in reports
        }
        self.problems = [
            {"dataset": report.spec, "task": problem.name, "reason": problem.reason}
            for report in reports
            for problem in report.problems
        ]
        # Read once: the task browser asks for every summary on each page load.
        self._summaries = [
            TaskSummary(
                dataset=spec,
                name=task.name,
                summary=_opening(_read(task.path / _INSTRUCTION)),
                has_solution=task.has_solution,
            )
            for spec, tasks in self._tasks.items()
            for task in tasks.values()
        ]

    @property
    def datasets(self) -> list[str]:
        return list(self._tasks)

    def summaries(self) -> list[TaskSummary]:
        return list(self._summaries)

    def task(self, dataset: str, name: str) -> TaskRef:
        """The task `name` of the served dataset `dataset`, or a refusal naming neither
        (a visitor learns nothing of what is not served)."""
        tasks = self._tasks.get(dataset)
        if tasks is None:
            raise PlaygroundRefusal("no such dataset is served here")
        task = tasks.get(name)
        if task is None:
            raise PlaygroundRefusal("the dataset serves no such task")
        return task

    def detail(self, dataset: str, name: str) -> dict[str, Any]:
        """A task's instruction, settings (task.toml, parsed and as written) and files."""
        task = self.task(dataset, name)
        settings_text = _read(task.path / _SETTINGS)
        try:
            settings: dict[str, Any] = tomllib.loads(settings_text)
        except tomllib.TOMLDecodeError:  # it loaded in Harbor, so this is not expected
            settings = {}
        return {
            "dataset": dataset,
            "name": name,
            "instruction": _read(task.path / _INSTRUCTION),
            "settings": settings,
            "settings_text": settings_text,
            "has_solution": task.has_solution,
            "files": self.files(dataset, name),
        }

    def files(self, dataset: str, name: str) -> list[str]:
        """The task's files, relative POSIX paths in order; links leading out of the task
        directory are left out."""
        root = self.task(dataset, name).path.resolve()
        found: list[str] = []
        for path in sorted(root.rglob("*")):
            if len(found) == _MAX_FILES:
                break
            if path.is_file() and path.resolve().is_relative_to(root):
                found.append(path.relative_to(root).as_posix())
        return found

    def file_text(self, dataset: str, name: str, relative: str) -> str:
        """The text of one listed file of the task (at most 256 KiB; bytes that are not
        UTF-8 replaced)."""
        pure = PurePosixPath(relative)
        if pure.is_absolute() or ".." in pure.parts or "\\" in relative:
            raise PlaygroundRefusal("a file is named by its path inside the task", status=400)
        if relative not in self.files(dataset, name):
            raise PlaygroundRefusal("the task has no such file")
        path = self.task(dataset, name).path.resolve() / relative
        with path.open("rb") as source:
            data = source.read(_MAX_FILE_BYTES + 1)
        text = data[:_MAX_FILE_BYTES].decode(errors="replace")
        return text + ("\n[... cut at 256 KiB]" if len(data) > _MAX_FILE_BYTES else "")


def _read(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _opening(text: str) -> str:
    return " ".join(text.split())[:_SUMMARY_CHARS]
