"""A session's recorded turns with their token ids held once, as views of shared buffers.

Each conversation line is one append-only buffer: a turn that continues it gets its
prompt and sampled ids as views of the buffer (only the new ids appended), a retry a
view without appending, and a turn that fits no buffer starts its own with a copy.
Memory grows with the unique tokens, a view handed out never changes, and a view holds
exactly the ids the turn arrived with. Pure: no I/O, no clock. Why and how:
docs/capture.md, "Held ids".
"""

from __future__ import annotations

import dataclasses

import numpy as np

from harbor_ray.capture.core.prefixes import common_prefix
from harbor_ray.capture.core.turn import TurnRecord

__all__ = ["HeldTurns", "held_bytes"]

_DTYPE = np.dtype(np.int32)  # the engine's ids (TurnRecord)
# Buffers tried besides the continued turn's, most recently used first: the main line
# and the side calls an agent interleaves with it (a title, a summary). A miss costs
# the ids its buffer shares with the prompt, so trying every buffer of a session full
# of forks would read each prompt once per fork.
_CANDIDATES = 3


class _Buffer:
    """An append-only run of ids: `data[:length]` is fixed, the rest is free capacity."""

    __slots__ = ("data", "length", "turns")

    def __init__(self, capacity: int) -> None:
        self.data = np.empty(capacity, _DTYPE)
        self.length = 0
        self.turns: set[int] = set()  # the turns with a view on `data`

    def view(self, start: int, end: int) -> np.ndarray:
        view = self.data[start:end]
        view.flags.writeable = False
        return view


class HeldTurns:
    """One session's turns by index, in arrival order, their ids held in shared buffers.

    `turns` is the record to read: growing a buffer replaces the records whose views it
    moves (same values, other memory), so hold indices, not records, across `add` calls.
    """

    def __init__(self) -> None:
        self.turns: dict[int, TurnRecord] = {}
        self._buffers: list[_Buffer] = []  # most recently used first
        self._buffer_of: dict[int, _Buffer] = {}

    def add(self, turn: TurnRecord, continues: int | None = None) -> TurnRecord:
        """Hold `turn` (its index not held yet); `continues`: the turn it is known to
        continue, whose buffer is tried first. Returns the record as held."""
        prompt = turn.prompt_ids
        if prompt is None or prompt.ndim != 1 or prompt.dtype != _DTYPE:
            self.turns[turn.index] = turn
            return turn
        buffer = self._fitting(prompt, continues)
        if buffer is None:
            buffer = _Buffer(len(prompt) + _length(turn.token_ids))
        else:
            self._buffers.remove(buffer)
        self._buffers.insert(0, buffer)
        if len(prompt) > buffer.length:
            self._append(buffer, prompt[buffer.length :])
        # The reply first: appending it may move the buffer, and the prompt's view must
        # be made on the array it ends up in.
        tokens = self._tokens(buffer, len(prompt), turn.token_ids)
        held = dataclasses.replace(turn, prompt_ids=buffer.view(0, len(prompt)), token_ids=tokens)
        buffer.turns.add(turn.index)
        self._buffer_of[turn.index] = buffer
        self.turns[turn.index] = held
        return held

    def remove(self, index: int) -> None:
        """Forget a turn; a buffer no turn views is dropped (views handed out keep their
        memory alive on their own)."""
        self.turns.pop(index, None)
        buffer = self._buffer_of.pop(index, None)
        if buffer is not None:
            buffer.turns.discard(index)
            if not buffer.turns:
                self._buffers.remove(buffer)

    def _fitting(self, prompt: np.ndarray, continues: int | None) -> _Buffer | None:
        """The first candidate buffer whose ids and `prompt` agree over their common
        length (so one extends the other), or None."""
        candidates = self._buffers[:_CANDIDATES]
        known = self._buffer_of.get(continues) if continues is not None else None
        if known is not None:
            candidates = [known, *(b for b in candidates if b is not known)]
        for buffer in candidates:
            n = min(len(prompt), buffer.length)
            if common_prefix(prompt[:n], buffer.data[:n]) == n:
                return buffer
        return None

    def _tokens(self, buffer: _Buffer, start: int, tokens: np.ndarray | None) -> np.ndarray | None:
        """The sampled ids as a view right after the prompt's, when the buffer ends
        there (they are appended) or already holds exactly them there (a duplicate)."""
        if tokens is None or tokens.ndim != 1 or tokens.dtype != _DTYPE:
            return tokens
        end = start + len(tokens)
        if start == buffer.length:
            self._append(buffer, tokens)
        elif end > buffer.length or not np.array_equal(buffer.data[start:end], tokens):
            return tokens
        return buffer.view(start, end)

    def _append(self, buffer: _Buffer, ids: np.ndarray) -> None:
        end = buffer.length + len(ids)
        if end > len(buffer.data):
            self._grow(buffer, max(end, 2 * len(buffer.data)))
        buffer.data[buffer.length : end] = ids
        buffer.length = end

    def _grow(self, buffer: _Buffer, capacity: int) -> None:
        """Move the buffer to `capacity` (doubling: each id is copied about once more)
        and re-point its turns' views to the same positions in the new array."""
        old = buffer.data
        buffer.data = np.empty(capacity, _DTYPE)
        buffer.data[: buffer.length] = old[: buffer.length]
        for index in buffer.turns:
            turn = self.turns[index]
            self.turns[index] = dataclasses.replace(
                turn,
                prompt_ids=_moved(turn.prompt_ids, old, buffer),
                token_ids=_moved(turn.token_ids, old, buffer),
            )


def _moved(ids: np.ndarray | None, old: np.ndarray, buffer: _Buffer) -> np.ndarray | None:
    """`ids` at the same positions of the buffer's new array, if it was a view of `old`."""
    if ids is None or ids.base is not old:
        return ids
    start = (
        ids.__array_interface__["data"][0] - old.__array_interface__["data"][0]
    ) // old.itemsize
    return buffer.view(start, start + len(ids))


def _length(ids: np.ndarray | None) -> int:
    return 0 if ids is None else len(ids)


def held_bytes(turns: list[TurnRecord] | tuple[TurnRecord, ...]) -> int:
    """Bytes of memory the turns' arrays keep alive, each buffer counted once (a view
    keeps its whole base array)."""
    owners: dict[int, int] = {}
    for turn in turns:
        for array in (turn.prompt_ids, turn.token_ids, turn.logprobs):
            if array is not None:
                owner = array.base if isinstance(array.base, np.ndarray) else array
                owners[id(owner)] = owner.nbytes
    return sum(owners.values())
