"""The linking build_graph used before the prefix trie, kept only as a test oracle.

It compares whole prompts candidate by candidate (its cost grows with the prompts
summed over the turns, times the candidates), which is fine for tests. Only the parts
that decide prefixes are kept here; the graph is assembled by the package's own
`assemble`, so a difference in a comparison is a difference in linking.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence

import numpy as np

from harbor_ray.capture.core.graph import RolloutGraph, _by_index, assemble
from harbor_ray.capture.core.prefixes import Links
from harbor_ray.capture.core.prefixes import prompt_ids as _prompt
from harbor_ray.capture.core.prefixes import token_ids as _tokens
from harbor_ray.capture.core.turn import TurnRecord


def build_graph_reference(turns: Sequence[TurnRecord]) -> RolloutGraph:
    by_index = _by_index(turns)
    linked = [t for t in by_index.values() if t.prompt_ids is not None and t.token_ids is not None]
    parents = _parents(linked)
    classes = _same_prompt_classes(tuple(t.index for t in linked), by_index)
    links = Links(
        parents=parents,
        prompt_class={i: k for k, cls in enumerate(classes) for i in cls},
        retokenization_splits=_retokenization_splits(linked, parents, by_index),
    )
    return assemble(by_index, links)


def _full_len(turn: TurnRecord) -> int:
    assert turn.prompt_ids is not None and turn.token_ids is not None
    return len(turn.prompt_ids) + len(turn.token_ids)


def _starts_with(seq: np.ndarray, head: np.ndarray, tail: np.ndarray | None = None) -> bool:
    n = len(head)
    m = 0 if tail is None else len(tail)
    if n + m > len(seq):
        return False
    if m:
        assert tail is not None
        if seq[n + m - 1] != tail[-1] or seq[n] != tail[0]:
            return False
    if n and (seq[n - 1] != head[-1] or seq[0] != head[0] or seq[n // 2] != head[n // 2]):
        return False
    if m and not (seq[n : n + m] == tail).all():
        return False
    return bool((seq[:n] == head).all())


def _parents(linked: list[TurnRecord]) -> dict[int, int | None]:
    by_length: dict[int, list[TurnRecord]] = {}
    for turn in sorted(linked, key=lambda t: t.index):
        if len(_tokens(turn)):
            by_length.setdefault(_full_len(turn), []).append(turn)
    lengths = sorted(by_length)

    parents: dict[int, int | None] = {}
    for turn in linked:
        prompt = _prompt(turn)
        parents[turn.index] = None
        for k in range(bisect.bisect_right(lengths, len(prompt)) - 1, -1, -1):
            match = _first_prefix(prompt, by_length[lengths[k]])
            if match is not None:
                parents[turn.index] = match
                break
    return parents


def _first_prefix(prompt: np.ndarray, candidates: list[TurnRecord]) -> int | None:
    for candidate in candidates:
        if _starts_with(prompt, _prompt(candidate), candidate.token_ids):
            return candidate.index
    return None


def _same_prompt_classes(
    siblings: tuple[int, ...], by_index: Mapping[int, TurnRecord]
) -> list[list[int]]:
    classes: list[list[int]] = []
    for index in siblings:
        prompt = by_index[index].prompt_ids
        assert prompt is not None
        for cls in classes:
            other = by_index[cls[0]].prompt_ids
            assert other is not None
            if len(other) == len(prompt) and _starts_with(prompt, other):
                cls.append(index)
                break
        else:
            classes.append([index])
    return classes


def _retokenization_splits(
    linked: list[TurnRecord],
    parents: Mapping[int, int | None],
    by_index: Mapping[int, TurnRecord],
) -> tuple[tuple[int, int], ...]:
    by_prompt_len = sorted(linked, key=lambda t: (len(_prompt(t)), t.index))
    prompt_lens = [len(_prompt(t)) for t in by_prompt_len]

    splits: list[tuple[int, int]] = []
    for turn in sorted(linked, key=lambda t: t.index):
        prompt = _prompt(turn)
        parent = parents[turn.index]
        reach = 0 if parent is None else _full_len(by_index[parent])
        lo = bisect.bisect_left(prompt_lens, reach)
        hi = bisect.bisect_left(prompt_lens, len(prompt))
        for other in by_prompt_len[lo:hi]:
            if _starts_with(prompt, _prompt(other)) and not _starts_with(
                prompt, _prompt(other), other.token_ids
            ):
                splits.append((turn.index, other.index))
    return tuple(sorted(splits))
