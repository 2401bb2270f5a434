"""`harbor_ray.playground.catalog`: only what the served datasets hold is read; a path
out of a task, an absolute path or another dataset is refused, whatever is on disk."""

from __future__ import annotations

from pathlib import Path

import pytest

from harbor_ray.errors import PlaygroundRefusal
from harbor_ray.playground.catalog import Catalog
from harbor_ray.trials.datasets import resolve_dataset


def test_every_sample_task_is_listed_with_its_instruction(catalog: Catalog) -> None:
    summaries = {s.name: s for s in catalog.summaries()}
    assert {"hello-file", "fix-mean"} <= set(summaries)
    assert summaries["hello-file"].dataset == "samples"
    assert summaries["hello-file"].summary


def test_a_task_shows_its_instruction_settings_and_files(catalog: Catalog) -> None:
    detail = catalog.detail("samples", "hello-file")
    assert "task.toml" in detail["files"] and "instruction.md" in detail["files"]
    assert "verifier" in detail["settings"] and detail["instruction"]
    assert catalog.file_text("samples", "hello-file", "task.toml") == detail["settings_text"]


@pytest.mark.parametrize(
    "path",
    [
        "../fix-mean/task.toml",
        "tests/../../fix-mean/task.toml",
        "/etc/passwd",
        "..\\fix-mean\\task.toml",
        "..",
        "",
    ],
)
def test_a_path_out_of_the_task_is_refused(catalog: Catalog, path: str) -> None:
    with pytest.raises(PlaygroundRefusal):
        catalog.file_text("samples", "hello-file", path)


def test_another_dataset_or_task_is_refused(catalog: Catalog, tmp_path: Path) -> None:
    with pytest.raises(PlaygroundRefusal, match="dataset"):
        catalog.detail(str(tmp_path), "hello-file")
    with pytest.raises(PlaygroundRefusal, match="task"):
        catalog.detail("samples", "../samples")


def test_a_link_out_of_a_task_is_neither_listed_nor_read(tmp_path: Path) -> None:
    task = tmp_path / "tasks" / "linked"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('version = "1.0"\n')
    (task / "instruction.md").write_text("Do it.\n")
    (task / "tests" / "test.sh").write_text("exit 0\n")
    secret = tmp_path / "secret.txt"
    secret.write_text("not for visitors")
    (task / "leak.txt").symlink_to(secret)
    catalog = Catalog([resolve_dataset(str(tmp_path / "tasks"))])
    spec = str(tmp_path / "tasks")
    assert "leak.txt" not in catalog.files(spec, "linked")
    with pytest.raises(PlaygroundRefusal):
        catalog.file_text(spec, "linked", "leak.txt")
