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
from collections import defaultdict
from pathlib import Path

__all__ = ["kill_descendants", "pid_namespace", "pids_in_pid_namespace", "process_tree"]


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


def kill_descendants(root: int) -> None:
    """SIGKILL everything in `root`'s tree (see `process_tree`) but `root`, then resume it.

    Killing a parent first would reparent its children out of the tree, and a process
    may fork while we look. So the tree is frozen (SIGSTOP, which cannot be caught)
    until a fresh look finds nothing new, and only then killed.

    `root` itself is spared so that it reaps its child and exits on its own: `root` is
    the host-side `nsenter` of a command, and a child killed together with it would
    stay a zombie until the host's pid 1 reaps it; the sandbox's pid namespace cannot
    finish dying before that. It is resumed because nsenter stops itself when its child
    stops.
    """
    frozen: set[int] = set()
    while new := process_tree(root) - frozen - {root}:
        for pid in new:
            _signal(pid, signal.SIGSTOP)
        frozen |= new
    for pid in frozen:
        _signal(pid, signal.SIGKILL)
    _signal(root, signal.SIGCONT)


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
