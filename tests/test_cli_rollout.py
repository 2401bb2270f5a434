"""`harbor-ray rollout` as users run it, and its exit codes."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from tests.fake_docker import path_with_docker
from tests.processes import gone

pytestmark = pytest.mark.integration


def rollout(*args: str, env: dict[str, str] | None = None
            ) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "harbor_ray.cli", "rollout", *args],
                          capture_output=True, text=True, timeout=300, env=env)


def test_oracle_rollouts_all_ok(tmp_path: Path) -> None:
    done = rollout("--agent", "oracle", "--task", "hello-file", "--task", "count-words",
                   "-n", "2", "--concurrency", "2", "--out", str(tmp_path))
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted((r["task"], r["attempt"]) for r in rows) == [
        ("count-words", 0), ("count-words", 1), ("hello-file", 0), ("hello-file", 1)]
    assert all(r["ok"] and r["reward"] == 1.0 for r in rows)
    assert "hello-file" in done.stdout and "rollouts" in done.stdout


def test_failed_rollout_exits_one(tmp_path: Path) -> None:
    task = tmp_path / "slow"
    (hello,) = select_tasks(resolve_dataset("samples"), ["hello-file"])
    shutil.copytree(hello.path, task)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 303\n")
    done = rollout("--agent", "oracle", "--dataset", str(task), "--deadline", "5",
                   "--out", str(tmp_path / "out"))
    assert done.returncode == 1, done.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert row["error_type"] == "deadline" and row["reward"] is None
    assert gone("sleep 303")


@pytest.mark.parametrize(("args", "says"), [
    (["--agent", "terminus-2"], "--llm-url"),
    (["--agent", "oracle", "--task", "no-such-task"], "no-such-task"),
    (["--agent", "no-such-agent"], "unknown agent"),
    (["--agent", "oracle", "--sandbox", "docker"], "not usable"),
    (["--agent", "oracle", "--dataset", "https://example.com/x.git"], "network"),
])
def test_could_not_start_exits_two(tmp_path: Path, args: list[str], says: str) -> None:
    # A docker CLI without a daemon, whatever this machine has.
    env = {**os.environ, "PATH": path_with_docker(tmp_path / "bin", daemon=False)}
    done = rollout(*args, "--out", str(tmp_path), env=env)
    assert done.returncode == 2, done.stderr
    assert says in " ".join(done.stderr.split())
