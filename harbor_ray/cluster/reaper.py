"""Removing what dead rollouts left in a sweep's sandboxes directory.

A rollout tears its sandbox down itself, even when cancelled or past its deadline. Only
an owner that died (a killed actor, a killed driver, a lost node) leaves something
behind: its bwrap dies with it (`--die-with-parent`), but its directory stays, and a
process can outlive it if the kernel has not finished. The sweep owns its sandboxes
directory, so when no rollout of the sweep runs (at its start and at its end) all that
is there is orphaned.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from harbor_ray.trials.sandbox.processes import process_tree

_EXIT_WAIT_S = 10.0
_POLL_S = 0.05


@dataclass(frozen=True)
class Reaped:
    processes: int
    directories: int


def reap(sandboxes_dir: Path) -> Reaped:
    """SIGKILL every process whose command line names a path under `sandboxes_dir` (the
    host-side bwrap), with its tree, then delete every directory in it."""
    if not sandboxes_dir.is_dir():
        return Reaped(0, 0)
    owners = _processes_naming(sandboxes_dir.resolve())
    doomed = set().union(*(process_tree(pid) for pid in owners)) if owners else set()
    for pid in doomed:
        _kill(pid)
    _wait_gone(doomed)
    directories = [p for p in sandboxes_dir.iterdir() if p.is_dir() and not p.is_symlink()]
    for directory in directories:
        # rmtree never follows symlinks an agent planted; the sandbox's binds lived in
        # its own mount namespace, gone with its processes.
        shutil.rmtree(directory, ignore_errors=True)
    return Reaped(len(doomed), len(directories))


def _processes_naming(root: Path) -> list[int]:
    prefix = os.fsencode(str(root)) + b"/"
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            argv = Path(entry.path, "cmdline").read_bytes().split(b"\0")
        except OSError:  # exited while we looked
            continue
        if any(arg.startswith(prefix) for arg in argv):
            found.append(int(entry.name))
    return found


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
