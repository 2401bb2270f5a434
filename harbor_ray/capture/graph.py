"""The prefix-linked rollout graph of one session, and the training sequences it yields.

Turns link by exact token prefix, never by message content or arrival order: turn k+1's
prompt is the engine's own tokenisation of everything before it, so a call whose prompt
begins with another call's prompt + sampled ids continued that call. Re-rendering the
conversation offline drifted on every model family tried (LESSONS.md, Tokens), which is
why nothing here looks at text.

The parent of a turn is the turn whose full sequence (prompt + sampled ids) is the longest
exact prefix of its prompt; identical full sequences resolve to the lowest index. The
graph is therefore a function of the set of turns: a late ancestor adopts earlier
arrivals. Each leaf yields one training sequence (root to leaf) whose loss mask covers
exactly the tokens the engine sampled with a logprob.

Speed matters (a 50-turn rollout of ~2.4M prompt tokens must link in a few ms), so
candidate parents are bucketed by length and probed on a few tokens before a single
vectorised comparison; there is no loop over tokens in Python.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

import numpy as np

from harbor_ray.capture.turn import TurnRecord

__all__ = ["Node", "Role", "RolloutGraph", "TrainingSequence", "build_graph"]


class Role(StrEnum):
    """What a turn or sequence is for. Trainers filter on it."""

    AGENT = "agent"
    # The tree's root was marked auxiliary by the edge (a title or summary call).
    AUXILIARY = "auxiliary"
    # An abandoned retry: kept for inspection, masked out of training.
    DISCARDED = "discarded"


@dataclass(frozen=True)
class Node:
    """One turn's place in the graph. Unlinked turns have `root` None and no relatives."""

    index: int
    parent: int | None
    children: tuple[int, ...]
    root: int | None
    depth: int
    role: Role


@dataclass(frozen=True, eq=False)
class TrainingSequence:
    """One root-to-leaf path as a trainer reads it.

    `input_ids` is the leaf's prompt + sampled ids (int32). `loss_mask` (uint8) is 1
    exactly on the sampled tokens of the path's turns that have a finite logprob;
    `logprobs` (float32) holds the engine's logprob there and 0.0 elsewhere. A
    discarded sequence has an all-zero mask.
    """

    root: int
    leaf: int
    turns: tuple[int, ...]
    role: Role
    input_ids: np.ndarray
    loss_mask: np.ndarray
    logprobs: np.ndarray


@dataclass(frozen=True, eq=False)
class RolloutGraph:
    """The forest of one session's turns. Every index tuple is in ascending order.

    `unlinked` holds turns without prompt or sampled ids: they have no parent, are
    nobody's parent and yield no sequence (validation reports them).
    `retokenization_splits` holds pairs (i, j): turn i's prompt extends turn j's prompt
    but not turn j's sampled ids, past the point where i is linked (see
    `_retokenization_splits`).
    """

    nodes: Mapping[int, Node]
    roots: tuple[int, ...]
    leaves: tuple[int, ...]
    forks: tuple[int, ...]
    discarded: tuple[int, ...]
    unlinked: tuple[int, ...]
    retokenization_splits: tuple[tuple[int, int], ...]
    sequences: tuple[TrainingSequence, ...]

    @property
    def agent_roots(self) -> tuple[int, ...]:
        """Roots of agent trees. A harness that rewrote its prompt has several; all count."""
        return tuple(r for r in self.roots if self.nodes[r].role is Role.AGENT)


def build_graph(turns: Sequence[TurnRecord]) -> RolloutGraph:
    """Link `turns` by exact token prefix and derive their training sequences.

    Raises ValueError when two turns share an index: indices are assigned by the
    session's owner, so a duplicate is a bug upstream, not a property of the data.
    """
    by_index = _by_index(turns)
    linked = [t for t in by_index.values() if t.prompt_ids is not None and t.token_ids is not None]
    linked_ids = [t.index for t in linked]  # ascending, like by_index

    parents = _parents(linked)
    children: dict[int, list[int]] = {t.index: [] for t in linked}
    for child in linked_ids:
        parent = parents[child]
        if parent is not None:
            children[parent].append(child)

    # A parent's prompt is strictly shorter than its child's (see `_parents`).
    order = sorted(linked, key=lambda t: len(_prompt(t)))
    root_of: dict[int, int] = {}
    depth: dict[int, int] = {}
    for turn in order:
        parent = parents[turn.index]
        root_of[turn.index] = turn.index if parent is None else root_of[parent]
        depth[turn.index] = 0 if parent is None else depth[parent] + 1

    roots = tuple(i for i in linked_ids if parents[i] is None)
    discarded = _discarded(by_index, parents, children, roots)

    nodes: dict[int, Node] = {}
    for index, turn in by_index.items():
        if index not in children:
            nodes[index] = Node(index, None, (), None, 0, _tree_role(turn))
            continue
        role = Role.DISCARDED if index in discarded else _tree_role(by_index[root_of[index]])
        nodes[index] = Node(
            index, parents[index], tuple(children[index]), root_of[index], depth[index], role
        )

    leaves = tuple(i for i in linked_ids if not children[i])
    return RolloutGraph(
        nodes=MappingProxyType(nodes),
        roots=roots,
        leaves=leaves,
        forks=tuple(i for i in linked_ids if len(children[i]) > 1),
        discarded=tuple(sorted(discarded)),
        unlinked=tuple(i for i in by_index if i not in children),
        retokenization_splits=_retokenization_splits(linked, parents, by_index),
        sequences=tuple(_sequence(leaf, nodes, by_index) for leaf in leaves),
    )


def _by_index(turns: Sequence[TurnRecord]) -> dict[int, TurnRecord]:
    by_index: dict[int, TurnRecord] = {}
    for turn in turns:
        if turn.index in by_index:
            raise ValueError(f"two turns share index {turn.index}")
        by_index[turn.index] = turn
    return dict(sorted(by_index.items()))


def _full_len(turn: TurnRecord) -> int:
    assert turn.prompt_ids is not None and turn.token_ids is not None
    return len(turn.prompt_ids) + len(turn.token_ids)


def _starts_with(seq: np.ndarray, head: np.ndarray, tail: np.ndarray | None = None) -> bool:
    """Whether `seq` begins with `head` (+ `tail`), without concatenating anything.

    A few probe tokens reject most candidates before the one vectorised comparison.
    """
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
    # Slices of equal length compared directly: np.array_equal's checks double the cost.
    if m and not (seq[n : n + m] == tail).all():
        return False
    return bool((seq[:n] == head).all())


def _parents(linked: list[TurnRecord]) -> dict[int, int | None]:
    """Each linked turn's parent: the longest full sequence that prefixes its prompt.

    Candidates are visited longest first and, within one length, lowest index first, so
    the first exact match is the answer. A turn that sampled nothing is never a parent:
    its full sequence is just its prompt, so it would adopt its own retries (and two
    such turns each other). Without it, a parent's prompt is strictly shorter than its
    child's, so the links cannot form a cycle.
    """
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


def _discarded(
    by_index: Mapping[int, TurnRecord],
    parents: Mapping[int, int | None],
    children: Mapping[int, list[int]],
    roots: tuple[int, ...],
) -> frozenset[int]:
    """Leaves that are abandoned retries of a sibling with the identical prompt.

    If a sibling with the same prompt was continued, the agent went on from it; if none
    was, the agent's last attempt (highest index) is the one it kept.
    """
    sibling_groups = [roots, *(tuple(c) for c in children.values() if len(c) > 1)]
    discarded: set[int] = set()
    for siblings in sibling_groups:
        for same_prompt in _same_prompt_classes(siblings, by_index):
            if len(same_prompt) < 2:
                continue
            continued = [i for i in same_prompt if children[i]]
            kept = set(continued) if continued else {max(same_prompt)}
            discarded.update(i for i in same_prompt if i not in kept)
    return frozenset(discarded)


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
    """Pairs (i, j) where turn i continued turn j's prompt but not j's sampled ids.

    Detokenising and re-tokenising a reply can change its ids (ENGINE.md), so the next
    prompt holds j's prompt and a different rendering of j's reply. Exact linking then
    attaches i higher up: to no parent (a new root) when j was the first call, otherwise
    to an earlier ancestor, beside j. Only j whose prompt reaches at least as far as i's
    parent's full sequence count: a shorter one is an older retry that i's own ancestry
    already explains. The same shape arises when an agent rewrites its history (drops a
    reply); validation reports either way.
    """
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


def _prompt(turn: TurnRecord) -> np.ndarray:
    assert turn.prompt_ids is not None
    return turn.prompt_ids


def _tokens(turn: TurnRecord) -> np.ndarray:
    assert turn.token_ids is not None
    return turn.token_ids


def _tree_role(root: TurnRecord) -> Role:
    return Role.AUXILIARY if root.auxiliary else Role.AGENT


def _sequence(
    leaf: int, nodes: Mapping[int, Node], by_index: Mapping[int, TurnRecord]
) -> TrainingSequence:
    path = [leaf]
    while (parent := nodes[path[-1]].parent) is not None:
        path.append(parent)
    path.reverse()

    last = by_index[leaf]
    assert last.prompt_ids is not None and last.token_ids is not None
    input_ids = np.concatenate((last.prompt_ids, last.token_ids)).astype(np.int32, copy=False)
    loss_mask = np.zeros(len(input_ids), dtype=np.uint8)
    logprobs = np.zeros(len(input_ids), dtype=np.float32)
    role = nodes[leaf].role
    if role is not Role.DISCARDED:
        _place([by_index[i] for i in path], loss_mask, logprobs)
    return TrainingSequence(
        root=path[0],
        leaf=leaf,
        turns=tuple(path),
        role=role,
        input_ids=input_ids,
        loss_mask=loss_mask,
        logprobs=logprobs,
    )


def _place(path: list[TurnRecord], loss_mask: np.ndarray, logprobs: np.ndarray) -> None:
    """Mark the path's sampled tokens trainable where they have a finite logprob.

    Linking guarantees each turn's prompt + sampled ids prefix the leaf's sequence, so its
    sampled tokens sit right after its prompt; validation re-checks that invariant.
    Absent or misaligned logprobs leave a turn's tokens masked (validation is FATAL).
    All turns are placed with one scatter, not one numpy call per turn.
    """
    aligned = [t for t in path if t.logprobs is not None and len(t.logprobs) == len(_tokens(t))]
    if not aligned:
        return
    values = np.concatenate([t.logprobs for t in aligned if t.logprobs is not None])
    lengths = np.array([len(_tokens(t)) for t in aligned])
    starts = np.array([len(_prompt(t)) for t in aligned])
    # Value k of turn t lands at start(t) + k: shift a running count by each turn's offset.
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    positions = np.arange(len(values)) + shift
    finite = np.isfinite(values)
    loss_mask[positions[finite]] = 1
    logprobs[positions[finite]] = values[finite]
