"""A sandbox's cpu and memory limits (trials/sandbox/limits.py): the files each limit
writes (pure, for cgroup v1 and v2), then real groups in this machine's /sys/fs/cgroup
with real processes in them: joined before they exec, killed over their memory, and
removed by their sandbox's teardown or, when their owner died, by the reaper.

The limits of a container sandbox through Harbor's environment API: test_container_sandbox.py.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harbor_ray.errors import SandboxError
from harbor_ray.trials.sandbox.layout import Layout, init_argv, prepare_root
from harbor_ray.trials.sandbox.leftovers import reap
from harbor_ray.trials.sandbox.limits import (
    Cgroups,
    Limits,
    Setting,
    cgroup_name,
    cgroup_problems,
    is_v2,
    reap_cgroups,
    settings,
)
from harbor_ray.trials.sandbox.preflight import find_tools
from harbor_ray.trials.sandbox.processes import (
    namespace_init,
    pid_namespace,
    pids_in_pid_namespace,
)

MB = 1024 * 1024


# --- Which files get which values: no cgroup touched ------------------------------------


def test_v1_writes_the_memory_limit_first_and_the_quota_with_its_period() -> None:
    assert settings(Limits(cpus=1.5, memory_mb=64), v2=False) == [
        Setting("memory", "memory.limit_in_bytes", str(64 * MB)),
        Setting("memory", "memory.memsw.limit_in_bytes", str(64 * MB), optional=True),
        Setting("cpu", "cpu.cfs_period_us", "100000"),
        Setting("cpu", "cpu.cfs_quota_us", "150000"),
    ]


def test_v2_writes_one_group() -> None:
    assert settings(Limits(cpus=0.5, memory_mb=64), v2=True) == [
        Setting("", "memory.max", str(64 * MB)),
        Setting("", "memory.swap.max", "0", optional=True),
        Setting("", "cpu.max", "50000 100000"),
    ]


def test_each_limit_alone_and_none() -> None:
    assert [s.file for s in settings(Limits(memory_mb=1), v2=True)] == [
        "memory.max",
        "memory.swap.max",
    ]
    assert [s.file for s in settings(Limits(cpus=2), v2=False)] == [
        "cpu.cfs_period_us",
        "cpu.cfs_quota_us",
    ]
    assert settings(Limits(), v2=False) == settings(Limits(), v2=True) == []
    # The kernel's smallest quota, however small the share asked.
    assert settings(Limits(cpus=0.001), v2=True)[-1].value == "1000 100000"


def test_a_groups_name_ties_it_to_its_sandbox_directory(tmp_path: Path) -> None:
    (tmp_path / "one").mkdir()
    (tmp_path / "link").symlink_to("one")
    name = cgroup_name(tmp_path / "one" / "task__env-abc")
    assert name.endswith("-task__env-abc")
    assert cgroup_name(tmp_path / "link" / "task__env-abc") == name  # resolved
    assert cgroup_name(tmp_path / "two" / "task__env-abc") != name


# --- Real groups -----------------------------------------------------------------------


def joined(pid: int) -> None:
    """Until process `pid` (started through `join_argv`) has joined and exec'd `sleep`."""
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] != b"sleep":
        assert time.monotonic() < deadline, f"process {pid} did not start its sleep"
        time.sleep(0.01)


def test_a_process_joins_the_groups_before_it_execs_and_its_limits_hold(tmp_path: Path) -> None:
    limits = Limits(cpus=0.5, memory_mb=32)
    cgroups = Cgroups(tmp_path / "sandbox", limits)
    cgroups.create()
    try:
        assert len(cgroups.groups) == (1 if is_v2() else 2)
        memberships = subprocess.run(
            cgroups.join_argv(["cat", "/proc/self/cgroup"]),
            capture_output=True,
            text=True,
            check=True,
        )
        name = cgroup_name(tmp_path / "sandbox")
        assert sum(
            line.endswith(f"/harbor_ray/{name}") for line in memberships.stdout.splitlines()
        ) == len(cgroups.groups)
        hog = subprocess.run(
            cgroups.join_argv([sys.executable, "-c", "bytearray(100 << 20)"]), capture_output=True
        )
        assert hog.returncode == -signal.SIGKILL
        small = subprocess.run(cgroups.join_argv([sys.executable, "-c", "bytearray(4 << 20)"]))
        assert small.returncode == 0
    finally:
        cgroups.remove()
    assert [group for group in cgroups.groups if group.exists()] == []
    cgroups.remove()  # idempotent


def test_a_group_with_a_process_in_it_stays(tmp_path: Path) -> None:
    cgroups = Cgroups(tmp_path / "sandbox", Limits(memory_mb=64))
    cgroups.create()
    sleeper = subprocess.Popen(cgroups.join_argv(["sleep", "1000.81"]))
    try:
        joined(sleeper.pid)
        with pytest.raises(SandboxError, match=str(sleeper.pid)):
            cgroups.remove()
        assert all(group.exists() for group in cgroups.groups)
    finally:
        sleeper.kill()
        sleeper.wait()
    cgroups.remove()
    assert [group for group in cgroups.groups if group.exists()] == []


def test_no_limits_no_groups(tmp_path: Path) -> None:
    cgroups = Cgroups(tmp_path / "sandbox", Limits())
    cgroups.create()
    assert cgroups.groups == []
    assert cgroups.join_argv(["true"]) == ["true"]
    cgroups.remove()


def test_a_failed_create_leaves_no_group(tmp_path: Path) -> None:
    """A hierarchy missing (here: a root holding memory's but not cpu's): the memory
    group made first goes too."""
    root = tmp_path / "cgroup"
    (root / "memory").mkdir(parents=True)
    cgroups = Cgroups(tmp_path / "sandbox", Limits(cpus=1, memory_mb=64), root=root)
    with pytest.raises(SandboxError, match="cannot set the sandbox's limits"):
        cgroups.create()
    assert list((root / "memory" / "harbor_ray").iterdir()) == []


# --- Leftovers -------------------------------------------------------------------------


def test_reap_cgroups_empties_and_removes_the_groups_of_gone_sandboxes_only(tmp_path: Path) -> None:
    sandboxes, other = tmp_path / "sandboxes", tmp_path / "other"
    (sandboxes / "live").mkdir(parents=True)
    limits = Limits(memory_mb=64)
    made = {
        name: Cgroups(directory, limits)
        for name, directory in [
            ("live", sandboxes / "live"),
            ("gone", sandboxes / "gone"),
            ("busy", sandboxes / "busy"),
            ("elsewhere", other / "gone"),
        ]
    }
    for cgroups in made.values():
        cgroups.create()
    busy = subprocess.Popen(made["busy"].join_argv(["sleep", "1000.82"]))
    try:
        joined(busy.pid)
        # A process left in a gone sandbox's group (one still dying, or one that outlived
        # its pid namespace's kill) is killed, and the group goes with it.
        assert reap_cgroups(sandboxes) == 2
        left = {
            name
            for name, cgroups in made.items()
            if all(group.exists() for group in cgroups.groups)
        }
        assert left == {"live", "elsewhere"}
        assert busy.wait(timeout=10) == -9
    finally:
        busy.kill()
        busy.wait()
        for cgroups in made.values():
            cgroups.remove()


def test_the_reaper_removes_a_dead_sandboxs_groups(tmp_path: Path) -> None:
    """A sandbox with limits whose owner died before its bwrap set pid 1 up (a bwrap
    without --die-with-parent, killed): pid 1 stays, in the groups. The reaper kills its
    pid namespace, removes the directory, then the groups it emptied."""
    sandboxes = tmp_path / "sandboxes"
    layout = Layout(root=sandboxes / "orphan", limits=Limits(cpus=1, memory_mb=128))
    prepare_root(layout)
    cgroups = Cgroups(layout.root, layout.limits)
    cgroups.create()
    bwrap = subprocess.Popen(
        cgroups.join_argv(
            [arg for arg in init_argv(find_tools(None).bwrap, layout) if arg != "--die-with-parent"]
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    assert bwrap.stdout is not None and bwrap.stdout.readline() == b"ready\n"
    members = [int(pid) for pid in (cgroups.groups[0] / "cgroup.procs").read_text().split()]
    [namespace] = {pid_namespace(pid) for pid in members if namespace_init(pid)}
    bwrap.kill()
    bwrap.wait()
    try:
        assert pids_in_pid_namespace(namespace), "pid 1 died with bwrap: nothing to test"
        reap(sandboxes)
        assert pids_in_pid_namespace(namespace) == []
        assert list(sandboxes.iterdir()) == []
        assert [group for group in cgroups.groups if group.exists()] == []
    finally:
        for pid in pids_in_pid_namespace(namespace):
            os.kill(pid, signal.SIGKILL)


def test_cgroup_problems_name_what_is_missing(tmp_path: Path) -> None:
    assert cgroup_problems() == []
    problems = cgroup_problems(tmp_path)  # no hierarchy mounted there
    assert len(problems) == 2
    assert str(tmp_path / "memory") in problems[0] and str(tmp_path / "cpu") in problems[1]
