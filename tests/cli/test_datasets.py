"""`harbor-ray datasets prefetch`: hub datasets into the cache, with progress, against a
local hub stand-in; `harbor-ray info` then lists them; a local spec is refused."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from harbor_ray.cli.options import Exit
from tests.trials.hub_standin import HubRepo, serve_hub
from tests.trials.test_dataset_cache import task_files


def harbor_ray(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "harbor_ray.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
    )


def test_prefetch_fetches_with_progress_and_info_lists_the_cache(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    with serve_hub({"org/tasks": HubRepo(files=task_files("alpha"))}) as hub:
        done = harbor_ray(
            "datasets",
            "prefetch",
            "hf://org/tasks",
            "--datasets-cache",
            str(cache),
            env={"HF_ENDPOINT": hub.url},
        )
    assert done.returncode == 0, done.stderr
    # Progress goes where the CLI's messages go: stderr, leaving stdout to data.
    assert "hf://org/tasks: fetching" in done.stderr
    assert "hf://org/tasks: fetched in" in done.stderr

    # The stand-in is gone: info resolves the spec from the cache and lists it.
    shown = harbor_ray(
        "info", "--json", "--datasets-cache", str(cache), "--dataset", "hf://org/tasks"
    )
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["datasets"][1] == {"spec": "hf://org/tasks", "tasks": ["alpha"], "problems": []}
    assert [row["spec"] for row in data["cached_datasets"]] == ["hf://org/tasks"]


def test_prefetch_refuses_a_local_spec_before_fetching_anything(tmp_path: Path) -> None:
    done = harbor_ray(
        "datasets",
        "prefetch",
        "hf://org/tasks",
        "org/tasks",
        "--datasets-cache",
        str(tmp_path),
        env={"HF_ENDPOINT": "http://127.0.0.1:9"},
    )
    assert done.returncode == Exit.COULD_NOT_START, done.stdout + done.stderr
    assert "a local path needs no prefetch" in done.stdout + done.stderr
    assert list(tmp_path.iterdir()) == []
