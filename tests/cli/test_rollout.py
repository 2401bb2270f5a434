"""`harbor-ray rollout` as users run it, and its exit codes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from tests.fake_docker import path_with_docker
from tests.fixtures.images import JQ_TASK
from tests.processes import gone

pytestmark = pytest.mark.integration


def rollout(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harbor_ray.cli", "rollout", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_oracle_rollouts_all_ok(tmp_path: Path) -> None:
    done = rollout(
        "--agent",
        "oracle",
        "--task",
        "hello-file",
        "--task",
        "count-words",
        "-n",
        "2",
        "--concurrency",
        "2",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert sorted((r["task"], r["attempt"]) for r in rows) == [
        ("count-words", 0),
        ("count-words", 1),
        ("hello-file", 0),
        ("hello-file", 1),
    ]
    assert all(r["ok"] and r["reward"] == 1.0 for r in rows)
    assert "hello-file" in done.stdout and "rollouts" in done.stdout


def test_failed_rollout_exits_one(tmp_path: Path) -> None:
    task = tmp_path / "slow"
    (hello,) = select_tasks(resolve_dataset("samples"), ["hello-file"])
    shutil.copytree(hello.path, task)
    (task / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 303\n")
    done = rollout(
        "--agent",
        "oracle",
        "--dataset",
        str(task),
        "--deadline",
        "5",
        "--out",
        str(tmp_path / "out"),
    )
    assert done.returncode == 1, done.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert row["error_type"] == "deadline" and row["reward"] is None
    assert gone("sleep 303")


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--agent", "terminus-2"], "--llm-url"),
        (["--agent", "oracle", "--task", "no-such-task"], "no-such-task"),
        (["--agent", "no-such-agent"], "unknown agent"),
        (["--agent", "oracle", "--sandbox", "docker"], "not usable"),
        (["--agent", "oracle", "--dataset", "https://example.com/x.git"], "network"),
    ],
)
def test_could_not_start_exits_two(tmp_path: Path, args: list[str], says: str) -> None:
    # A docker CLI without a daemon, whatever this machine has.
    env = {**os.environ, "PATH": path_with_docker(tmp_path / "bin", daemon=False)}
    done = rollout(*args, "--out", str(tmp_path), env=env)
    assert done.returncode == 2, done.stderr
    assert says in " ".join(done.stderr.split())


def test_a_task_that_needs_its_image_is_refused_on_the_hosts_userland(tmp_path: Path) -> None:
    """Its solution is right, and on the host it would score 0 (the image's data file
    is not there): refused before anything runs, naming both ways out."""
    done = rollout("--agent", "oracle", "--dataset", str(JQ_TASK), "--out", str(tmp_path))

    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert "environment/Dockerfile has RUN" in said
    assert "--sandbox container" in said and "--host-userland" in said
    assert not (tmp_path / "results.jsonl").exists()


def test_the_hosts_userland_asked_for_says_so_on_every_row(tmp_path: Path) -> None:
    done = rollout(
        "--agent",
        "oracle",
        "--dataset",
        str(JQ_TASK),
        "--host-userland",
        "-n",
        "2",
        "--out",
        str(tmp_path),
    )

    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert len(rows) == 2
    for row in rows:
        assert row["environment"] == "host_override" and row["image_digest"] is None
        # The right solution, the wrong environment: the host has no /app/data.json.
        assert row["reward"] == 0.0
        (finding,) = [f for f in row["findings"] if f["code"] == "host_userland_override"]
        assert finding["severity"] == "warn" and "not the task's" in finding["message"]


def test_a_sample_runs_on_the_hosts_userland_and_says_so(tmp_path: Path) -> None:
    done = rollout("--agent", "oracle", "--task", "fix-mean", "--out", str(tmp_path))

    assert done.returncode == 0, done.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert row["environment"] == "host" and row["reward"] == 1.0
    assert not any(f["code"] == "host_userland_override" for f in row["findings"])


def test_the_task_scores_in_its_own_image_on_the_container_sandbox(
    tmp_path: Path,
    images_dir: Path,
) -> None:
    """The rollout refused on the host's userland, in the container sandbox: its image
    built (or found) by the sandbox, the right solution scores 1, and the row names the
    image it ran in."""
    done = rollout(
        "--agent",
        "oracle",
        "--dataset",
        str(JQ_TASK),
        "--sandbox",
        "container",
        "--sandbox-arg",
        f"images_dir={images_dir}",
        "-n",
        "2",
        "--out",
        str(tmp_path),
    )

    assert done.returncode == 0, done.stderr
    rows = [json.loads(x) for x in (tmp_path / "results.jsonl").read_text().splitlines()]
    assert [row["reward"] for row in rows] == [1.0, 1.0]
    digests = {row["image_digest"] for row in rows}
    assert all(row["environment"] == "image" for row in rows) and len(digests) == 1
    (digest,) = digests
    assert digest.startswith("sha256:") and (images_dir / "roots" / digest[7:]).is_dir()
    assert not any(f["code"] == "host_userland_override" for r in rows for f in r["findings"])


def test_an_image_that_does_not_build_is_a_row_naming_its_log(
    tmp_path: Path,
    images_dir: Path,
) -> None:
    task = tmp_path / "broken"
    shutil.copytree(JQ_TASK, task)
    (task / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN echo the-build-broke && false\n"
    )
    done = rollout(
        "--agent",
        "oracle",
        "--dataset",
        str(task),
        "--sandbox",
        "container",
        "--sandbox-arg",
        f"images_dir={images_dir}",
        "--out",
        str(tmp_path / "out"),
    )

    assert done.returncode == 1, done.stderr
    (row,) = [json.loads(x) for x in (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert row["error_type"] == "environment_build_failed" and row["reward"] is None
    named = re.search(r"(/\S+\.log)\b", row["error"])  # the build log, kept
    assert named is not None and Path(named.group(1)).is_file(), row["error"]
    assert "the-build-broke" in Path(named.group(1)).read_text()


def test_images_build_prepares_a_datasets_images_and_names_what_failed(
    tmp_path: Path,
    images_dir: Path,
) -> None:
    tasks = tmp_path / "tasks"
    shutil.copytree(JQ_TASK, tasks / "jq-data")
    shutil.copytree(JQ_TASK, tasks / "broken")
    (tasks / "broken" / "environment" / "Dockerfile").write_text(
        "FROM debian:bookworm-slim\nRUN false\n"
    )
    (hello,) = select_tasks(resolve_dataset("samples"), ["hello-file"])
    shutil.copytree(hello.path, tasks / "no-image")
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "harbor_ray.cli",
            "images",
            "build",
            "--dataset",
            str(tasks),
            "--images-dir",
            str(images_dir),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )

    assert done.returncode == 1, done.stderr  # one image failed
    table = " ".join(done.stdout.split())
    assert "jq-data" in table and "broken" in table and "failed" in table
    assert "no-image: declares no image" in " ".join(done.stderr.split())
