"""Backends whose Harbor preflight passes vacuously (singularity, ec2, sbx), as a new
user meets them: `info` says why each is unusable, `rollout` and `sweep` refuse each
before anything starts, naming what is missing; `info --probe` starts a real sandbox."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fake_docker import cloud_free_environ, path_with_program

pytestmark = pytest.mark.integration

# What each refusal must name, for a machine with no singularity, sbx CLI, or cloud
# credentials and no --sandbox-arg.
MISSING = {
    "singularity": "`singularity` not found on PATH",
    "ec2": "its constructor requires `region`",
    "sbx": "no Docker Sandboxes Cloud credentials",
}


@pytest.fixture
def bare_env(tmp_path: Path) -> dict[str, str]:
    """No credentials, and a PATH with only the local sandbox's tools and a stand-in
    `ssh` (Harbor's own ec2 preflight looks for one; what harbor_ray adds comes after)."""
    tools = Path(path_with_program(tmp_path / "bin", "ssh"))
    for name in ("bwrap", "nsenter", "tmux"):
        found = shutil.which(name)
        assert found, f"{name} is needed by the local sandbox (scripts/bootstrap.sh)"
        (tools / name).symlink_to(found)
    return {**cloud_free_environ(tmp_path), "PATH": str(tools)}


def harbor_ray(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harbor_ray.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def test_info_reports_them_unusable_and_probes_local(bare_env: dict[str, str]) -> None:
    done = harbor_ray("info", "--json", "--probe", "local", env=bare_env)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    sandboxes = {row["name"]: row for row in data["sandboxes"]}
    for name, missing in MISSING.items():
        assert not sandboxes[name]["usable"], sandboxes[name]
        assert missing in sandboxes[name]["reason"]
    probe = data["probe"]
    assert probe["name"] == "local" and probe["ok"], probe
    assert probe["start_s"] > 0 and probe["stop_s"] > 0


@pytest.mark.parametrize("command", ["rollout", "sweep"])
@pytest.mark.parametrize("backend", sorted(MISSING))
def test_rollout_and_sweep_refuse_before_starting(
    tmp_path: Path, bare_env: dict[str, str], command: str, backend: str
) -> None:
    out = tmp_path / "out"
    done = harbor_ray(
        command,
        "--agent",
        "oracle",
        "--task",
        "hello-file",
        "--sandbox",
        backend,
        "--out",
        str(out),
        env=bare_env,
    )
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    assert f"sandbox '{backend}' is not usable here" in said
    assert MISSING[backend] in said
    assert not out.exists()  # refused before any rollout (or Ray) started
