"""Tearing a bwrap sandbox down when things go wrong: cancellations, a removed directory,
a host's event loop that is uvloop's (a Ray actor's), a pid 1 whose bwrap is gone.

Every count of what is left is read from the host's /proc and file system
(tests/processes.py), not from the sandbox's own bookkeeping.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest
import uvloop

from harbor_ray.cluster.reaper import reap
from harbor_ray.trials.sandbox.layout import Layout, init_argv, prepare_root
from harbor_ray.trials.sandbox.preflight import find_tools
from harbor_ray.trials.sandbox.processes import pid_namespace, pids_in_pid_namespace
from tests.cluster.sandbox_work import closed_under_us
from tests.processes import sandbox_processes
from tests.trials.test_bwrap_sandbox import make_environment


def _sandboxes(tmp_path: Path) -> list[Path]:
    root = tmp_path / "sandboxes"
    return sorted(root.iterdir()) if root.exists() else []


# Long enough for a loaded machine (CI's three test runs): one sandbox's pid 1 took more
# than 10 s to start its `sleep` there.
async def _wait_for(condition, timeout_s: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


def test_cancelled_starts_close_no_descriptor_they_do_not_own(tmp_path: Path) -> None:
    """Under uvloop, as in a rollout host: starts cancelled at every step of the way, then
    files opened afterwards (the numbers a stray close would hit) must stay open. A host
    whose descriptors were closed under it logged "Bad file descriptor" and aborted."""

    async def burst() -> list[int]:
        closed = []
        for steps in range(40):
            environment = make_environment(tmp_path, f"cut{steps}")
            starting = asyncio.ensure_future(environment.start(force_build=False))
            for _ in range(steps):
                await asyncio.sleep(0)
            starting.cancel()
            try:
                await starting
            except asyncio.CancelledError:
                pass
            else:  # started before the cancellation came
                await environment.stop(delete=True)
            closed += closed_under_us(8)
        return closed

    assert uvloop.run(burst()) == []
    assert sandbox_processes(tmp_path) == []
    assert _sandboxes(tmp_path) == []


async def test_a_stop_cancelled_again_and_again_still_ends_the_sandbox(tmp_path: Path) -> None:
    """Cancelling stop() (a cancel burst reaches a rollout already tearing down) does
    not cut the teardown short: when the cancellation comes out, nothing is left."""
    environment = make_environment(tmp_path)
    await environment.start(force_build=False)
    await environment.exec("sleep 600 & sleep 601 & (setsid sleep 602 &)")
    stopping = asyncio.ensure_future(environment.stop(delete=True))
    for _ in range(20):
        await asyncio.sleep(0)
        stopping.cancel()
    with pytest.raises(asyncio.CancelledError):
        await stopping
    assert sandbox_processes(tmp_path) == []
    assert _sandboxes(tmp_path) == []


async def test_pid_1_exits_when_it_cannot_run_its_child(tmp_path: Path) -> None:
    """The sandbox's directory removed under it (the kernel takes its /usr away), then its
    `sleep` ended: pid 1 can no longer start one, and must exit, not loop."""
    environment = make_environment(tmp_path)
    await environment.start(force_build=False)
    result = await environment.exec("readlink /proc/self/ns/pid")
    assert result.stdout is not None
    namespace = int(result.stdout.strip().removeprefix("pid:[").removesuffix("]"))
    [directory] = _sandboxes(tmp_path)
    try:
        shutil.rmtree(directory)
        # Under load the exec's own processes may still be exiting, and pid 1 may not
        # have started its `sleep` yet: wait until exactly one `sleep` is seen.
        assert await _wait_for(lambda: len(_named(namespace, "sleep")) == 1)
        [sleeper] = _named(namespace, "sleep")
        os.kill(sleeper, signal.SIGKILL)
        assert await _wait_for(lambda: not pids_in_pid_namespace(namespace)), (
            f"pid 1 still runs: {_cpu_ticks(pids_in_pid_namespace(namespace))}"
        )
    finally:
        await environment.stop(delete=False)


def _named(namespace: int, comm: str) -> list[int]:
    """The processes of a pid namespace called `comm`; one that exits meanwhile is not."""
    named = []
    for pid in pids_in_pid_namespace(namespace):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() == comm:
                named.append(pid)
        except FileNotFoundError:
            pass
    return named


def _cpu_ticks(pids: list[int]) -> dict[int, int]:
    ticks = {}
    for pid in pids:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        ticks[pid] = int(fields[11]) + int(fields[12])  # utime + stime
    return ticks


def test_the_reaper_ends_a_pid_1_whose_bwrap_is_gone(tmp_path: Path) -> None:
    """The leftover of a host that died with a sandbox it could not take along: a pid 1
    (with a child of its own) whose bwrap is gone, its parent now the host's init. The
    reaper finds it, kills its pid namespace, and only then removes its directory."""
    sandboxes = tmp_path / "sandboxes"
    layout = Layout(root=sandboxes / "orphan")
    prepare_root(layout)
    # bwrap without --die-with-parent, killed: what stays is pid 1 and its `sleep`.
    argv = [arg for arg in init_argv(find_tools(None).bwrap, layout) if arg != "--die-with-parent"]
    bwrap = subprocess.Popen(
        argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True
    )
    assert bwrap.stdout is not None and bwrap.stdout.readline() == b"ready\n"
    [init] = [
        int(pid) for pid in Path(f"/proc/{bwrap.pid}/task/{bwrap.pid}/children").read_text().split()
    ]
    namespace = pid_namespace(init)
    bwrap.kill()
    bwrap.wait()
    try:
        assert pids_in_pid_namespace(namespace), "pid 1 died with bwrap: nothing to test"
        reaped = reap(sandboxes)
        assert pids_in_pid_namespace(namespace) == []
        assert sandbox_processes(tmp_path) == []
        assert list(sandboxes.iterdir()) == []
        assert reaped.directories == 1
    finally:
        for pid in pids_in_pid_namespace(namespace):
            os.kill(pid, signal.SIGKILL)
