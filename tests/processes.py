"""What runs on this machine, for tests that must leave nothing behind."""

from __future__ import annotations

import os
import time
from pathlib import Path


def all_cmdlines() -> list[str]:
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            out.append(Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:
            continue
    return out


def gone(command: str, within_s: float = 10.0) -> bool:
    """Whether no process runs `command` (a SIGKILLed one may take a moment to go)."""
    deadline = time.monotonic() + within_s
    while any(command in line for line in all_cmdlines()):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True
