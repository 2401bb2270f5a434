"""A sandbox's cpu and memory limits, applied with cgroups (v1 or v2).

`settings` is the pure part: which file of which controller gets which value for a task's
`cpus` and `memory_mb`. `Cgroups` makes one sandbox's groups, writes them, gives the argv
prefix that puts a process in them before it execs, and removes them once empty;
`reap_cgroups` removes those a dead owner left. Standard library (and harbor_ray.errors)
only: the leftovers guard (leftovers.py) imports it.

Why a prefix rather than one placement of pid 1: commands enter the sandbox through an
`nsenter` the host spawns, which joins the sandbox's namespaces but not its cgroup, so
every process the sandbox starts (pid 1's bwrap, each nsenter) writes itself into the
groups first (`join_argv`); its children inherit them.

Where: one group per sandbox under a `harbor_ray` group at the top of each hierarchy
(`/sys/fs/cgroup/memory/harbor_ray/` and `.../cpu/harbor_ray/` on v1, `/sys/fs/cgroup/
harbor_ray/` on v2), as Docker's cgroupfs driver does, rather than below the owner's own
group: v2 lets a group hand controllers to its children only while it holds no process
itself, which the owner's group does. The name ties a group to its sandbox directory
(`cgroup_name`), so a reaper of a sandboxes directory finds the groups of its sandboxes.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harbor_ray.errors import SandboxError

__all__ = [
    "CGROUP_ROOT",
    "Cgroups",
    "Limits",
    "Setting",
    "cgroup_name",
    "cgroup_problems",
    "is_v2",
    "reap_cgroups",
    "settings",
]

CGROUP_ROOT = Path("/sys/fs/cgroup")
_PARENT = "harbor_ray"
# The cfs period: the quota is cpus times this, in microseconds, as Docker's `--cpus`.
_PERIOD_US = 100_000
_MIN_QUOTA_US = 1_000  # the kernel's smallest quota

# Each process writes itself ($$) into every group named before `--`, then execs the rest.
_JOIN_SCRIPT = 'while [ "$1" != -- ]; do echo $$ > "$1" || exit 125; shift; done; shift; exec "$@"'


@dataclass(frozen=True)
class Limits:
    """What a task may use (task.toml's `cpus`, `memory_mb`); None: no limit."""

    cpus: float | None = None
    memory_mb: int | None = None


@dataclass(frozen=True)
class Setting:
    """`value` written to `file` of the sandbox's group in `hierarchy` (a v1 controller's
    mount under /sys/fs/cgroup; "" for v2's single one). `optional`: a file the kernel
    has only with swap accounting, skipped where it is missing."""

    hierarchy: str
    file: str
    value: str
    optional: bool = False


def settings(limits: Limits, *, v2: bool) -> list[Setting]:
    """The writes that apply `limits`, in the order they must be made.

    Memory is the task's alone, swap included (swap at 0, where the kernel accounts it),
    so that a task over its limit is killed as it would be on a machine without swap,
    whatever this host has. v1 wants the memory limit before the memory+swap one, which
    may never be below it.
    """
    written: list[Setting] = []
    if limits.memory_mb is not None:
        limit = str(limits.memory_mb * 1024 * 1024)
        if v2:
            written += [
                Setting("", "memory.max", limit),
                Setting("", "memory.swap.max", "0", optional=True),
            ]
        else:
            written += [
                Setting("memory", "memory.limit_in_bytes", limit),
                Setting("memory", "memory.memsw.limit_in_bytes", limit, optional=True),
            ]
    if limits.cpus is not None:
        quota = str(max(_MIN_QUOTA_US, round(limits.cpus * _PERIOD_US)))
        if v2:
            written.append(Setting("", "cpu.max", f"{quota} {_PERIOD_US}"))
        else:
            written += [
                Setting("cpu", "cpu.cfs_period_us", str(_PERIOD_US)),
                Setting("cpu", "cpu.cfs_quota_us", quota),
            ]
    return written


def is_v2(root: Path = CGROUP_ROOT) -> bool:
    """Whether `root` is a cgroup v2 (unified) hierarchy."""
    return (root / "cgroup.controllers").is_file()


def cgroup_problems(root: Path = CGROUP_ROOT) -> list[str]:
    """What stops this machine from limiting a sandbox's cpu and memory, one line each;
    [] if nothing."""
    if is_v2(root):
        controllers = set((root / "cgroup.controllers").read_text().split())
        places = [root]
        problems = [
            f"cgroup v2 at {root} lacks the {name} controller: enable it (kernel "
            "command line, or another manager holding it)."
            for name in ("cpu", "memory")
            if name not in controllers
        ]
    else:
        places = [root / "memory", root / "cpu"]
        problems = [
            f"no cgroup v1 hierarchy {place}: mount the {place.name} controller."
            for place in places
            if not place.is_dir()
        ]
    return problems + [
        f"{place} is not writable: the container sandbox needs root to apply "
        "the task's cpu and memory limits."
        for place in places
        if place.is_dir() and not os.access(place, os.W_OK)
    ]


def cgroup_name(directory: Path) -> str:
    """The name of the groups of the sandbox whose `/` is `directory`: a digest of its
    parent (the sandboxes directory, resolved), then its own name."""
    return f"{_digest(directory.resolve().parent)}-{directory.name}"


def _digest(sandboxes_dir: Path) -> str:
    return hashlib.sha256(os.fsencode(str(sandboxes_dir))).hexdigest()[:12]


def _parents(root: Path, v2: bool) -> list[Path]:
    """The `harbor_ray` group of each hierarchy a sandbox's groups can be in."""
    if v2:
        return [root / _PARENT]
    return [root / hierarchy / _PARENT for hierarchy in ("memory", "cpu")]


class Cgroups:
    """The groups of one sandbox, one per hierarchy its limits write to (none without
    limits: then nothing is made, and `join_argv` adds nothing)."""

    def __init__(self, directory: Path, limits: Limits, root: Path = CGROUP_ROOT) -> None:
        self._root = root
        self._v2 = is_v2(root)
        self._settings = settings(limits, v2=self._v2)
        name = cgroup_name(directory)
        self._groups = {
            setting.hierarchy: root / setting.hierarchy / _PARENT / name
            for setting in self._settings
        }

    @property
    def groups(self) -> list[Path]:
        return list(self._groups.values())

    def create(self) -> None:
        """Make the groups and write the limits; on failure nothing is left made."""
        try:
            for group in self.groups:
                group.parent.mkdir(exist_ok=True)
                if self._v2:
                    self._enable_controllers(group.parent)
                group.mkdir()
            for setting in self._settings:
                path = self._groups[setting.hierarchy] / setting.file
                if not (setting.optional and not path.exists()):
                    path.write_text(setting.value)
        except OSError as exc:
            self.remove()
            raise SandboxError(
                f"cannot set the sandbox's limits with cgroups: {exc} (the "
                "container sandbox needs root and writable cgroups)"
            ) from exc

    def _enable_controllers(self, parent: Path) -> None:
        """v2: let `parent` (below the root) and the groups below it use the controllers
        the limits need."""
        wanted = {setting.file.split(".")[0] for setting in self._settings}
        for group in (self._root, parent):
            control = group / "cgroup.subtree_control"
            if missing := wanted - set(control.read_text().split()):
                control.write_text(" ".join(f"+{name}" for name in sorted(missing)))

    def join_argv(self, argv: Sequence[str]) -> list[str]:
        """`argv`, run by a process that first writes itself into every group."""
        if not self.groups:
            return list(argv)
        procs = [str(group / "cgroup.procs") for group in self.groups]
        return ["/bin/sh", "-c", _JOIN_SCRIPT, "sh", *procs, "--", *argv]

    def remove(self) -> None:
        """Remove the groups; run once no process of the sandbox is left (a killed one
        leaves its groups as it exits, before its parent reaps it). Idempotent.
        `SandboxError` naming the processes still in a group, which then stays."""
        for group in self.groups:
            try:
                group.rmdir()
            except FileNotFoundError:
                pass
            except OSError as exc:
                left = (group / "cgroup.procs").read_text().split()
                raise SandboxError(
                    f"processes {left} are still in the sandbox's cgroup {group}: {exc}"
                ) from exc


# How long a reaper waits for a dead sandbox's group to empty before leaving it.
_EMPTYING_S = 5.0


def reap_cgroups(sandboxes_dir: Path, root: Path = CGROUP_ROOT) -> int:
    """Remove the groups of the sandboxes under `sandboxes_dir` whose directory is gone
    (a dead owner's); those of a directory still there, or with a process still in
    them, stay. The groups removed."""
    prefix = _digest(sandboxes_dir.resolve()) + "-"
    removed = 0
    for parent in _parents(root, is_v2(root)):
        for group in parent.glob(prefix + "*") if parent.is_dir() else ():
            if (sandboxes_dir / group.name.removeprefix(prefix)).exists():
                continue
            removed += _emptied_and_removed(group)
    return removed


def _emptied_and_removed(group: Path, wait_s: float = _EMPTYING_S) -> bool:
    """Remove a dead sandbox's group. Its processes may still be dying (killed with
    their pid namespace a moment ago, some in uninterruptible sleep), which keeps the
    group busy: each left is killed again, and the removal retried for `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            group.rmdir()
            return True
        except FileNotFoundError:
            return False  # another reaper took it
        except OSError:
            if time.monotonic() >= deadline:
                return False  # the next reap retries
        for pid in _members(group):
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


def _members(group: Path) -> list[int]:
    try:
        return [int(line) for line in (group / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []
