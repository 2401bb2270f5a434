"""The image's build steps (scripts/build_image.sh, every RUN of the Dockerfile) on this
machine, into a fresh prefix: no Docker daemon is needed to check what they make."""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "scripts" / "build_image.sh"

pytestmark = pytest.mark.integration


def build_image(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(SCRIPT), *args], capture_output=True, text=True, timeout=900)


def test_the_prefix_runs_alone_and_a_copied_venv_alone_is_refused(tmp_path: Path) -> None:
    prefix = tmp_path / "opt" / "harbor-ray"
    started = time.monotonic()
    done = build_image(str(prefix))
    seconds = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    assert f"harbor_ray from {prefix}" in done.stdout, done.stdout
    print(f"build_image.sh: {seconds:.1f} s")  # from uv's cache: CI's cost of this test
    ran = subprocess.run(
        [str(prefix / "venv" / "bin" / "harbor-ray"), "--help"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"LD_LIBRARY_PATH": str(prefix / "python" / "lib"), "PATH": "/usr/bin:/bin"},
    )
    assert ran.returncode == 0 and "rollout" in ran.stdout, ran.stderr
    # Only the venv copied to the next stage: its interpreter link dangles.
    (prefix / "python").rename(tmp_path / "elsewhere")
    refused = build_image("--check", str(prefix))
    assert refused.returncode == 1 and "which does not exist" in refused.stderr


def test_a_prefix_that_borrows_the_checkout_is_refused(tmp_path: Path) -> None:
    # A venv made elsewhere (this checkout's editable one) is not a built prefix.
    prefix = tmp_path / "borrowed"
    prefix.mkdir()
    (prefix / "venv").symlink_to(REPO / ".venv")
    refused = build_image("--check", str(prefix))
    assert refused.returncode == 1 and "does not run from" in refused.stderr


def test_every_dockerfile_run_step_is_the_script() -> None:
    text = (REPO / "Dockerfile").read_text()
    runs = re.findall(r"^RUN (.+)$", text, flags=re.MULTILINE)
    assert len(runs) == 3
    assert all(re.match(r"\S*build_image\.sh( |$)", run) for run in runs), runs
    # The build stage carries the base image's interpreter into the prefix.
    assert "--python /usr/local/bin/python3.12" in text
    assert "--check /opt/harbor-ray" in runs[-1]
