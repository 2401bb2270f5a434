"""Equality of token arrays proved from where they live, without reading them.

A session holds its turns' ids as views of shared buffers (`token_buffers`): a turn's prompt is
the memory its parent's prompt and sampled ids already occupy, plus what it added. Two
integer arrays that start at the same address, with the same dtype and strides, read
the same bytes at every position, so they are equal over their common length; that is
all this module claims, and it holds for any arrays, shared or not (arrays that do not
share memory simply fall back to a real comparison). Floats are excluded: NaN at the
same address is still unequal to itself.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import numpy as np

__all__ = ["Place", "equal", "joined_view", "same_memory"]

# Kinds whose equal bytes are equal values (bool, signed and unsigned integers).
_EXACT_KINDS = frozenset("biu")


class Place:
    """Where an array's elements live: the address of element 0, its step and dtype.

    `at(k)` is the address of element k; two places with the same `at(k)`, step and
    dtype hold the same value there (integer dtypes only: `exact`).
    """

    __slots__ = ("address", "dtype", "exact", "step")

    def __init__(self, array: np.ndarray) -> None:
        self.address: int = array.__array_interface__["data"][0]
        self.step: int = array.strides[0] if array.ndim == 1 else 0
        self.dtype = array.dtype
        self.exact = array.ndim == 1 and array.dtype.kind in _EXACT_KINDS

    def at(self, k: int) -> int:
        return self.address + k * self.step

    def shares(self, k: int, other: Place, j: int) -> bool:
        """Whether element k here and element j of `other` (and every pair after them at
        the same distance) are the same memory, hence the same value."""
        return (
            self.exact
            and other.exact
            and self.step == other.step
            and self.dtype == other.dtype
            and self.at(k) == other.at(j)
        )


def same_memory(a: np.ndarray, b: np.ndarray) -> bool:
    """Whether two equal-length arrays are provably equal from their memory alone."""
    return len(a) == len(b) and (len(a) == 0 or Place(a).shares(0, Place(b), 0))


def equal(a: np.ndarray, b: np.ndarray) -> bool:
    """`np.array_equal`, without reading shared memory."""
    return same_memory(a, b) or bool(np.array_equal(a, b))


def joined_view(head: np.ndarray, tail: np.ndarray) -> np.ndarray | None:
    """One view of `head` followed by `tail` when `tail` starts where `head` ends in the
    same buffer (1-D, contiguous, same dtype), else None; nothing is copied."""
    owner = head.base
    if (
        not isinstance(owner, np.ndarray)
        or tail.base is not owner
        or owner.ndim != 1
        or not owner.flags.c_contiguous
        or head.dtype != owner.dtype
        or tail.dtype != owner.dtype
        or not (head.flags.c_contiguous and tail.flags.c_contiguous)
    ):
        return None
    size = owner.itemsize
    start = (Place(head).address - Place(owner).address) // size
    if len(tail) and Place(tail).address != Place(head).address + len(head) * size:
        return None
    view = owner[start : start + len(head) + len(tail)]
    view.flags.writeable = False
    return view
