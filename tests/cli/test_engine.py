"""`harbor-ray model prepare` and `harbor-ray engine up` as users run them. The
success path of `engine up` and `engine down` is the session's own engine
(tests/fixtures/engine.py starts and stops it through them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration


def harbor_ray(*args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harbor_ray.cli", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_model_prepare_prints_the_prepared_model_and_reuses_it(
    prepared_model_dir: Path,
) -> None:
    before = {p.name: p.stat().st_mtime_ns for p in prepared_model_dir.iterdir()}
    done = harbor_ray("model", "prepare", "--cache-dir", str(prepared_model_dir.parent))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(prepared_model_dir)
    assert "default model ready" in done.stderr
    # Found complete: nothing was converted or rewritten.
    assert {p.name: p.stat().st_mtime_ns for p in prepared_model_dir.iterdir()} == before


def test_engine_up_with_a_config_it_cannot_honour_exits_two(tmp_path: Path) -> None:
    config = tmp_path / "engine.yaml"
    app = {
        "name": "engine",
        "route_prefix": "/",
        "import_path": "harbor_ray.engine.serve:build_engine_app",
        "args": {},
    }
    other = {**app, "name": "other", "route_prefix": "/other"}
    config.write_text(yaml.safe_dump({"applications": [app, other]}))
    done = harbor_ray("engine", "up", "--config", str(config))
    assert done.returncode == 2, done.stderr
    assert "expected one application, found 2" in " ".join(done.stderr.split())
    assert done.stdout == ""  # no URL for --llm-url
