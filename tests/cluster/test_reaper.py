"""The reaper against real leftovers: directories and live processes that name them."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harbor_ray.cluster.reaper import Reaped, reap
from tests.processes import gone

# A process whose command line names its sandbox, as the host-side bwrap's does, and
# that has a child of its own (a sandboxed command, in its own session) to take with it.
ORPHAN = (
    "import subprocess, sys, time; "
    "sys.argv[2:] and subprocess.Popen(['sleep', sys.argv[2]], start_new_session=True); "
    "time.sleep(300)"
)


@dataclass
class Started:
    """What a test started, killed after it if still there (a failing reap must not
    leave anything running)."""

    processes: list[subprocess.Popen] = field(default_factory=list)
    children: list[int] = field(default_factory=list)

    def orphan(self, names: Path, *child_seconds: str) -> subprocess.Popen:
        """A process naming `names`, with a `sleep SECONDS` child if given (waited for:
        a reap before the child exists would miss it)."""
        process = subprocess.Popen([sys.executable, "-c", ORPHAN, str(names), *child_seconds])
        self.processes.append(process)
        if child_seconds:
            self.children.append(_child_of(process.pid, within_s=10))
        return process


@pytest.fixture
def started() -> Iterator[Started]:
    started = Started()
    yield started
    for pid in started.children:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for process in started.processes:
        process.kill()
        process.wait()


def test_reaps_the_processes_and_directories_a_dead_sweep_left(
    tmp_path: Path, started: Started
) -> None:
    sandboxes = tmp_path / "sandboxes"
    first, second = sandboxes / "trial-a", sandboxes / "trial-b"
    (first / "rootfs" / "app").mkdir(parents=True)
    (first / "rootfs" / "app" / "out.txt").write_text("left behind")
    second.mkdir()
    # What must survive: what a planted symlink points at, and a neighbour whose path
    # only shares a prefix with the sweep's directory.
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("not the sweep's")
    (first / "rootfs" / "escape").symlink_to(outside)
    (sandboxes / "link").symlink_to(outside)
    neighbour = tmp_path / "sandboxes-other" / "trial-c"
    neighbour.mkdir(parents=True)
    first_owner = started.orphan(first / "rootfs", "301")
    second_owner = started.orphan(second, "302")
    bystander = started.orphan(neighbour)

    assert reap(sandboxes) == Reaped(processes=4, directories=2)

    assert gone("sleep 301") and gone("sleep 302")
    assert first_owner.wait(10) and second_owner.wait(10)
    assert bystander.poll() is None
    assert sorted(p.name for p in sandboxes.iterdir()) == ["link"]
    assert (outside / "keep.txt").read_text() == "not the sweep's"
    assert neighbour.is_dir()


def test_a_missing_directory_has_nothing_to_reap(tmp_path: Path) -> None:
    assert reap(tmp_path / "never-made") == Reaped(processes=0, directories=0)


def _child_of(pid: int, within_s: float) -> int:
    """The one child `pid` has started, once it has."""
    deadline = time.monotonic() + within_s
    while not (children := Path(f"/proc/{pid}/task/{pid}/children").read_text().split()):
        assert time.monotonic() < deadline, f"{pid} started no child"
        time.sleep(0.05)
    [child] = children
    return int(child)
