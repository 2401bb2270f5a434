"""Finding and killing host processes through /proc.

A command run in a sandbox can leave processes behind that its parent no longer waits
for: background jobs (`cmd &`), children that called setsid, daemons. Killing only the
process we started would leave them running, so these helpers work on the whole tree,
read from the host's /proc (where every pid, including those inside a sandbox's pid
namespace, appears with its host number).
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections import defaultdict
from pathlib import Path

# Stopping takes a process its next return from the kernel; one in an uninterruptible
# wait (a slow disk) may take longer, and is then killed unstopped.
_STOP_WAIT_S = 1.0
_STOP_POLL_S = 0.001
_STOPPED = frozenset({"T", "t", "Z", "X"})

__all__ = [
    "kill_descendants",
    "kill_pid_namespace",
    "kill_tree",
    "namespace_init",
    "pid_namespace",
    "pids_in_pid_namespace",
    "process_tree",
]


def _processes() -> dict[int, tuple[str, int, int]]:
    """Every host process as pid -> (state, parent pid, process group)."""
    table: dict[int, tuple[str, int, int]] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            data = Path(entry.path, "stat").read_bytes()
        except OSError:  # exited while we were scanning
            continue
        # The command name may hold spaces and parentheses; the fields after the
        # last ')' are fixed.
        state, ppid, pgrp = data[data.rindex(b")") + 2 :].split()[:3]
        table[int(entry.name)] = (state.decode(), int(ppid), int(pgrp))
    return table


def process_tree(root: int) -> set[int]:
    """`root`, its descendants, and what is left of its process group (with theirs).

    The process group catches background jobs whose parent already exited (they are
    reparented away, so no longer descendants); the descendants catch children that
    moved to a session of their own.
    """
    table = _processes()
    children: dict[int, list[int]] = defaultdict(list)
    for pid, (_, ppid, _) in table.items():
        children[ppid].append(pid)
    pending = [pid for pid, (_, _, pgrp) in table.items() if pid == root or pgrp == root]
    tree: set[int] = set()
    while pending:
        pid = pending.pop()
        if pid not in tree:
            tree.add(pid)
            pending.extend(children[pid])
    return tree


def _signal(pid: int, signum: signal.Signals) -> None:
    # Gone already, or not ours to signal.
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def _freeze(root: int, spared: set[int]) -> set[int]:
    """SIGSTOP `root`'s tree (see `process_tree`) but `spared`; the stopped pids.

    Killing a parent first would reparent its children out of the tree, and a process
    may fork while we look. So the tree is frozen (SIGSTOP, which cannot be caught)
    until a fresh look finds nothing new.
    """
    frozen: set[int] = set()
    while new := process_tree(root) - frozen - spared:
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        _wait_stopped(new)
        frozen |= new
    return frozen


def _wait_stopped(pids: set[int]) -> None:
    """Until each of `pids` has stopped (or is gone): a signal is only acted on between
    system calls, so a process told to stop mid-fork may yet add a child we did not
    see, and that child, its parent killed, may wait for it for ever (a bwrap's pid 1
    waits for its uid map)."""
    deadline = time.monotonic() + _STOP_WAIT_S
    pending = set(pids)
    while pending and time.monotonic() < deadline:
        table = _processes()
        pending = {pid for pid in pending if table.get(pid, ("X",))[0] not in _STOPPED}
        if pending:
            time.sleep(_STOP_POLL_S)


def kill_descendants(root: int) -> None:
    """SIGKILL everything in `root`'s tree (see `process_tree`) but `root`, then resume it.

    `root` itself is spared so that it reaps its child and exits on its own: `root` is
    the host-side `nsenter` of a command, and a child killed together with it would
    stay a zombie until the host's pid 1 reaps it; the sandbox's pid namespace cannot
    finish dying before that. It is resumed because nsenter stops itself when its child
    stops.
    """
    for pid in _freeze(root, {root}):
        _signal(pid, signal.SIGKILL)
    _signal(root, signal.SIGCONT)


def kill_tree(root: int) -> None:
    """SIGKILL `root` and everything in its tree, frozen first (see `_freeze`).

    For a bwrap whose sandbox is not known yet (a start cut short): frozen, it cannot
    clone the sandbox's pid 1 after we looked, and a pid 1 it did clone is in its tree.
    """
    for pid in _freeze(root, set()):
        _signal(pid, signal.SIGKILL)


def pid_namespace(pid: int) -> int:
    """The inode number identifying `pid`'s pid namespace."""
    return os.stat(f"/proc/{pid}/ns/pid").st_ino


def pids_in_pid_namespace(namespace: int) -> list[int]:
    """Host pids of the live (not zombie) processes in the given pid namespace."""
    found = []
    for pid, (state, _, _) in _processes().items():
        if state in ("Z", "X"):
            continue
        try:
            if pid_namespace(pid) == namespace:
                found.append(pid)
        except OSError:
            continue
    return sorted(found)


def namespace_init(pid: int) -> bool:
    """Whether `pid` is pid 1 of a pid namespace below ours (a sandbox's init).

    /proc/PID/status lists its pid in each namespace from ours down (`NSpid:`); a
    namespace's init has 1 as the last, and more than one.
    """
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:  # gone
        return False
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            pids = line.split()[1:]
            return len(pids) > 1 and pids[-1] == "1"
    return False


def kill_pid_namespace(namespace: int) -> list[int]:
    """SIGKILL every process in the given pid namespace; the pids signalled.

    The caller holds the namespace (an open /proc/PID/ns/pid), so that its number has
    not gone to another one since it was read. Its init is among them: once that dies,
    the kernel kills whatever else is in the namespace, even one forked after we looked.
    """
    pids = pids_in_pid_namespace(namespace)
    for pid in pids:
        _signal(pid, signal.SIGKILL)
    return pids
