"""`harbor-ray qualify` refuses what cannot work before anything starts (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nosuch-agent"], "unknown agent 'nosuch-agent'"),
        (["codex", "--llm-url", "http://127.0.0.1:9", "--engine", "x.yaml"], "not both"),
        (["codex", "--task", "no-such-task"], "no-such-task"),
        (
            ["codex", "--profile", "anthropic"],
            "agent 'codex' is not wired to speak profile 'anthropic'; its profiles: "
            "openai-responses",
        ),
    ],
)
def test_refused_before_anything_runs(tmp_path: Path, args: list[str], says: str) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "harbor_ray.cli", "qualify", *args, "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 2, run.stderr
    assert says in run.stderr
    assert not (tmp_path / "out").exists()
