"""Equality from memory: claimed only where the same bytes are read as the same values."""

from __future__ import annotations

import numpy as np

from harbor_ray.capture.core.address_equality import equal, joined_view, same_memory

BUFFER = np.array([5, -1, 7, 7, 2, 9], dtype=np.int32)


def test_views_at_one_address_are_equal_unread() -> None:
    assert same_memory(BUFFER[1:4], BUFFER[1:4])
    assert same_memory(BUFFER[:3], BUFFER[:5][:3])


def test_other_memory_or_another_reading_is_not_claimed() -> None:
    assert not same_memory(BUFFER[:3], BUFFER.copy()[:3])  # equal values, other memory
    assert not same_memory(BUFFER[2:3], BUFFER[3:4])  # equal values, other address
    assert not same_memory(BUFFER[:3], BUFFER[:4])  # lengths differ
    assert not same_memory(BUFFER[:2], BUFFER.view(np.uint32)[:2])  # -1 is not 2**32 - 1
    assert not same_memory(BUFFER[:3], BUFFER[::2])  # another stride
    floats = np.array([np.nan, 1.0])
    assert not same_memory(floats, floats)  # NaN is unequal to itself


def test_equal_reads_what_memory_cannot_prove() -> None:
    assert equal(BUFFER[2:3], BUFFER[3:4])
    assert not equal(BUFFER[:2], BUFFER.view(np.uint32)[:2])
    assert not equal(BUFFER[:3], BUFFER[1:4])


def test_joined_view_joins_adjacent_views_of_one_buffer_only() -> None:
    joined = joined_view(BUFFER[1:3], BUFFER[3:5])
    assert joined is not None and joined.tolist() == [-1, 7, 7, 2]
    assert same_memory(joined[:2], BUFFER[1:3]) and not joined.flags.writeable
    assert joined_view(BUFFER[1:3], BUFFER[4:5]) is None  # a gap
    assert joined_view(BUFFER[1:3], BUFFER.copy()[3:5]) is None  # another buffer
    assert joined_view(BUFFER.copy(), BUFFER[:0]) is None  # owns its data: nothing to view
