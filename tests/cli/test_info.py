"""`harbor-ray info --json`: what this machine can run, as data."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from tests.fake_docker import path_with_docker

pytestmark = pytest.mark.integration


def test_info_json_lists_backends_agents_and_datasets(tmp_path) -> None:
    broken = tmp_path / "tasks" / "broken-task"
    broken.mkdir(parents=True)
    (broken / "task.toml").write_text("not = [valid")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harbor_ray.cli",
            "info",
            "--json",
            "--dataset",
            str(tmp_path / "tasks"),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PATH": path_with_docker(tmp_path / "bin", daemon=False)},
    )
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    sandboxes = {row["name"]: row for row in data["sandboxes"]}
    assert sandboxes["local"]["usable"]
    # Which backends give a task its own image, and the container sandbox is usable only
    # when images can be built: the Docker CLI here has no daemon behind it.
    assert not sandboxes["local"]["task_image"] and sandboxes["container"]["task_image"]
    assert not sandboxes["container"]["usable"]
    assert "Docker daemon" in sandboxes["container"]["reason"]
    assert not sandboxes["docker"]["usable"]
    assert sandboxes["docker"]["reason"].startswith("Docker daemon is not running")
    assert {"e2b", "modal", "daytona", "runloop"} <= sandboxes.keys()
    agents = {row["agent"]: row for row in data["agents"]}
    assert agents["terminus-2"]["runs"] == "host" and agents["terminus-2"]["wired"]
    assert agents["claude-code"]["runs"] == "sandbox"
    assert not agents["oracle"]["needs_model"]
    samples, mine = data["datasets"]
    assert len(samples["tasks"]) == 7 and "hello-file" in samples["tasks"]
    assert mine["tasks"] == [] and mine["problems"][0]["task"] == "broken-task"
    assert data["engine"] is None
    harnesses = {row["name"]: row for row in data["harnesses"]}
    assert harnesses["codex"]["qualified"] and not harnesses["goose"]["qualified"]
    assert harnesses["goose"]["reason"]
