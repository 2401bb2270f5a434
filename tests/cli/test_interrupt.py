"""A job stops on SIGINT or SIGTERM: no trial starts after it, the running one is
cancelled and its sandbox torn down, a message says so, and the exit code is 130. Even
when SIGINT came ignored, as a non-interactive shell starts a job in the background
(`harbor-ray qualify` once went on starting trials through Ctrl-C, until kill -9)."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.processes import sandbox_processes


def _started_in_the_background() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.integration  # a real terminus-2 trial starting in a sandbox: about 10 s
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_qualify_stops_on_a_signal_and_leaves_no_sandbox(
    tmp_path: Path, signum: signal.Signals
) -> None:
    out = tmp_path / "out"
    job = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harbor_ray.cli",
            "qualify",
            "terminus-2",
            "--profile",
            "all",
            "--task",
            "hello-file",
            "--out",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        preexec_fn=_started_in_the_background,
    )
    try:
        deadline = time.monotonic() + 600  # a loaded machine: minutes
        while not sandbox_processes(out / "sandboxes"):  # the first trial's sandbox is up
            assert job.poll() is None and time.monotonic() < deadline, "no sandbox started"
            time.sleep(0.2)
        job.send_signal(signum)
        output, _ = job.communicate(timeout=240)
    finally:
        job.kill()
    assert job.returncode == 130, output
    assert "interrupted" in output and signum.name in output, output
    assert len(list((out / "trials").iterdir())) == 1  # none started after the signal
    assert sandbox_processes(out / "sandboxes") == []
