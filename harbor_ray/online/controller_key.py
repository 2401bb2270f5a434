"""The controller key, kept in a file the service's YAML names (never an env var).

A missing file is created with a fresh random key, readable by its owner only (mode
600), so a first `serve run` needs no setup and the key is where the trainer reads it.
A file that others can read is refused: anyone who can read it can drive the service.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path

from harbor_ray.errors import ServiceConfigError

__all__ = ["load_or_create_key"]

_KEY_BYTES = 32


def load_or_create_key(path: Path) -> tuple[str, bool]:
    """(the key in `path`, whether it was created now)."""
    path = path.expanduser()
    path.parent.mkdir(parents=True, exist_ok=True)
    created = False
    try:
        # O_EXCL: two replicas starting at once agree on one key (the loser reads it).
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        pass
    else:
        with os.fdopen(fd, "w") as out:
            out.write(secrets.token_urlsafe(_KEY_BYTES) + "\n")
        created = True
    mode = path.stat().st_mode
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ServiceConfigError(
            f"key_file: {path} is readable by others (mode {stat.filemode(mode)}): chmod 600 it"
        )
    key = path.read_text().strip()
    if not key:
        raise ServiceConfigError(f"key_file: {path} is empty")
    return key, created
