"""`serve run` of the online service, stopped with SIGTERM while rollouts run: it ends
with the Ray it started, no driver reaps after it, and nothing of its sandboxes may be
left (counted from /proc and the file system, tests/processes.py).

The service is the YAML's controller application as `serve run` deploys it, its own
Ray cluster included (in a temp dir of this test's: never another Ray on the machine),
with the oracle agent on a task whose solution sleeps: no engine is needed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from tests.cluster.test_sweep import _slow_tasks
from tests.fixtures.fake_engine import free_port
from tests.processes import cmdline, sandbox_processes

pytestmark = pytest.mark.integration

SERVE = Path(sys.executable).with_name("serve")


def _until(condition: Callable[[], bool], timeout_s: float, what: str, log: Path) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(
                f"not reached in {timeout_s:g} s: {what}\n{log.read_text(errors='replace')[-4000:]}"
            )
        time.sleep(0.5)


@pytest.fixture
def ray_tmp() -> Iterator[Path]:
    """The temp dir of the Ray `serve run` starts (short: Ray's socket paths), and, after
    the test, the end of whatever of that Ray is still running."""
    directory = Path(tempfile.mkdtemp(prefix="hr-serve-", dir="/tmp"))
    yield directory
    prefix = os.fsencode(str(directory))
    for pid in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError):
            if prefix in Path(f"/proc/{pid}/cmdline").read_bytes():
                os.kill(int(pid), signal.SIGKILL)
    shutil.rmtree(directory, ignore_errors=True)


def test_serve_run_stopped_with_sigterm_leaves_no_sandbox(tmp_path: Path, ray_tmp: Path) -> None:
    work, port = tmp_path / "work", free_port()
    key_file = tmp_path / "controller.key"
    config = {
        "http_options": {"host": "127.0.0.1", "port": port},
        "applications": [
            {
                "name": "online",
                "route_prefix": "/online",
                "import_path": "harbor_ray.online.serve:build_controller",
                "args": {
                    "engine": {"model_id": "stub", "model_source": str(tmp_path / "none")},
                    "key_file": str(key_file),
                    "work_dir": str(work),
                    "dataset": str(_slow_tasks(tmp_path, 600)),
                    "concurrency": 4,
                    "rollouts_per_host": 2,
                },
            }
        ],
    }
    (tmp_path / "online.yaml").write_text(yaml.safe_dump(config))
    env = {key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"}
    log = tmp_path / "serve.log"
    with open(log, "wb") as out:
        serve = subprocess.Popen(
            [str(SERVE), "run", str(tmp_path / "online.yaml")],
            cwd=tmp_path,
            env={**env, "RAY_TMPDIR": str(ray_tmp)},
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    sandboxes = work / "sandboxes"
    try:
        api = f"http://127.0.0.1:{port}/online"
        _until(lambda: _answers(f"{api}/v1/policy", key_file), 300, "the controller", log)
        headers = {"authorization": f"Bearer {key_file.read_text().strip()}"}
        submitted = httpx.post(
            f"{api}/v1/rollouts",
            headers=headers,
            timeout=60,
            json={"request_id": "stop", "agent": "oracle", "tasks": [{"task": "slow", "n": 4}]},
        )
        assert submitted.status_code == 202, submitted.text
        _until(lambda: _solving(sandboxes) >= 4, 300, "4 sandboxes solving", log)

        serve.send_signal(signal.SIGTERM)
        serve.wait(60)
        # Nothing says when the last guard is done: polled, bounded.
        with contextlib.suppress(pytest.fail.Exception):
            _until(lambda: _left(sandboxes) == ([], []), 60, "nothing left", log)
        processes, directories = _left(sandboxes)
        assert (processes, len(directories)) == ([], 0), directories
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(serve.pid, signal.SIGKILL)
        serve.wait()
        for pid in sandbox_processes(sandboxes):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _answers(url: str, key_file: Path) -> bool:
    if not key_file.exists():
        return False
    try:
        headers = {"authorization": f"Bearer {key_file.read_text().strip()}"}
        return httpx.get(url, headers=headers, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def _solving(sandboxes: Path) -> int:
    """Sandboxes running the task's solution (its `sleep 600`)."""
    return sum(1 for pid in sandbox_processes(sandboxes) if cmdline(pid) == b"sleep\x00600\x00")


def _left(sandboxes: Path) -> tuple[list[int], list[Path]]:
    """Live processes of the sandboxes, and their directories (in the hosts' own)."""
    directories = [
        sandbox
        for host in (sandboxes.iterdir() if sandboxes.exists() else [])
        for sandbox in host.iterdir()
    ]
    return sandbox_processes(sandboxes), directories
