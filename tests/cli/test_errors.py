"""The CLI's one error handler: an error harbor_ray raises on purpose, from any command,
is one `error:` line (and where the logs are) and exit code 2, never a traceback."""

import os
import subprocess
import sys
from pathlib import Path

from harbor_ray.cli.options import Exit


def invoke(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "harbor_ray.cli", *args],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "200"},
    )
    done.output = done.stdout + done.stderr  # type: ignore[attr-defined]
    return done


def test_a_refused_request_is_an_error_line_and_exit_two(tmp_path: Path) -> None:
    done = invoke("rollout", "--agent", "terminus-2", "--out", str(tmp_path / "out"))
    assert done.returncode == Exit.COULD_NOT_START, done.output
    assert "error:" in done.output and "--llm-url" in done.output
    assert "Traceback" not in done.output
    assert not (tmp_path / "out").exists()  # refused before its log was opened


def test_an_error_after_the_start_names_the_log(tmp_path: Path) -> None:
    done = invoke(
        "rollout",
        "--agent",
        "terminus-2",
        "--llm-url",
        "http://127.0.0.1:9",
        "--out",
        str(tmp_path),
    )
    assert done.returncode == Exit.COULD_NOT_START, done.output
    assert "error:" in done.output and "Traceback" not in done.output
    assert f"logs: {tmp_path / 'logs' / 'harbor-ray.log'}" in done.output


def test_a_subcommand_s_error_is_handled_in_the_same_place(tmp_path: Path) -> None:
    done = invoke("agents", "install", "no-such-agent", "--agents-cache", str(tmp_path))
    assert done.returncode == Exit.COULD_NOT_START, done.output
    assert "error:" in done.output and "no pinned version for no-such-agent" in done.output


def test_a_directory_that_is_not_a_dataset(tmp_path: Path) -> None:
    done = invoke("report", str(tmp_path))
    assert done.returncode == Exit.COULD_NOT_START, done.output
    assert "is not a dataset" in done.output


def test_a_malformed_sandbox_arg(tmp_path: Path) -> None:
    done = invoke("sweep", "--agent", "oracle", "--sandbox-arg", "novalue", "--out", str(tmp_path))
    assert done.returncode == Exit.COULD_NOT_START, done.output
    assert "error:" in done.output and "novalue" in done.output
