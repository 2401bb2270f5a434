"""Exact prefix relations among a session's turns, from one trie of their ids.

The turns' full sequences (prompt + sampled ids) go into a compacted trie, so "A is a
prefix of B" is read off the tree's shape with no token compared; parents, same-prompt
classes and re-tokenisation splits all come from it. Exact, never by hash: sequences
are placed by comparing ids (numpy), longest first. How placing stays near one read per
token: docs/capture.md, "Prefixes".
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harbor_ray.capture.core.address_equality import Place
from harbor_ray.capture.core.turn import TurnRecord

__all__ = ["Links", "common_prefix", "link", "prompt_ids", "token_ids"]

# Token comparisons start on this many tokens and grow 8x per step, so a mismatch near
# the start costs little and an equal run of millions costs a handful of numpy calls.
_FIRST_CHUNK = 1 << 16
_GROWTH = 8


@dataclass(frozen=True)
class Links:
    """What exact prefixes say about a set of linked turns, keyed by turn index.

    `parents`: see `link`. `prompt_class`: equal values exactly for turns whose prompts
    are identical. `retokenization_splits`: ascending pairs (i, j), see `link`.
    """

    parents: Mapping[int, int | None]
    prompt_class: Mapping[int, int]
    retokenization_splits: tuple[tuple[int, int], ...]


def link(linked: Sequence[TurnRecord]) -> Links:
    """The exact-prefix relations among `linked` (turns with prompt and sampled ids).

    Parent: the turn whose full sequence is the longest exact prefix of this turn's
    prompt, the lowest index among identical ones. A turn that sampled nothing is never
    a parent: its full sequence is just its prompt, so it would adopt its own retries
    (and two such turns each other). Without it, a parent's prompt is strictly shorter
    than its child's, so the links cannot form a cycle.

    Re-tokenisation split (i, j): turn i's prompt extends turn j's prompt but not j's
    prompt + sampled ids, and j's prompt reaches at least as far as i's parent's full
    sequence. Detokenising and re-tokenising a reply can change its ids, so
    the next prompt holds j's prompt and a different rendering of j's reply; exact
    linking then attaches i higher up, beside j. A shorter j is an older retry that i's
    own ancestry already explains. An agent that rewrites its history (drops a reply)
    makes the same shape; validation reports either way.
    """
    trie = _Trie(linked)
    index = [t.index for t in linked]
    tree = _Shape(trie)

    # Lowest index among the turns with a reply whose full sequence ends on each node.
    lowest: dict[int, int] = {}
    for pos, t in enumerate(linked):
        if len(token_ids(t)):
            node = trie.full_node[pos]
            lowest[node] = min(lowest.get(node, t.index), t.index)
    best = tree.nearest(lambda node: node in lowest, proper=False)

    parents: dict[int, int | None] = {}
    parent_pos: list[int | None] = []
    pos_of = {i: pos for pos, i in enumerate(index)}
    for pos in range(len(linked)):
        found = best[trie.prompt_node[pos]]
        parents[index[pos]] = None if found is None else lowest[found]
        parent_pos.append(None if found is None else pos_of[lowest[found]])

    prompts_at: dict[int, list[int]] = {}
    for pos, node in enumerate(trie.prompt_node):
        prompts_at.setdefault(node, []).append(pos)
    above = tree.nearest(lambda node: node in prompts_at, proper=True)

    splits: list[tuple[int, int]] = []
    for pos, node in enumerate(trie.prompt_node):
        parent = parent_pos[pos]
        reach = 0 if parent is None else trie.depth[trie.full_node[parent]]
        # Every prompt that is a proper prefix of this one ends above its node. A turn
        # the walk visits that is not a split sampled nothing (with a reply, its full
        # sequence would be a longer candidate parent than the one found), so the walk
        # costs the splits it reports plus such turns.
        at = above[node]
        while at is not None and trie.depth[at] >= reach:
            for other in prompts_at[at]:
                if not tree.contains(trie.full_node[other], node):
                    splits.append((index[pos], index[other]))
            at = above[at]

    return Links(
        parents=parents,
        prompt_class={index[pos]: node for pos, node in enumerate(trie.prompt_node)},
        retokenization_splits=tuple(sorted(splits)),
    )


class _Trie:
    """The compacted trie of the turns' full sequences, with every prompt's end a node.

    Nodes are parallel lists; node 0 is the empty sequence. `witness[v]` is the position
    (in `linked`) of the turn whose full sequence was placed through v first, hence a
    longest one; the nodes one turn witnesses form one downward run along its sequence
    (`_run_depths`, `_run_nodes`, by depth), ending where it ends.
    """

    def __init__(self, linked: Sequence[TurnRecord]) -> None:
        self._prompts = [prompt_ids(t) for t in linked]
        self._tokens = [token_ids(t) for t in linked]
        self._places = [
            (Place(p), Place(s)) for p, s in zip(self._prompts, self._tokens, strict=True)
        ]
        self._length = [len(p) + len(s) for p, s in zip(self._prompts, self._tokens, strict=True)]
        self.depth: list[int] = [0]
        self.up: list[int] = [-1]
        self.kids: list[dict[int, int]] = [{}]
        self.witness: list[int] = [-1]
        self._run_depths: list[list[int]] = [[] for _ in linked]
        self._run_nodes: list[list[int]] = [[] for _ in linked]
        self.prompt_node = [0] * len(linked)
        self.full_node = [0] * len(linked)
        # Longest first: what makes each node's witness a longest sequence through it.
        for pos in sorted(range(len(linked)), key=lambda p: -self._length[p]):
            self._place(pos)

    def _place(self, seq: int) -> None:
        """Put `seq`'s full sequence in, with nodes where its prompt and it end.

        Follows one witness per step as far as it agrees with it; creates what is
        missing: a leaf where `seq` leaves the trie, a split where it ends or parts from
        its witness inside an edge.
        """
        stop, goal = len(self._prompts[seq]), self._length[seq]
        node = depth = 0
        if stop == 0:
            self.prompt_node[seq] = 0
        while depth < goal:
            child = self.kids[node].get(self._token(seq, depth))
            if child is None:
                if depth < stop:
                    node = self._leaf(node, depth, seq, stop)
                    self.prompt_node[seq] = node
                    depth = stop
                if depth < goal:
                    node = self._leaf(node, depth, seq, goal)
                break
            witness = self.witness[child]
            # `seq` is no longer than the witness (placed longest first), so the witness
            # covers everything up to `goal`; both share the token at `depth`.
            agree = self._agree(seq, witness, depth + 1, goal)
            if depth < stop <= agree:
                node = self._on_witness(node, child, stop)
                self.prompt_node[seq] = node
                depth = stop
                if agree == stop:
                    continue
                child = self.kids[node][self._token(witness, stop)]
            node = self._on_witness(node, child, agree)
            depth = agree
        self.full_node[seq] = node

    def _on_witness(self, node: int, child: int, depth: int) -> int:
        """The node at `depth` on the path of `child`'s witness, below `node` (its parent)."""
        if depth < self.depth[child]:
            return self._split(node, child, depth)
        # Deepest node of the witness's run no deeper than `depth`.
        witness = self.witness[child]
        depths, nodes = self._run_depths[witness], self._run_nodes[witness]
        k = bisect.bisect_right(depths, depth) - 1
        if depths[k] < depth:
            return self._split(nodes[k], nodes[k + 1], depth)
        return nodes[k]

    def _leaf(self, node: int, depth: int, seq: int, goal: int) -> int:
        leaf = self._node(goal, node, seq)
        self.kids[node][self._token(seq, depth)] = leaf
        # A sequence's leaves are made top-down, so appending keeps its run sorted.
        self._run_depths[seq].append(goal)
        self._run_nodes[seq].append(leaf)
        return leaf

    def _split(self, above: int, below: int, depth: int) -> int:
        """A new node at `depth` on the edge `above` -> `below`; its witness is below's."""
        seq = self.witness[below]
        middle = self._node(depth, above, seq)
        self.kids[above][self._token(seq, self.depth[above])] = middle
        self.kids[middle][self._token(seq, depth)] = below
        self.up[below] = middle
        depths = self._run_depths[seq]
        k = bisect.bisect_left(depths, depth)
        depths.insert(k, depth)
        self._run_nodes[seq].insert(k, middle)
        return middle

    def _node(self, depth: int, up: int, witness: int) -> int:
        self.depth.append(depth)
        self.up.append(up)
        self.kids.append({})
        self.witness.append(witness)
        return len(self.depth) - 1

    def _token(self, seq: int, depth: int) -> int:
        prompt = self._prompts[seq]
        if depth < len(prompt):
            return int(prompt[depth])
        return int(self._tokens[seq][depth - len(prompt)])

    def _agree(self, a: int, b: int, lo: int, hi: int) -> int:
        """The first depth in [lo, hi) where sequences a and b differ, else hi."""
        bound_a, bound_b = len(self._prompts[a]), len(self._prompts[b])
        start = lo
        while start < hi:
            # Up to where either passes from prompt to sampled ids: one slice each.
            end = hi
            if start < bound_a < end:
                end = bound_a
            if start < bound_b < end:
                end = bound_b
            if not self._shared(a, b, start):
                same = common_prefix(self._slice(a, start, end), self._slice(b, start, end))
                if same < end - start:
                    return start + same
            start = end
        return hi

    def _shared(self, a: int, b: int, depth: int) -> bool:
        """Whether sequences a and b hold depth `depth` (and on, within one part of each)
        in the same memory: then they agree there without a read (`address_equality`)."""
        place, k = self._located(a, depth)
        return place.shares(k, *self._located(b, depth))

    def _located(self, seq: int, depth: int) -> tuple[Place, int]:
        """The part (prompt or sampled ids) of `seq` holding `depth`, and where in it."""
        bound = len(self._prompts[seq])
        prompt, tokens = self._places[seq]
        return (prompt, depth) if depth < bound else (tokens, depth - bound)

    def _slice(self, seq: int, start: int, end: int) -> np.ndarray:
        """Depths [start, end) of a sequence, which lie within its prompt or its reply."""
        prompt = self._prompts[seq]
        if end <= len(prompt):
            return prompt[start:end]
        return self._tokens[seq][start - len(prompt) : end - len(prompt)]


class _Shape:
    """The trie's tree shape: prefix tests in O(1) and nearest-marked-ancestor tables."""

    def __init__(self, trie: _Trie) -> None:
        count = len(trie.depth)
        self.order: list[int] = []  # preorder: every node after its ancestors
        self._enter = [0] * count
        self._leave = [0] * count
        stack = [(0, False)]
        clock = 0
        while stack:
            node, done = stack.pop()
            if done:
                self._leave[node] = clock
                continue
            self._enter[node] = clock
            clock += 1
            self.order.append(node)
            stack.append((node, True))
            stack.extend((kid, False) for kid in trie.kids[node].values())
        self._up = trie.up

    def contains(self, a: int, b: int) -> bool:
        """Whether node b is a or below it (b's sequence starts with a's)."""
        return self._enter[a] <= self._enter[b] < self._leave[a]

    def nearest(self, marked: Callable[[int], bool], *, proper: bool) -> list[int | None]:
        """Each node's nearest marked ancestor, itself included unless `proper`."""
        inclusive: list[int | None] = [None] * len(self._enter)
        strict: list[int | None] = [None] * len(self._enter)
        for node in self.order:  # an ancestor's entry is ready before its descendants'
            up = self._up[node]
            strict[node] = None if up < 0 else inclusive[up]
            inclusive[node] = node if marked(node) else strict[node]
        return strict if proper else inclusive


def common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    """How many leading tokens two equal-length arrays share; stops near the first difference."""
    n = len(a)
    start, step = 0, _FIRST_CHUNK
    while start < n:
        end = min(n, start + step)
        differ = a[start:end] != b[start:end]
        # argmax finds the first True (0 when none): one C call, no `any` wrapper.
        first = int(differ.argmax())
        if differ[first]:
            return start + first
        start, step = end, step * _GROWTH
    return n


def prompt_ids(turn: TurnRecord) -> np.ndarray:
    """A linked turn's prompt ids."""
    assert turn.prompt_ids is not None
    return turn.prompt_ids


def token_ids(turn: TurnRecord) -> np.ndarray:
    """A linked turn's sampled ids."""
    assert turn.token_ids is not None
    return turn.token_ids
