"""`harbor-ray engine up` without --address holds a local cluster's engine until it is
stopped: by Ctrl-C, or by SIGTERM (a service manager, `kill`, `timeout`), also where the
shell that started it left SIGINT ignored. Either way the engine is taken down and the
command says so. The engine here is a stand-in (the real one's start and stop are the
session engine's fixture): what is tested is the command's wait and its cleanup."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The command with `start_engine` and `engine_down` standing in: it prints what they got.
_STAND_IN = """
import sys
import harbor_ray.engine.lifecycle as lifecycle
import harbor_ray.jobs.engine as jobs_engine
from harbor_ray.cli import main

TAKEN_DOWN, LOG = sys.argv[1:]

def start_engine(config, **_):
    return lifecycle.EngineHandle(url="http://127.0.0.1:1/v1", model_id="m",
                                  app_name="engine", startup_s=0.0), None

def engine_down(app_name, **_):
    with open(TAKEN_DOWN, "a") as taken_down:
        taken_down.write(app_name)

jobs_engine.start_engine = start_engine
lifecycle.engine_down = engine_down
sys.argv = ["harbor-ray", "engine", "up", "--log-file", LOG]
main()
"""


def _background_shell_start() -> None:
    # As `cmd &` in a non-interactive shell starts it: SIGINT ignored.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_engine_up_takes_the_engine_down_on_a_stop_signal(
    signum: signal.Signals, tmp_path: Path
) -> None:
    taken_down = tmp_path / "taken-down"
    job = subprocess.Popen(
        [sys.executable, "-c", _STAND_IN, str(taken_down), str(tmp_path / "engine.log")],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=_background_shell_start,
    )
    try:
        assert job.stdout is not None
        assert job.stdout.readline().strip() == "http://127.0.0.1:1/v1"  # then it waits
        time.sleep(0.5)
        job.send_signal(signum)
        _, err = job.communicate(timeout=60)
    finally:
        job.kill()
    assert job.returncode == 0, err
    assert taken_down.read_text() == "engine"  # once
    assert f"engine stopped ({signum.name})" in err
