"""What dead sandboxes left in a directory, found from /proc and removed.

Only an owner that died leaves anything: directories, a pid 1 whose bwrap is gone
(killed with its whole pid namespace), and the cgroups of sandboxes with limits (removed
once their directory is). Run as a program it is a rollout host's guard:

    python -m harbor_ray.trials.sandbox.leftovers --after PID DIRECTORY

waits for the host's process to end, however it ends, then reaps DIRECTORY (relative to
its working directory, so its own command line names no sandbox's path). Standard
library and this package's /proc and cgroup helpers only. Why: docs/sandbox.md,
"Leftovers and the guard".
"""

from __future__ import annotations

import argparse
import contextlib
import os
import select
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from harbor_ray.trials.sandbox.limits import reap_cgroups
from harbor_ray.trials.sandbox.processes import kill_pid_namespace, namespace_init, process_tree

__all__ = ["Reaped", "reap", "reap_after", "reap_sandbox"]

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
    see their /usr vanish); the next reap takes it. Then the cgroups of the sandboxes
    whose directory is gone.
    """
    if not sandboxes_dir.is_dir():
        return Reaped(0, 0)
    root = sandboxes_dir.resolve()
    doomed = _kill_owners(_processes_naming(root))
    named = {arg for pid in _processes_naming(root) for arg in _cmdline(pid)}
    try:
        directories = [p for p in sandboxes_dir.iterdir() if p.is_dir() and not p.is_symlink()]
    except FileNotFoundError:  # another reaper (a dead host's guard) removed it meanwhile
        directories = []
    for directory in directories:
        if any(_names(arg, root / directory.name) for arg in named):
            continue
        # rmtree never follows symlinks an agent planted; the sandbox's binds lived in
        # its own mount namespace, gone with its processes.
        shutil.rmtree(directory, ignore_errors=True)
    # A run's sandboxes directory holds a directory per host, whose sandboxes' groups
    # are named after it: those are reaped with it.
    for directory in [sandboxes_dir, *directories]:
        reap_cgroups(directory)
    return Reaped(len(doomed), len(directories))


def reap_sandbox(directory: Path) -> Reaped:
    """Kill what runs of the one sandbox whose `/` is `directory`, then delete it and its
    cgroups, with any other its gone neighbours left (a warm pool's sandbox, known by its
    directory alone: trials/sandbox/pooled.py)."""
    if not directory.is_dir():
        return Reaped(0, 0)
    root = directory.resolve()
    doomed = _kill_owners(
        [
            pid
            for pid in _processes_naming(root.parent)
            if any(_names(arg, root) for arg in _cmdline(pid))
        ]
    )
    shutil.rmtree(directory, ignore_errors=True)
    reap_cgroups(directory.parent)
    return Reaped(len(doomed), 1)


def _kill_owners(owners: list[int]) -> set[int]:
    """SIGKILL `owners` with their trees, and each sandbox pid 1 among them with its pid
    namespace; wait until they are gone. The pids signalled."""
    doomed = set().union(*(process_tree(pid) for pid in owners))
    for pid in owners:
        doomed.update(_kill_namespace_of(pid))
    for pid in doomed:
        _kill(pid)
    _wait_gone(doomed)
    return doomed


def reap_after(pid: int, directory: Path) -> Reaped:
    """Wait until process `pid` has ended (at once if it already has), then `reap`."""
    with contextlib.suppress(ProcessLookupError):
        handle = os.pidfd_open(pid)
        try:
            select.select([handle], [], [])  # readable once the process has ended
        finally:
            os.close(handle)
    reaped = reap(directory)
    with contextlib.suppress(OSError):  # still used, or gone
        directory.rmdir()
    return reaped


def _processes_naming(root: Path) -> list[int]:
    """Every other process whose command line names a path below `root`."""
    prefix = os.fsencode(str(root)) + b"/"
    return [
        int(entry.name)
        for entry in os.scandir("/proc")
        if entry.name.isdigit()
        and int(entry.name) != os.getpid()
        and any(arg.startswith(prefix) for arg in _cmdline(int(entry.name)))
    ]


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


def main() -> None:
    parser = argparse.ArgumentParser(
        description="Reap a directory of sandboxes once a "
        "process has ended (a rollout host's guard)."
    )
    parser.add_argument("--after", type=int, required=True, metavar="PID")
    parser.add_argument("directory", type=Path, help="relative to the working directory")
    args = parser.parse_args()
    directory = args.directory.resolve()
    os.chdir("/")
    # Out of the host's tree: Ray kills a worker's children as it exits, and the guard
    # must outlive it. The host waits for the parent only, which returns at once.
    if os.fork():
        os._exit(0)
    reap_after(args.after, directory)


if __name__ == "__main__":
    main()
