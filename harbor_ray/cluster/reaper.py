"""Removing what dead rollouts left in a sweep's sandboxes directory, on every node.

A rollout tears its sandbox down itself, even when cancelled or past its deadline. Only
an owner that died (a killed actor, a killed driver, a lost node) leaves something
behind: its bwrap dies with it (`--die-with-parent`), but its directory stays, and a
process can outlive it: the sandbox's pid 1, once its bwrap is gone, names no path but
its own directory (layout.py), and the reaper kills it by its pid namespace.

Sandboxes are node-local: each lives on the node of the host that runs it, under
`SANDBOXES/<host>/` (the host puts it there), and only a process on that node can see
its processes and files. So reaping runs *on* the nodes, as Ray tasks pinned to each:
- the sweep owns SANDBOXES, so when no rollout of the sweep runs (its start and its end)
  everything under it is orphaned on every live node (`reap_everywhere`);
- a host that dies mid-sweep leaves `SANDBOXES/<host>/` on its node, reaped there at
  once while the node's other hosts go on (`reap_host`). A node that died took its
  sandboxes with it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ray

from harbor_ray.cluster.nodes import alive_nodes, on_each, pinned
from harbor_ray.trials.sandbox.processes import kill_pid_namespace, namespace_init, process_tree

_EXIT_WAIT_S = 10.0
_POLL_S = 0.05


@dataclass(frozen=True)
class Reaped:
    processes: int
    directories: int


def reap(sandboxes_dir: Path) -> Reaped:
    """Kill what runs of the sandboxes under `sandboxes_dir`, then delete their directories.

    Found from /proc: every process whose command line names a path under it (a host-side
    bwrap, a sandbox's pid 1) is SIGKILLed with its tree, and each such pid 1 with its
    whole pid namespace, so a pid 1 whose bwrap is gone goes with whatever it still
    runs. A directory that something alive still names is left (its processes would
    see their /usr vanish); the next reap takes it.
    """
    if not sandboxes_dir.is_dir():
        return Reaped(0, 0)
    root = sandboxes_dir.resolve()
    owners = _processes_naming(root)
    doomed = set().union(*(process_tree(pid) for pid in owners))
    for pid in owners:
        doomed.update(_kill_namespace_of(pid))
    for pid in doomed:
        _kill(pid)
    _wait_gone(doomed)
    named = {arg for pid in _processes_naming(root) for arg in _cmdline(pid)}
    directories = [p for p in sandboxes_dir.iterdir() if p.is_dir() and not p.is_symlink()]
    for directory in directories:
        if any(_names(arg, root / directory.name) for arg in named):
            continue
        # rmtree never follows symlinks an agent planted; the sandbox's binds lived in
        # its own mount namespace, gone with its processes.
        shutil.rmtree(directory, ignore_errors=True)
    return Reaped(len(doomed), len(directories))


def host_sandboxes(sandboxes_dir: Path, host: str) -> Path:
    """Where host `host` puts its sandboxes: a directory of its own, so that its loss
    can be reaped on its node without touching its neighbours'."""
    return sandboxes_dir / host


def reap_everywhere(sandboxes_dir: Path) -> Reaped:
    """`reap(sandboxes_dir)` on every live node of the cluster, waited for; only when no
    rollout that uses it runs. Totals over the nodes that answered (a node lost
    meanwhile took its sandboxes with it)."""
    done = [r for _, r in on_each(_reap_task, alive_nodes(), sandboxes_dir)
            if isinstance(r, Reaped)]
    return Reaped(sum(r.processes for r in done), sum(r.directories for r in done))


def reap_host(sandboxes_dir: Path, host: str, node_id: str) -> Any:  # ObjectRef
    """Reap what dead host `host` left, on its node; not waited for (the driver's loop
    goes on). A node that is gone fails the task: its sandboxes went with it."""
    return pinned(_reap_task, node_id).remote(host_sandboxes(sandboxes_dir, host))


@ray.remote
def _reap_task(directory: Path) -> Reaped:
    return reap(directory)


def _processes_naming(root: Path) -> list[int]:
    """Every other process whose command line names a path below `root`."""
    prefix = os.fsencode(str(root)) + b"/"
    return [int(entry.name) for entry in os.scandir("/proc")
            if entry.name.isdigit() and int(entry.name) != os.getpid()
            and any(arg.startswith(prefix) for arg in _cmdline(int(entry.name)))]


def _cmdline(pid: int) -> list[bytes]:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:  # exited while we looked
        return []


def _names(arg: bytes, path: Path) -> bool:
    prefix = os.fsencode(str(path))
    return arg == prefix or arg.startswith(prefix + b"/")


def _kill_namespace_of(pid: int) -> list[int]:
    """If `pid` is a sandbox's pid 1: SIGKILL its pid namespace; the pids signalled.

    The namespace is held open meanwhile, so its number cannot pass to another one."""
    if not namespace_init(pid):
        return []
    try:
        held = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY)
    except OSError:  # gone
        return []
    try:
        return kill_pid_namespace(os.fstat(held).st_ino)
    finally:
        os.close(held)


def _kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


def _wait_gone(pids: set[int]) -> None:
    deadline = time.monotonic() + _EXIT_WAIT_S
    while pids and time.monotonic() < deadline:
        pids = {pid for pid in pids if _alive(pid)}
        time.sleep(_POLL_S)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return False
    return state[state.rindex(b")") + 2 :][:1] not in (b"Z", b"X")
