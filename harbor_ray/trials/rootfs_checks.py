"""Whether a task image's root filesystem has the programs the container sandbox runs
in it, found as the sandbox will see them (each symlink resolved inside the root, never
on the host's /): apart from building and unpacking the image (images.py), since the
sandbox asks it too (has_command).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path, PurePosixPath

from harbor_ray.trials.sandbox.layout import SANDBOX_PATH

__all__ = ["has_command", "missing_entries", "refusal"]

# What the container sandbox enters through, each with the Debian package that has it:
# by its path, or (tar) anywhere on the sandbox's PATH, wherever the image keeps it.
_ENTRIES = {
    "/bin/bash": "bash",
    "/usr/bin/env": "coreutils",
    "/usr/bin/setpriv": "util-linux",
    "tar": "tar",
}


def has_command(rootfs: Path, command: str) -> bool:
    """Whether `command` is a program on the sandbox's PATH inside `rootfs`."""
    return any(
        _is_program(rootfs, PurePosixPath(directory) / command)
        for directory in SANDBOX_PATH.split(":")
    )


def missing_entries(rootfs: Path) -> list[str]:
    """What the container sandbox enters through and the root filesystem lacks ([] when
    it has all). Symlinks are followed inside `rootfs`, an absolute one from its top, as
    the sandbox will see them (merged-/usr images have /bin -> usr/bin)."""
    return [
        entry
        for entry in _ENTRIES
        if not (
            _is_program(rootfs, PurePosixPath(entry))
            if entry.startswith("/")
            else has_command(rootfs, entry)
        )
    ]


def _is_program(rootfs: Path, path: PurePosixPath) -> bool:
    resolved = _resolve_inside(rootfs, path)
    if resolved is None:
        return False
    try:
        info = resolved.stat()
    except OSError:
        return False
    return stat.S_ISREG(info.st_mode) and bool(info.st_mode & 0o111)


def _resolve_inside(rootfs: Path, path: PurePosixPath) -> Path | None:
    """`path` as seen from inside `rootfs`, every symlink on the way resolved there (an
    absolute target from `rootfs`, never the host's /); None past 40 links, a loop."""
    pending = list(path.parts[1:])
    current = PurePosixPath("/")
    links = 0
    while pending:
        part = pending.pop(0)
        if part == "..":
            current = current.parent
            continue
        if part in ("", "."):
            continue
        candidate = current / part
        on_host = rootfs / candidate.relative_to("/")
        if not on_host.is_symlink():
            current = candidate
            continue
        links += 1
        if links > 40:
            return None
        target = PurePosixPath(os.readlink(on_host))
        restart = target if target.is_absolute() else current / target
        pending = [*restart.parts[1:], *pending]
        current = PurePosixPath("/")
    return rootfs / current.relative_to("/")


def refusal(reference: str, missing: Sequence[str]) -> str:
    packages = sorted({_ENTRIES[entry] for entry in missing})
    return (
        f"image {reference} has no {', '.join(missing)}: the container sandbox enters "
        "through bash, env, setpriv and tar: base the Dockerfile on a Debian or Ubuntu "
        f"image, or install {', '.join(packages)}"
    )
