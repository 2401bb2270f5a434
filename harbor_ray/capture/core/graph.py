"""The prefix-linked rollout graph of one session, and the training sequences it yields.

Turns link by exact token prefix, never by message content or arrival order: the parent
of a turn is the turn whose full sequence (prompt + sampled ids) is the longest exact
prefix of its prompt, identical ones resolving to the lowest index, so the graph is a
function of the set of turns. Each leaf yields one training sequence (root to leaf)
whose loss mask covers exactly the tokens the engine sampled with a logprob. Why, and
what the build costs: docs/capture.md, "The rollout graph".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from types import MappingProxyType

import numpy as np

from harbor_ray.capture.core.address_equality import joined_view
from harbor_ray.capture.core.prefixes import Links, link, prompt_ids, token_ids
from harbor_ray.capture.core.turn import TurnRecord

__all__ = ["Node", "Role", "RolloutGraph", "TrainingSequence", "assemble", "build_graph"]


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

    `input_ids` is the leaf's prompt + sampled ids (int32; a read-only view of the
    session's buffer when they lie together there). `loss_mask` (uint8) is 1
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
    `prefixes.link`).
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
    return assemble(by_index, link(linked))


def assemble(by_index: Mapping[int, TurnRecord], links: Links) -> RolloutGraph:
    """The graph of `by_index` (ascending indices) given how its linked turns relate.

    `links` covers exactly the turns with prompt and sampled ids; the rest are unlinked.
    """
    linked_ids = list(links.parents)
    linked_ids.sort()
    parents = links.parents
    children: dict[int, list[int]] = {i: [] for i in linked_ids}
    for child in linked_ids:
        parent = parents[child]
        if parent is not None:
            children[parent].append(child)

    # A parent's prompt is strictly shorter than its child's (see `link`).
    order = sorted(linked_ids, key=lambda i: len(prompt_ids(by_index[i])))
    root_of: dict[int, int] = {}
    depth: dict[int, int] = {}
    for index in order:
        parent = parents[index]
        root_of[index] = index if parent is None else root_of[parent]
        depth[index] = 0 if parent is None else depth[parent] + 1

    roots = tuple(i for i in linked_ids if parents[i] is None)
    discarded = _discarded(links.prompt_class, children, roots)

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
        retokenization_splits=links.retokenization_splits,
        sequences=tuple(_sequence(leaf, nodes, by_index) for leaf in leaves),
    )


def _by_index(turns: Sequence[TurnRecord]) -> dict[int, TurnRecord]:
    by_index: dict[int, TurnRecord] = {}
    for turn in turns:
        assert turn.index not in by_index, f"two turns share index {turn.index}"
        by_index[turn.index] = turn
    return dict(sorted(by_index.items()))


def _discarded(
    prompt_class: Mapping[int, int],
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
        same_prompt: dict[int, list[int]] = {}
        for index in siblings:
            same_prompt.setdefault(prompt_class[index], []).append(index)
        for retries in same_prompt.values():
            if len(retries) < 2:
                continue
            continued = [i for i in retries if children[i]]
            kept = set(continued) if continued else {max(retries)}
            discarded.update(i for i in retries if i not in kept)
    return frozenset(discarded)


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
    input_ids = _joined(last.prompt_ids, last.token_ids)
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


def _joined(prompt: np.ndarray, tokens: np.ndarray) -> np.ndarray:
    """The leaf's prompt + sampled ids: one view when they are adjacent in a session's
    buffer (read-only, nothing copied), else a fresh int32 array."""
    if prompt.dtype == np.int32 and (view := joined_view(prompt, tokens)) is not None:
        return view
    joined: np.ndarray = np.concatenate((prompt, tokens))
    return joined.astype(np.int32, copy=False)


def _place(path: list[TurnRecord], loss_mask: np.ndarray, logprobs: np.ndarray) -> None:
    """Mark the path's sampled tokens trainable where they have a finite logprob.

    Linking guarantees each turn's prompt + sampled ids prefix the leaf's sequence, so its
    sampled tokens sit right after its prompt; validation re-checks that invariant.
    Absent or misaligned logprobs leave a turn's tokens masked (validation is FATAL).
    All turns are placed with one scatter, not one numpy call per turn.
    """
    aligned = [t for t in path if t.logprobs is not None and len(t.logprobs) == len(token_ids(t))]
    if not aligned:
        return
    values = np.concatenate([t.logprobs for t in aligned if t.logprobs is not None])
    lengths = np.array([len(token_ids(t)) for t in aligned])
    starts = np.array([len(prompt_ids(t)) for t in aligned])
    # Value k of turn t lands at start(t) + k: shift a running count by each turn's offset.
    shift = np.repeat(starts - (np.cumsum(lengths) - lengths), lengths)
    positions = np.arange(len(values)) + shift
    finite = np.isfinite(values)
    loss_mask[positions[finite]] = 1
    logprobs[positions[finite]] = values[finite]
