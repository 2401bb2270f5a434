"""Sweeps of the container sandbox on a real local Ray: real Harbor trials (the oracle
agent) in bwrap sandboxes over the jq-data task's own image, built with the real Docker,
with the task's cpu and memory limits applied with real cgroups.

Whatever a container sandbox makes on its node must be gone once the sweep is over, the
normal way (each trial's teardown, the sweep's reaping) or after its host was SIGKILLed
mid-rollout (the host's guard, the driver's reaping of a dead host):

- processes: tests/processes.py's (bwrap, a pid 1, anything that names a sandbox's path)
  and, as that check cannot recognise a container sandbox's other processes (their `/`
  is the overlay, which no host path names), every process whose mount namespace holds
  an overlay whose upper layer is under the sweep's sandboxes directory. A sandbox's
  network namespace is anonymous (bwrap --unshare-all: no bind mount of it anywhere),
  so it lives exactly as long as a process in it: no process left is no netns left.
- the sandboxes' directories (each an overlay's upper and work layers);
- mounts: the overlays are mounted in each sandbox's private mount namespace, so one on
  the host (this process's mountinfo) under tmp_path would be a leak into the host's;
- cgroups: the groups under /sys/fs/cgroup/{memory,cpu}/harbor_ray/ (cgroup v1, as on the
  machines these tests run on) that were not there before the test;
- Docker containers: `docker ps -a` has none that it did not have before (the image's
  build and unpacking make and remove their own).

The last test runs container rollouts on every node of a multi-node cluster (network
namespaces on this machine, tests/fixtures/multinode.py) and checks the same.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.report.tables import read_tables
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.sandbox.limits import CGROUP_ROOT, cgroup_name
from harbor_ray.trials.spec import RolloutSpec, make_specs
from tests.fixtures.images import JQ_TASK
from tests.fixtures.multinode import NetnsCluster
from tests.processes import sandbox_processes
from tests.waiting import eventually

pytestmark = pytest.mark.integration

# The task's limits (task.toml's [environment]), and what cgroup v1 holds for them: the
# memory limit in bytes, the cfs quota in microseconds of each 100 ms period.
CPUS, MEMORY_MB = 1, 512
LIMITS = {
    "memory.limit_in_bytes": str(MEMORY_MB * 1024 * 1024),
    "cpu.cfs_quota_us": str(CPUS * 100_000),
}
HARBOR_RAY_GROUPS = [CGROUP_ROOT / "memory" / "harbor_ray", CGROUP_ROOT / "cpu" / "harbor_ray"]
NOTHING = {"processes": [], "directories": [], "mounts": [], "cgroups": [], "containers": []}
SOLVE = "jq '.items | add' /app/data.json > /app/sum.txt\n"


# --- What the test machine holds -----------------------------------------------------


def _cgroups() -> set[Path]:
    """Every group under the harbor_ray groups of the memory and cpu hierarchies (made
    by the first sandbox with limits: none yet before it)."""
    return {
        group
        for parent in HARBOR_RAY_GROUPS
        if parent.is_dir()
        for group in parent.iterdir()
        if group.is_dir()
    }


def _containers() -> set[str]:
    done = subprocess.run(
        ["docker", "ps", "-a", "-q", "--no-trunc"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return set(done.stdout.split())


@dataclass(frozen=True)
class Before:
    """The cgroups and Docker containers there were before the test: other runs' (none,
    in CI), which are not the test's to count."""

    cgroups: set[Path] = field(default_factory=_cgroups)
    containers: set[str] = field(default_factory=_containers)


def _overlay_processes(sandboxes: Path) -> list[int]:
    """Processes whose mount namespace holds an overlay with its upper layer under
    `sandboxes`: every process of a container sandbox (its `/` is that overlay), and any
    that kept its mount namespace alive."""
    upper = f"upperdir={sandboxes.resolve()}/"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            mounts = Path(f"/proc/{pid}/mountinfo").read_text()
            state = Path(f"/proc/{pid}/stat").read_bytes()
        except OSError:  # gone meanwhile
            continue
        if state[state.rindex(b")") + 2 :][:1] in (b"Z", b"X"):
            continue
        if any(" - overlay " in line and upper in line for line in mounts.splitlines()):
            found.append(int(pid))
    return found


def _processes(sandboxes: Path) -> list[int]:
    if not sandboxes.exists():
        return []
    return sorted(set(sandbox_processes(sandboxes)) | set(_overlay_processes(sandboxes)))


def _sandbox_dirs(sandboxes: Path) -> list[Path]:
    """The sandboxes' own directories, in the hosts' directories under `sandboxes`."""
    hosts = [h for h in sandboxes.iterdir() if h.is_dir()] if sandboxes.is_dir() else []
    return [sandbox for host in hosts for sandbox in host.iterdir()]


def _mounts_under(path: Path, pid: int | str = "self") -> list[str]:
    """Mount points at or below `path` in the mount namespace of process `pid` (this
    one's: the host's)."""
    root = str(path.resolve())
    points = [line.split()[4] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()]
    return [p for p in points if p == root or p.startswith(root + "/")]


def _left(tmp_path: Path, sandboxes: Path, before: Before) -> dict[str, list]:
    return {
        "processes": _processes(sandboxes),
        "directories": _sandbox_dirs(sandboxes),
        "mounts": _mounts_under(tmp_path),
        "cgroups": sorted(_cgroups() - before.cgroups),
        "containers": sorted(_containers() - before.containers),
    }


# --- The tasks and the sweep ---------------------------------------------------------


def _tasks(tmp_path: Path, names: list[str], solve: str = SOLVE) -> Path:
    """jq-data under each of `names`, with cpu and memory limits, and `solve` as the
    oracle's solution (after the shebang). One image for all: its build context is the
    same Dockerfile."""
    tasks = tmp_path / "tasks"
    toml = (JQ_TASK / "task.toml").read_text()
    assert "\n[environment]\n" in toml
    limited = toml.replace(
        "\n[environment]\n", f"\n[environment]\ncpus = {CPUS}\nmemory_mb = {MEMORY_MB}\n"
    )
    for name in names:
        shutil.copytree(JQ_TASK, tasks / name)
        (tasks / name / "task.toml").write_text(limited)
        (tasks / name / "solution" / "solve.sh").write_text("#!/bin/bash\n" + solve)
    return tasks


def _specs(tasks: Path, out: Path, attempts: int, images_dir: Path) -> list[RolloutSpec]:
    return make_specs(
        select_tasks(resolve_dataset(str(tasks)), None),
        attempts,
        agent="oracle",
        sandbox="container",
        trials_dir=out / "trials",
        sandbox_kwargs={"images_dir": str(images_dir)},
        run_id="c",
    )


def _rows(out: Path) -> list[dict]:
    return read_tables(out).rollouts.to_pylist()


async def _watch_limits(sandboxes: Path, seen: dict[str, dict[str, str]]) -> None:
    """Until cancelled: for each sandbox under `sandboxes` (by directory), its groups'
    limits, recorded while a process of it is in them.

    Watched from the host because that is where they can be seen: inside, the sandbox
    has no /sys, and its own cgroup namespace (bwrap --unshare-all) shows /proc/self/cgroup
    as `/`. Every sandbox lives for seconds (a solution that sleeps), polled every 50 ms.
    """
    memory, cpu = HARBOR_RAY_GROUPS
    while True:
        for sandbox in _listing(sandboxes):
            name = cgroup_name(sandbox)
            with contextlib.suppress(OSError):  # not made yet, or removed meanwhile
                if (memory / name / "cgroup.procs").read_text().split():
                    seen[name] = {
                        "memory.limit_in_bytes": (memory / name / "memory.limit_in_bytes")
                        .read_text()
                        .strip(),
                        "cpu.cfs_quota_us": (cpu / name / "cpu.cfs_quota_us").read_text().strip(),
                    }
        await asyncio.sleep(0.05)


def _listing(sandboxes: Path) -> list[Path]:
    with contextlib.suppress(OSError):
        return _sandbox_dirs(sandboxes)
    return []


# --- The tests -----------------------------------------------------------------------


@pytest.mark.usefixtures("containers_to_itself")  # it counts them machine-wide
async def test_a_sweep_of_container_rollouts_leaves_nothing(
    tmp_path: Path, images_dir: Path, ray_cluster: None
) -> None:
    """16 oracle rollouts, 8 at a time on two hosts, each in its task's image with the
    task's limits: each scores 1 in the one image, every sandbox had its limits, and
    nothing of any sandbox, its cgroups or the image's build is left."""
    before = Before()
    out = tmp_path / "out"
    # Each solution waits a second: its sandbox lives long enough to be watched.
    tasks = _tasks(tmp_path, ["jq-a", "jq-b"], solve="sleep 1\n" + SOLVE)
    specs = _specs(tasks, out, 8, images_dir)
    config = SweepConfig(out=out, concurrency=8, rollouts_per_host=4, retries=0)
    seen: dict[str, dict[str, str]] = {}
    watching = asyncio.create_task(_watch_limits(config.sandboxes_dir, seen))
    started = time.monotonic()
    try:
        stats = await sweep(specs, config, {"agent": "oracle"})
    finally:
        watching.cancel()
    print(
        f"16 container rollouts: {time.monotonic() - started:.1f} s, peak "
        f"{stats.peak_in_flight}, {len(seen)} sandboxes seen with their limits"
    )

    rows = _rows(out)
    assert len(rows) == 16 and stats.ok == 16, rows
    assert all(r["ok"] and r["reward"] == 1.0 for r in rows), rows
    assert {r["environment"] for r in rows} == {"image"}
    [digest] = {r["image_digest"] for r in rows}
    assert digest.startswith("sha256:") and (images_dir / "roots" / digest[7:]).is_dir()
    assert stats.peak_in_flight == 8
    # Every sandbox was in its own groups, with the task's limits written.
    assert len(seen) == 16 and all(limits == LIMITS for limits in seen.values()), seen
    assert _left(tmp_path, config.sandboxes_dir, before) == NOTHING


@pytest.mark.usefixtures("containers_to_itself")  # it counts them machine-wide
async def test_a_host_killed_mid_sweep_leaves_nothing(
    tmp_path: Path, images_dir: Path, ray_cluster: None
) -> None:
    """Eight rollouts on two hosts, one host SIGKILLed while all eight sandboxes run: its
    rollouts are `infra_lost` (no retries), the other host's score 1, and what the dead
    host's sandboxes held is gone before the sweep ends (its guard and the driver reap
    it, not the sweep's last reaping), and nothing at all once it has ended."""
    before = Before()
    out = tmp_path / "out"
    tasks = _tasks(tmp_path, ["jq-slow"], solve="sleep 25\n" + SOLVE)
    config = SweepConfig(out=out, concurrency=8, rollouts_per_host=4, retries=0)
    sandboxes = config.sandboxes_dir
    running = asyncio.create_task(
        sweep(_specs(tasks, out, 8, images_dir), config, {"agent": "oracle"})
    )
    try:
        await eventually(
            lambda: _sleeping(sandboxes) >= 8 or running.done(),
            300,
            "8 sandboxes running their solution",
        )
        assert not running.done()
        victim = max(_hosts(sandboxes), key=_sleeping)
        lost = _sleeping(victim)
        os.kill(_host_pid(victim), signal.SIGKILL)
        killed = time.monotonic()
        # Reaped while the other host's rollouts still run: by the dead host's reapers,
        # not by the sweep's own reaping at its end.
        async with asyncio.timeout(60):
            while (left := _host_left(victim)) != ([], [], []):
                assert not running.done(), f"the sweep ended before {victim} was reaped: {left}"
                await asyncio.sleep(0.05)
        print(f"{lost} sandboxes of the killed host reaped in {time.monotonic() - killed:.1f} s")
        stats = await asyncio.wait_for(running, 240)
    finally:
        if not running.done():
            running.cancel()
            with contextlib.suppress(BaseException):
                await running

    rows = _rows(out)
    assert len(rows) == 8, rows
    lost_rows = [r for r in rows if r["error_type"] == "infra_lost"]
    assert len(lost_rows) == lost and all(r["reward"] is None for r in lost_rows), rows
    assert [r["reward"] for r in rows if r not in lost_rows] == [1.0] * (8 - lost), rows
    assert stats.failed == lost
    assert _left(tmp_path, sandboxes, before) == NOTHING


def _hosts(sandboxes: Path) -> list[Path]:
    return [host for host in sandboxes.iterdir() if host.is_dir()]


def _sleeping(sandboxes: Path) -> int:
    """Sandboxes (under `sandboxes`, a sweep's or one host's) whose solution is sleeping
    (each pid 1 has a `sleep` of its own, `sleep 86400`)."""
    return sum(1 for pid in _processes(sandboxes) if _cmdline(pid)[:2] == [b"sleep", b"25"])


def _host_pid(host: Path) -> int:
    """The process of the rollout host whose sandboxes are in `host`: the Ray worker
    (`ray::...`) its sandboxes' bwrap processes descend from."""
    prefix = os.fsencode(str(host.resolve())) + b"/"
    for pid in sandbox_processes(host):
        if not any(arg.startswith(prefix) for arg in _cmdline(pid)):
            continue
        while pid > 1:
            if _cmdline(pid)[:1] and _cmdline(pid)[0].startswith(b"ray::"):
                return pid
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            pid = int(stat[stat.rindex(b")") + 2 :].split()[1])
    raise AssertionError(f"no Ray worker runs the sandboxes in {host}")


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return []


def _host_left(host: Path) -> tuple[list[int], list[Path], list[str]]:
    """The processes, sandbox directories and cgroups of one host's sandboxes."""
    directories = list(host.iterdir()) if host.is_dir() else []
    prefix = cgroup_name(host / "x").removesuffix("x")
    groups = sorted(
        group.name
        for parent in HARBOR_RAY_GROUPS
        if parent.is_dir()
        for group in parent.glob(prefix + "*")
    )
    return _processes(host), directories, groups


# --- Over the nodes of a multi-node cluster ------------------------------------------


@pytest.mark.usefixtures("containers_to_itself")  # it counts them machine-wide
def test_container_rollouts_on_every_node(
    multinode: NetnsCluster, tmp_path: Path, images_dir: Path
) -> None:
    """Container rollouts with limits on hosts spread over a head and two workers (each a
    network namespace, tests/fixtures/multinode.py), the driver on the head: each node
    reaches the one Docker daemon (a unix socket on the shared filesystem) and the one
    images directory. `images build --ray-address` (jobs/images.build_images) finds the
    image ready on each node first; every row scores 1 in that image, on every node, and
    nothing is left on any node. Limits were applied on every node: a sandbox whose cgroups cannot
    be made fails to start (`sandbox_start`), and every row is ok."""
    _give_cgroups(multinode)
    before = Before()
    out, count = tmp_path / "out", 6
    args = {
        "out": str(out),
        "dataset": str(_tasks(tmp_path, ["jq-mn"])),
        "count": count,
        "images_dir": str(images_dir),
    }
    done = multinode.run_on(
        multinode.head,
        [
            sys.executable,
            "-c",
            "import sys; from tests.cluster.test_container_sweep import "
            "sweep_on_cluster as run; run(*sys.argv[1:])",
            multinode.address,
            json.dumps(args),
        ],
        timeout_s=600,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    rows = _rows(out)
    assert len(rows) == count and all(r["ok"] and r["reward"] == 1.0 for r in rows), [
        (r["node"], r["error"]) for r in rows
    ]
    said = json.loads(done.stdout.strip().splitlines()[-1])
    assert said["ok"] == count
    assert {r["environment"] for r in rows} == {"image"}
    assert len({r["image_digest"] for r in rows}) == 1
    nodes = {n.ip for n in multinode.nodes.values() if n.ray is not None}
    assert {r["node"] for r in rows} == nodes
    # One outcome per node, each the image the rows ran in, none an error.
    assert sorted(node for node, _, _ in said["images"]) == sorted(nodes)
    assert {(digest, error) for _, digest, error in said["images"]} == {
        (rows[0]["image_digest"], None)
    }
    assert _left(tmp_path, out / "sandboxes", before) == NOTHING
    for node in _ray_nodes(multinode):  # and in each node's own mount namespace
        assert _mounts_under(tmp_path, node.ray.pid) == [], node.name


def sweep_on_cluster(address: str, args: str) -> None:
    """The driver of `test_container_rollouts_on_every_node`, run in the head's namespace
    (a Ray driver lives on a node): the images built on every node, then the sweep, one
    rollout per host; prints its result, one JSON line."""
    from harbor_ray.cluster.setup import ClusterSpec, running_cluster
    from harbor_ray.jobs.images import ImagesRequest, build_images

    given = json.loads(args)
    out = Path(given["out"])
    images = build_images(
        ImagesRequest(
            dataset=given["dataset"], ray_address=address, images_dir=Path(given["images_dir"])
        )
    )
    specs = _specs(Path(given["dataset"]), out, given["count"], Path(given["images_dir"]))
    with running_cluster(ClusterSpec(ray_address=address, wants_model=False)) as cluster:
        config = SweepConfig(
            out=out, concurrency=given["count"], proxy=cluster.proxy, rollouts_per_host=1, retries=0
        )
        stats = asyncio.run(sweep(specs, config, {"agent": "oracle"}))
    print(json.dumps({"ok": stats.ok, "images": [[o.node, o.digest, o.error] for o in images]}))


def _ray_nodes(cluster: NetnsCluster) -> list:
    return [n for n in cluster.nodes.values() if n.ray is not None and n.ray.poll() is None]


def _give_cgroups(cluster: NetnsCluster) -> None:
    """Mount this machine's cgroup hierarchies in each Ray node's mount namespace, as a
    real machine has them. The fixture starts a node with `ip netns exec`, which mounts a
    sysfs of the namespace's own on /sys, without the cgroup file systems under
    /sys/fs/cgroup: there the container sandbox cannot apply a task's limits ("No such
    file or directory: '/sys/fs/cgroup/memory/harbor_ray'"). Mounting a hierarchy again,
    with the options it has, gives the same one; a node that has them is left as is."""
    mounts, links = _cgroup_layout()
    script = ["set -e"]
    if mounts[0][2] != str(CGROUP_ROOT):  # v1, or hybrid: file systems in a tmpfs
        script.append(f"mount -t tmpfs -o mode=755 cgroup-root {CGROUP_ROOT}")
    for kind, options, point in mounts:
        script += [f"mkdir -p {point}", f"mount -t {kind} -o {options} {kind} {point}"]
    script += [f"ln -s {target} {link}" for link, target in links]
    for node in _ray_nodes(cluster):
        if any(
            " - cgroup" in line
            for line in Path(f"/proc/{node.ray.pid}/mountinfo").read_text().splitlines()
        ):
            continue
        subprocess.run(
            ["nsenter", "-t", str(node.ray.pid), "-m", "sh", "-c", "\n".join(script)],
            check=True,
            capture_output=True,
            timeout=30,
        )


def _cgroup_layout() -> tuple[list[tuple[str, str, str]], list[tuple[Path, str]]]:
    """This machine's cgroup file systems (type, options, mount point; the top one
    first) and the links beside them (v1's `cpu -> cpu,cpuacct`)."""
    mounts = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields, rest = line.split(" - ", 1)
        kind, _, options = rest.split()[:3]
        point = fields.split()[4]
        if kind in ("cgroup", "cgroup2") and point.startswith(str(CGROUP_ROOT)):
            mounts.append((kind, options, point))
    assert mounts, "no cgroup file system under /sys/fs/cgroup on this machine"
    links = (
        [(entry, os.readlink(entry)) for entry in CGROUP_ROOT.iterdir() if entry.is_symlink()]
        if mounts[0][2] != str(CGROUP_ROOT)
        else []
    )
    return sorted(mounts, key=lambda mount: len(mount[2])), links
