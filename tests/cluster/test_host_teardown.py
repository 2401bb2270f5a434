"""Rollout hosts (real Ray actors, uvloop loops) holding real bwrap sandboxes, ended the
hard ways: every rollout cancelled at once, the host SIGKILLed mid-rollout.

What is left is counted from the host's /proc and file system (tests/processes.py):
processes that name a sandbox's path or see one as their `/`, and the sandboxes'
directories.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
from pathlib import Path

import pytest
import ray
from ray.exceptions import RayActorError, TaskCancelledError

from harbor_ray.cluster.host import start_host
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import RolloutSpec
from tests.cluster import sandbox_work
from tests.cluster.sandbox_work import PROBE
from tests.processes import sandbox_processes
from tests.waiting import eventually

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module", autouse=True)
def _work_by_value(ray_cluster: None):
    ray.cloudpickle.register_pickle_by_value(sandbox_work)


def _spec(tmp_path: Path, task: str, index: int) -> RolloutSpec:
    """A rollout of `task` (a sample task renamed: the work reads only its name)."""
    [sample] = select_tasks(resolve_dataset("samples"), ["hello-file"])
    return RolloutSpec(
        rollout_id=f"{task}-{index}",
        task=sample.model_copy(update={"name": task}),
        agent="oracle",
        trials_dir=tmp_path / "trials",
        sandbox_kwargs={"sandboxes_dir": str(tmp_path / "sandboxes")},
    )


def _hosts(count: int) -> list:
    prefix = secrets.token_hex(3)
    hosts = [
        start_host(
            f"td{prefix}{k}",
            proxy=None,
            num_cpus=0.01,
            work=sandbox_work.sandbox_work("sleep 3600"),
        )
        for k in range(count)
    ]
    ray.get([host.node.remote() for host in hosts])
    return hosts


def _probe(host, tmp_path: Path) -> tuple[int, str | None]:
    """The host's process, and the files it opened that did not stay open (if any)."""
    record = ray.get(host.run.remote(_spec(tmp_path, PROBE, 0)))
    return int(record.result.timings["host_pid"]), record.result.error


def _sandbox_dirs(tmp_path: Path) -> list[Path]:
    """The sandboxes' own directories, in the hosts' directories under `sandboxes`."""
    root = tmp_path / "sandboxes"
    return [
        sandbox for host in (root.iterdir() if root.exists() else []) for sandbox in host.iterdir()
    ]


def _left(tmp_path: Path) -> tuple[list[int], list[Path]]:
    return sandbox_processes(tmp_path / "sandboxes"), _sandbox_dirs(tmp_path)


def _running(tmp_path: Path) -> int:
    """Sandboxes whose pid 1 runs (each has a `sleep` child)."""
    return sum(
        1
        for pid in sandbox_processes(tmp_path / "sandboxes")
        if Path(f"/proc/{pid}/comm").read_text().strip() == "sleep"
    )


def _begun(tmp_path: Path) -> int:
    """Rollouts whose work began (each makes its trial directory first)."""
    trials = tmp_path / "trials"
    return len(list(trials.iterdir())) if trials.exists() else 0


def _kill_leftovers(tmp_path: Path) -> None:
    for pid in sandbox_processes(tmp_path / "sandboxes"):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


async def test_300_cancels_at_once_leave_nothing_and_no_host_crashes(tmp_path: Path) -> None:
    """300 rollouts on two hosts, cancelled together as soon as every one has begun (most
    sandboxes then starting, some running a command, some waiting): every rollout ends
    cancelled, nothing of any sandbox is left, and both hosts still run, the same
    processes, with no file closed under them."""
    hosts = _hosts(2)
    pids = [_probe(host, tmp_path)[0] for host in hosts]
    specs = [_spec(tmp_path, "sandbox-exec" if k % 2 else "sandbox", k) for k in range(300)]
    refs = [hosts[k % 2].run.remote(spec) for k, spec in enumerate(specs)]
    try:
        await eventually(lambda: _begun(tmp_path) >= 300, 240, "300 rollouts begun")
        for ref in refs:
            ray.cancel(ref)
        for ref in refs:
            with pytest.raises(TaskCancelledError):
                await ref
        assert [_probe(host, tmp_path) for host in hosts] == [(pid, None) for pid in pids]
        assert _left(tmp_path) == ([], [])
    finally:
        for host in hosts:
            ray.kill(host)
        _kill_leftovers(tmp_path)


async def test_a_host_killed_mid_rollout_leaves_nothing(tmp_path: Path) -> None:
    """A host SIGKILLed while its eight sandboxes run, with no driver to reap after it:
    its guard removes every process and directory of its sandboxes."""
    [host] = _hosts(1)
    specs = [_spec(tmp_path, "sandbox-exec" if k % 2 else "sandbox", k) for k in range(8)]
    refs = [host.run.remote(spec) for spec in specs]
    try:
        await eventually(lambda: _running(tmp_path) >= 8, 120, "8 sandboxes running")
        os.kill(_probe(host, tmp_path)[0], signal.SIGKILL)
        for ref in refs:
            with pytest.raises(RayActorError):
                await ref
        # The guard works once the host is gone; polled, as nothing says when it is done.
        with contextlib.suppress(AssertionError):
            await eventually(lambda: _left(tmp_path) == ([], []), 30, "nothing left")
        processes, directories = _left(tmp_path)
        assert (processes, len(directories)) == ([], 0)
    finally:
        _kill_leftovers(tmp_path)
