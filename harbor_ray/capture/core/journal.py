"""A host's turn journal as bytes: records framed, checksummed, and read back.

A rollout host appends one entry per event of its sessions (opened for a rollout, a
turn recorded, a recorded turn withdrawn, closed) to a file of its own, so that when
the host dies its rollouts' turns can still be read from its node. This module only
turns entries into bytes and bytes back into entries; the file is the edge's
(`capture/proxy/journal_file.py`).

A frame is `<u32 payload length><u32 CRC32 of the payload><payload>`, little-endian.
Reading stops at the first frame that is short (a write the host died in the middle
of) or whose checksum does not match: every entry before it is intact, and nothing
after it can be trusted to start at a frame boundary.

The payload is a pickle of the entry: the same objects already cross processes as
pickles through Ray (a host's `record` calls), and a journal is written by the run's
own hosts. Reading is held to the classes an entry is built of (`_Unpickler`), so a
damaged or foreign file fails to decode rather than running anything.
"""

from __future__ import annotations

import io
import pickle
import struct
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from harbor_ray.capture.core.turn import TurnRecord

__all__ = [
    "Closed",
    "Decoded",
    "Entry",
    "JournalMode",
    "Opened",
    "Recorded",
    "Withdrawn",
    "decode_entries",
    "encode_entry",
    "unfinished_turns",
]

# `fsync`: each entry reaches the disk before the reply reaches the agent (survives the
# node's operating system); `flush`: each entry is in the kernel before the reply
# (survives the host process, the case a dead host's reaper meets); `off`: no journal.
JournalMode = Literal["fsync", "flush", "off"]

_HEADER = struct.Struct("<II")


@dataclass(frozen=True)
class Opened:
    """Session `session_id` belongs to rollout `rollout_id`."""

    session_id: str
    rollout_id: str


@dataclass(frozen=True)
class Recorded:
    """A turn the session recorded (before its reply went to the agent)."""

    session_id: str
    turn: TurnRecord


@dataclass(frozen=True)
class Withdrawn:
    """A recorded turn whose reply never reached the agent (the store withdrew it)."""

    session_id: str
    index: int


@dataclass(frozen=True)
class Closed:
    """The session closed: its turns went to its rollout's own row."""

    session_id: str


Entry = Opened | Recorded | Withdrawn | Closed


@dataclass(frozen=True)
class Decoded:
    """The intact entries of a journal, and where (and why) reading stopped early."""

    entries: tuple[Entry, ...]
    intact_bytes: int  # the length of the journal's intact prefix
    stopped: str | None = None  # None: the whole journal was intact


def encode_entry(entry: Entry) -> bytes:
    """One framed record."""
    payload = pickle.dumps(entry, protocol=pickle.HIGHEST_PROTOCOL)
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def decode_entries(data: bytes) -> Decoded:
    """The entries of `data`, up to the first torn or damaged frame."""
    entries: list[Entry] = []
    offset, view = 0, memoryview(data)
    while offset < len(data):
        if len(data) - offset < _HEADER.size:
            return Decoded(tuple(entries), offset, f"a torn header at byte {offset}")
        length, crc = _HEADER.unpack_from(view, offset)
        start = offset + _HEADER.size
        payload = view[start : start + length]
        if len(payload) < length:
            return Decoded(tuple(entries), offset, f"a torn record at byte {offset}")
        if zlib.crc32(payload) != crc:
            return Decoded(tuple(entries), offset, f"a bad checksum at byte {offset}")
        try:
            entry = _Unpickler(io.BytesIO(payload)).load()
        except Exception as exc:  # a checksummed payload that is no entry: a foreign file
            return Decoded(
                tuple(entries),
                offset,
                f"an undecodable record at byte {offset} ({type(exc).__name__})",
            )
        if not isinstance(entry, Opened | Recorded | Withdrawn | Closed):
            return Decoded(tuple(entries), offset, f"a record of no entry type at byte {offset}")
        entries.append(entry)
        offset = start + length
    return Decoded(tuple(entries), offset)


def unfinished_turns(entries: Iterable[Entry]) -> Mapping[str, tuple[TurnRecord, ...]]:
    """The turns of every rollout whose session never closed, by rollout id, in
    admission order; withdrawn turns left out, a turn journaled twice kept once."""
    rollout_of: dict[str, str] = {}
    turns: dict[str, dict[int, TurnRecord]] = {}
    for entry in entries:
        if isinstance(entry, Opened):
            rollout_of[entry.session_id] = entry.rollout_id
            turns[entry.session_id] = {}
        elif isinstance(entry, Recorded):
            turns.setdefault(entry.session_id, {}).setdefault(entry.turn.index, entry.turn)
        elif isinstance(entry, Withdrawn):
            turns.get(entry.session_id, {}).pop(entry.index, None)
        else:
            rollout_of.pop(entry.session_id, None)
    return {
        rollout: tuple(sorted(turns[session].values(), key=lambda t: t.index))
        for session, rollout in rollout_of.items()
    }


# What an entry is built of; nothing else is loaded. numpy arrays pickle as a call to
# one of its rebuilding functions (the name moved to `numpy._core` in numpy 2).
_CORE = "harbor_ray.capture.core."
_ALLOWED = frozenset(
    {
        ("numpy", "dtype"),
        ("numpy", "ndarray"),
        *((f"numpy.{core}.numeric", "_frombuffer") for core in ("core", "_core")),
        *((f"numpy.{core}.multiarray", "_reconstruct") for core in ("core", "_core")),
        *(("builtins", name) for name in ("frozenset", "set", "tuple", "list", "dict", "bytes")),
    }
)


class _Unpickler(pickle.Unpickler):
    def find_class(self, module: str, name: str) -> Any:
        if module.startswith(_CORE) or (module, name) in _ALLOWED:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"{module}.{name} is not part of a journal entry")
