"""The journal's records as bytes: round trip, a torn tail, a bad checksum, a foreign
payload, and which rollouts' turns a dead host's journal still holds."""

from __future__ import annotations

import pickle
import struct
import zlib

import numpy as np

from harbor_ray.capture.core.journal import (
    Closed,
    Opened,
    Recorded,
    Withdrawn,
    decode_entries,
    encode_entry,
    unfinished_turns,
)
from harbor_ray.capture.core.turn import TurnRecord
from tests.capture.turns_factory import turn


def _same_turn(a: TurnRecord, b: TurnRecord) -> bool:
    arrays = ("prompt_ids", "token_ids", "logprobs")
    return all(np.array_equal(getattr(a, f), getattr(b, f)) for f in arrays) and {
        k: v for k, v in vars(a).items() if k not in arrays
    } == {k: v for k, v in vars(b).items() if k not in arrays}


def _entries() -> list:
    return [
        Opened("h.s1", "task__0__r"),
        Recorded("h.s1", turn(0, [1, 2, 3], [4, 5])),
        Recorded("h.s1", turn(1, [1, 2, 3, 4, 5, 6], [7])),
        Withdrawn("h.s1", 1),
        Closed("h.s1"),
    ]


def test_entries_round_trip_with_their_arrays() -> None:
    entries = _entries()
    decoded = decode_entries(b"".join(encode_entry(e) for e in entries))
    assert decoded.stopped is None
    assert len(decoded.entries) == len(entries)
    for got, sent in zip(decoded.entries, entries, strict=True):
        if isinstance(sent, Recorded):
            assert isinstance(got, Recorded) and got.session_id == sent.session_id
            assert _same_turn(got.turn, sent.turn)
            assert got.turn.token_ids is not None and got.turn.token_ids.dtype == np.int32
        else:
            assert got == sent


def test_a_torn_tail_keeps_every_whole_record_before_it() -> None:
    frames = [encode_entry(e) for e in _entries()[:3]]
    whole = b"".join(frames[:2])
    for cut in (1, 5, len(frames[2]) - 1):  # in the header, just after it, in the payload
        decoded = decode_entries(whole + frames[2][:cut])
        assert len(decoded.entries) == 2
        assert decoded.intact_bytes == len(whole)
        assert decoded.stopped is not None and "torn" in decoded.stopped


def test_reading_stops_at_a_bad_checksum() -> None:
    frames = [encode_entry(e) for e in _entries()]
    damaged = bytearray(frames[1])
    damaged[-1] ^= 0xFF
    decoded = decode_entries(frames[0] + bytes(damaged) + b"".join(frames[2:]))
    assert [type(e) for e in decoded.entries] == [Opened]
    assert decoded.intact_bytes == len(frames[0])
    assert decoded.stopped is not None and "checksum" in decoded.stopped


def test_a_checksummed_payload_of_another_class_is_not_loaded() -> None:
    payload = pickle.dumps(print)  # builtins.print: a callable a pickle could reach
    frame = struct.pack("<II", len(payload), zlib.crc32(payload)) + payload
    decoded = decode_entries(encode_entry(Closed("h.s")) + frame)
    assert decoded.entries == (Closed("h.s"),)
    assert decoded.stopped is not None and "undecodable" in decoded.stopped


def test_only_unclosed_sessions_give_turns_each_once_and_withdrawn_ones_left_out() -> None:
    t0, t1, t2 = turn(0, [1], [2]), turn(1, [1, 2, 3], [4]), turn(2, [1, 2, 3, 4, 5], [6])
    entries = [
        Opened("h.done", "finished"),
        Recorded("h.done", t0),
        Closed("h.done"),
        Opened("h.live", "lost"),
        Recorded("h.live", t1),
        Recorded("h.live", t0),
        Recorded("h.live", t1),  # a record delivered twice
        Recorded("h.live", t2),
        Withdrawn("h.live", 2),
        Opened("h.empty", "no-turns"),
    ]
    found = unfinished_turns(entries)
    assert set(found) == {"lost", "no-turns"}
    assert [t.index for t in found["lost"]] == [0, 1]
    assert found["no-turns"] == ()
