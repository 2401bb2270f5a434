"""What runs on this machine, for tests that must leave nothing behind."""

from __future__ import annotations

import os
import time
from pathlib import Path


def cmdline(pid: int | str) -> bytes:
    """A process's argv, NUL-separated, or b"" for one that ended since it was listed."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return b""


def all_cmdlines() -> list[str]:
    lines = (cmdline(pid) for pid in filter(str.isdigit, os.listdir("/proc")))
    return [line.replace(b"\0", b" ").decode() for line in lines if line]


def gone(command: str, within_s: float = 10.0) -> bool:
    """Whether no process runs `command` (a SIGKILLed one may take a moment to go)."""
    deadline = time.monotonic() + within_s
    while any(command in line for line in all_cmdlines()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def _mount_of(path: Path) -> tuple[str, str]:
    """(device, path within that device's filesystem) of `path`, from our mountinfo."""
    text = str(path)
    best = ("", "", "")
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        fields = line.split()
        device, root, point = fields[2], fields[3], fields[4]
        inside = text == point or text.startswith(point.rstrip("/") + "/")
        if inside and len(point) >= len(best[2]):
            best = (device, root, point)
    device, root, point = best
    rest = text[len(point.rstrip("/")) :]
    return device, root.rstrip("/") + rest


def _root_mount(pid: int) -> tuple[str, str] | None:
    """(device, path within its filesystem) of what `pid` sees as `/`."""
    try:
        lines = Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        fields = line.split()
        if fields[4] == "/":
            root = fields[3]
            return fields[2], root
    return None


def sandbox_processes(root: Path) -> list[int]:
    """Live processes of the sandboxes under `root`, counted from /proc alone: those whose
    command line names a path under it (bwrap), and those whose `/` is a directory under
    it (everything inside a sandbox, its pid 1 first; still so once the directory is
    removed, when the kernel appends `//deleted`)."""
    root = root.resolve()
    device, inside = _mount_of(root)
    prefix = os.fsencode(str(root)) + b"/"
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = Path(f"/proc/{pid}/stat").read_bytes()
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if stat[stat.rindex(b")") + 2 :][:1] in (b"Z", b"X") or int(pid) == os.getpid():
            continue
        mount = _root_mount(int(pid))
        if any(arg.startswith(prefix) for arg in argv) or (
            mount is not None
            and mount[0] == device
            and mount[1].startswith(inside.rstrip("/") + "/")
        ):
            found.append(int(pid))
    return sorted(found)
