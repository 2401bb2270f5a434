"""What the benchmarks read of Linux's /proc: a process's parent, command line and CPU
time, without a dependency for three fields."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK")


def pids() -> Iterator[int]:
    """Every process on the machine now."""
    for name in os.listdir("/proc"):
        if name.isdigit():
            yield int(name)


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (the state, field 3, is [0]);
    None if the process is gone. `pid` may be "PID/task/TID" for a thread."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2 :].split()


def snapshot() -> dict[int, list[str]]:
    """Every live process's stat fields, each file read once."""
    return {pid: fields for pid in pids() if (fields := stat_fields(pid)) is not None}


def parent(fields: list[str]) -> int:
    return int(fields[1])


def cpu_s(fields: list[str], *, children: bool = False) -> float:
    """User + system CPU seconds; with `children`, its waited-for children's too."""
    return sum(int(f) for f in fields[11 : 15 if children else 13]) / TICK


def cmdline(pid: int) -> bytes | None:
    """The command line, NUL-separated; None if the process is gone."""
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None
