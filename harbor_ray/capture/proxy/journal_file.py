"""A host's journal on its disk: appended as its sessions record, read once it died.

The records are `capture/core/journal.py`'s; this module only writes and reads them.
Each append is one `write` to a file opened `O_APPEND` (so entries never interleave,
and each is in the kernel, safe from the process's death, once the write returns);
with `fsync` it is also on the disk before `append` returns, which the store awaits
before the call's reply goes to the agent. The sync runs in a thread: the host's event
loop serves every other call meanwhile.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from harbor_ray.capture.core.journal import Decoded, Entry, decode_entries, encode_entry

__all__ = ["JournalFile", "read_journal"]


class JournalFile:
    """One host's journal, open for appending (`mode`: see `JournalMode`)."""

    def __init__(
        self, path: Path, mode: Literal["fsync", "flush"], sync: Callable[[int], None] = os.fsync
    ) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path, self.mode = path, mode
        self._sync = sync  # injectable, for tests to count the syncs
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC, 0o600)

    async def append(self, entry: Entry) -> None:
        """Write one entry; with `fsync`, return once it is on the disk."""
        frame = encode_entry(entry)
        written = os.write(self._fd, frame)
        if written != len(frame):  # a full disk: the rest would be a torn tail
            raise OSError(f"journal {self.path}: wrote {written} of {len(frame)} bytes")
        if self.mode == "fsync":
            await asyncio.to_thread(self._sync, self._fd)

    def clear(self) -> None:
        """Empty the journal: its owner has no session open, so no entry in it can be
        needed again (the next append starts the file afresh)."""
        os.ftruncate(self._fd, 0)

    def close(self) -> None:
        os.close(self._fd)

    def remove(self) -> None:
        """Close and delete the journal: its host ends with no rollout unfinished, so
        nothing in it can be needed."""
        self.close()
        self.path.unlink(missing_ok=True)


def read_journal(path: Path) -> Decoded:
    """The intact entries of the journal at `path`; none if there is no such file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return Decoded((), 0)
    return decode_entries(data)
