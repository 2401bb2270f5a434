from __future__ import annotations

import dataclasses
import random

import numpy as np
import pytest

from harbor_ray.capture.core.graph import Node, Role, RolloutGraph, build_graph
from harbor_ray.capture.core.turn import TurnRecord
from tests.capture.turns_factory import chain, follow, full, shuffled, turn


def signature(graph: RolloutGraph) -> tuple[object, ...]:
    """Everything a graph says, in comparable form (sequences hold arrays)."""
    return (
        dict(graph.nodes),
        graph.roots,
        graph.leaves,
        graph.forks,
        graph.discarded,
        graph.unlinked,
        graph.retokenization_splits,
        [
            (
                s.root,
                s.leaf,
                s.turns,
                s.role,
                s.input_ids.tolist(),
                s.loss_mask.tolist(),
                s.logprobs.tolist(),
            )
            for s in graph.sequences
        ],
    )


def parents(graph: RolloutGraph) -> dict[int, int | None]:
    return {i: n.parent for i, n in graph.nodes.items()}


def roles(graph: RolloutGraph) -> dict[int, Role]:
    return {i: n.role for i, n in graph.nodes.items()}


def sequence_to(graph: RolloutGraph, leaf: int):
    (found,) = [s for s in graph.sequences if s.leaf == leaf]
    return found


def fork_session() -> list[TurnRecord]:
    """0 -> 1 -> 3 and 0 -> 2: two different continuations of turn 0."""
    t0 = turn(0, [1, 2, 3], [10, 11])
    t1 = follow(t0, 1, [4], [20, 21])
    t2 = follow(t0, 2, [5, 6], [30])
    t3 = follow(t1, 3, [7], [40, 41, 42])
    return [t0, t1, t2, t3]


# --- structure ---------------------------------------------------------------------


def test_linear_chain() -> None:
    graph = build_graph(chain(4))
    assert graph.nodes[0] == Node(0, None, (1,), 0, 0, Role.AGENT)
    assert graph.nodes[2] == Node(2, 1, (3,), 0, 2, Role.AGENT)
    assert graph.nodes[3] == Node(3, 2, (), 0, 3, Role.AGENT)
    assert graph.roots == (0,)
    assert graph.agent_roots == (0,)
    assert graph.leaves == (3,)
    assert graph.forks == ()
    assert graph.discarded == ()
    assert graph.unlinked == ()
    assert graph.retokenization_splits == ()
    (sequence,) = graph.sequences
    assert (sequence.root, sequence.leaf, sequence.turns) == (0, 3, (0, 1, 2, 3))
    assert sequence.role is Role.AGENT


def test_fork_yields_one_sequence_per_branch() -> None:
    graph = build_graph(fork_session())
    assert parents(graph) == {0: None, 1: 0, 2: 0, 3: 1}
    assert graph.nodes[0].children == (1, 2)
    assert graph.forks == (0,)
    assert graph.leaves == (2, 3)
    assert [s.turns for s in graph.sequences] == [(0, 2), (0, 1, 3)]
    assert {i: n.depth for i, n in graph.nodes.items()} == {0: 0, 1: 1, 2: 1, 3: 2}
    assert {i: n.root for i, n in graph.nodes.items()} == {0: 0, 1: 0, 2: 0, 3: 0}
    # Different prompts are real branches, not retries.
    assert graph.discarded == ()
    assert set(roles(graph).values()) == {Role.AGENT}


def test_parent_is_longest_prefix_not_just_any_prefix() -> None:
    # Turn 2's prompt starts with both turn 0's and turn 1's full sequences.
    t0 = turn(0, [1, 2], [3])
    t1 = follow(t0, 1, [4], [5])
    t2 = follow(t1, 2, [6], [7])
    assert parents(build_graph([t0, t1, t2])) == {0: None, 1: 0, 2: 1}


def test_prefix_must_be_exact_token_for_token() -> None:
    t0 = turn(0, [1, 2, 3], [10, 11])
    # Same length and same last token as full(t0), differing in the middle.
    t1 = turn(1, [1, 9, 3, 10, 11, 4], [12])
    # Same tokens but only as a subsequence further in, not a prefix.
    t2 = turn(2, [0, 1, 2, 3, 10, 11], [13])
    assert parents(build_graph([t0, t1, t2])) == {0: None, 1: None, 2: None}


def test_identical_full_sequences_resolve_to_the_lowest_index() -> None:
    t0 = turn(0, [1, 2], [3])
    retry_same_answer = [turn(k, [1, 2], [3]) for k in (4, 2)]
    child = follow(t0, 5, [6], [7])
    for arrival in ([child, *retry_same_answer, t0], [t0, *retry_same_answer, child]):
        graph = build_graph(arrival)
        assert graph.nodes[5].parent == 0
        assert graph.discarded == (2, 4)


@pytest.mark.parametrize("seed", range(8))
def test_arrival_order_does_not_matter(seed: int) -> None:
    turns = [*fork_session(), *chain(3, system=(50, 51), first_index=10)]
    assert signature(build_graph(shuffled(turns, seed))) == signature(build_graph(turns))


def test_late_ancestor_adopts_earlier_arrivals() -> None:
    t0, t1, t2, t3 = fork_session()
    before = build_graph([t3, t1, t2])
    assert before.roots == (1, 2)
    after = build_graph([t3, t1, t2, t0])
    assert after.roots == (0,)
    assert parents(after) == {0: None, 1: 0, 2: 0, 3: 1}


def test_links_do_not_depend_on_index_order() -> None:
    # The ancestor carries the highest index: linking is by tokens, not by admission.
    t9 = turn(9, [1, 2], [3])
    t1 = follow(t9, 1, [4], [5])
    t0 = follow(t1, 0, [6], [7])
    graph = build_graph([t0, t1, t9])
    assert parents(graph) == {0: 1, 1: 9, 9: None}
    assert graph.sequences[0].turns == (9, 1, 0)
    assert graph.nodes[0].depth == 2


def test_turns_without_ids_neither_link_nor_parent() -> None:
    t0 = turn(0, [1, 2], [3])
    no_tokens = follow(t0, 1, [4], None)
    assert no_tokens.prompt_ids is not None
    # Would be a child of turn 1 if turn 1 could be a parent.
    after = turn(2, [*no_tokens.prompt_ids.tolist(), 8], [9])
    no_prompt = turn(3, None, [5])
    graph = build_graph([t0, no_tokens, after, no_prompt])
    assert graph.unlinked == (1, 3)
    assert graph.nodes[1] == Node(1, None, (), None, 0, Role.AGENT)
    assert graph.nodes[3].root is None
    assert graph.nodes[2].parent == 0
    assert graph.roots == (0,)
    assert [s.leaf for s in graph.sequences] == [2]


def test_duplicate_index_is_refused() -> None:
    with pytest.raises(AssertionError, match="index 0"):
        build_graph([turn(0, [1], [2]), turn(0, [3], [4])])


def test_an_empty_reply_is_never_a_parent() -> None:
    # The agent got nothing back and asked again; the retry is continued.
    empty = turn(0, [1, 2], [], [])
    retry = turn(1, [1, 2], [3])
    onward = follow(retry, 2, [4], [5])
    graph = build_graph([onward, retry, empty])
    assert parents(graph) == {0: None, 1: None, 2: 1}
    assert graph.discarded == (0,)


def test_identical_empty_replies_do_not_adopt_each_other() -> None:
    graph = build_graph([turn(1, [1, 2], [], []), turn(0, [1, 2], [], [])])
    assert parents(graph) == {0: None, 1: None}
    assert graph.discarded == (0,)


def test_an_empty_reply_still_has_a_parent() -> None:
    t0 = turn(0, [1, 2], [3])
    graph = build_graph([t0, follow(t0, 1, [4], [], [])])
    assert parents(graph) == {0: None, 1: 0}
    assert graph.sequences[0].loss_mask.tolist() == [0, 0, 1, 0]


def test_empty_graph() -> None:
    graph = build_graph([])
    assert (graph.roots, graph.leaves, graph.sequences, dict(graph.nodes)) == ((), (), (), {})


# --- discarded retries -------------------------------------------------------------


def test_abandoned_retry_is_discarded_and_masked() -> None:
    t0 = turn(0, [1, 2, 3], [10])
    abandoned = follow(t0, 1, [4], [20, 21])
    retry = follow(t0, 2, [4], [30])
    onward = follow(retry, 3, [5], [40])
    graph = build_graph([t0, abandoned, retry, onward])
    assert graph.discarded == (1,)
    assert roles(graph) == {0: Role.AGENT, 1: Role.DISCARDED, 2: Role.AGENT, 3: Role.AGENT}
    kept = sequence_to(graph, 3)
    assert kept.role is Role.AGENT and kept.turns == (0, 2, 3)
    dropped = sequence_to(graph, 1)
    assert dropped.role is Role.DISCARDED
    assert dropped.turns == (0, 1)
    assert dropped.input_ids.tolist() == [1, 2, 3, 10, 4, 20, 21]
    assert not dropped.loss_mask.any()
    assert not dropped.logprobs.any()


def test_abandoned_retry_is_discarded_even_when_it_arrives_last() -> None:
    t0 = turn(0, [1, 2, 3], [10])
    kept = follow(t0, 1, [4], [20])
    onward = follow(kept, 2, [5], [21])
    abandoned = follow(t0, 3, [4], [30])
    assert build_graph([t0, kept, onward, abandoned]).discarded == (3,)


def test_retried_final_turn_keeps_the_latest_attempt() -> None:
    t0 = turn(0, [1, 2, 3], [10])
    attempts = [follow(t0, k, [4], [20 + k]) for k in (1, 2, 3)]
    graph = build_graph([t0, *attempts])
    assert graph.discarded == (1, 2)
    assert graph.nodes[3].role is Role.AGENT
    assert sequence_to(graph, 3).loss_mask.any()


def test_retried_first_call_discards_at_root_level() -> None:
    graph = build_graph([turn(0, [1, 2], [3]), turn(1, [1, 2], [4])])
    assert graph.roots == (0, 1)
    assert graph.discarded == (0,)
    assert graph.agent_roots == (1,)


def test_siblings_with_different_prompts_are_not_retries() -> None:
    t0 = turn(0, [1, 2, 3], [10])
    graph = build_graph([t0, follow(t0, 1, [4], [20]), follow(t0, 2, [5], [20])])
    assert graph.discarded == ()


def test_only_leaves_are_discarded() -> None:
    # Both same-prompt siblings were continued (a real fork after a retry): keep both.
    t0 = turn(0, [1, 2, 3], [10])
    a, b = follow(t0, 1, [4], [20]), follow(t0, 2, [4], [30])
    graph = build_graph([t0, a, b, follow(a, 3, [5], [40]), follow(b, 4, [5], [50])])
    assert graph.discarded == ()
    assert len(graph.sequences) == 2


# --- roles -------------------------------------------------------------------------


def test_several_agent_roots_are_all_kept() -> None:
    first = chain(2, system=(1, 2, 3))
    rewritten = chain(2, system=(7, 8, 9), first_index=2)
    graph = build_graph([*first, *rewritten])
    assert graph.roots == (0, 2)
    assert graph.agent_roots == (0, 2)
    assert [(s.turns, s.role) for s in graph.sequences] == [
        ((0, 1), Role.AGENT),
        ((2, 3), Role.AGENT),
    ]
    assert all(s.loss_mask.sum() == 4 for s in graph.sequences)


def test_auxiliary_root_marks_its_whole_tree() -> None:
    aux = turn(0, [60, 61], [62], auxiliary=True)
    aux_child = follow(aux, 1, [63], [64])
    agent = chain(2, first_index=2)
    graph = build_graph([aux, aux_child, *agent])
    assert roles(graph) == {
        0: Role.AUXILIARY,
        1: Role.AUXILIARY,
        2: Role.AGENT,
        3: Role.AGENT,
    }
    assert graph.agent_roots == (2,)
    aux_sequence = sequence_to(graph, 1)
    assert aux_sequence.role is Role.AUXILIARY
    # Its tokens are still marked; the role is what keeps it out of agent training.
    assert aux_sequence.loss_mask.tolist() == [0, 0, 1, 0, 1]


# --- re-tokenisation splits ---------------------------------------------------------


def test_retokenised_first_reply_starts_a_new_root() -> None:
    t0 = turn(0, [1, 2, 3], [10, 11])
    # The engine re-tokenised reply [10, 11] as [12] in the next prompt.
    t1 = turn(1, [1, 2, 3, 12, 4], [20])
    graph = build_graph([t1, t0])
    assert graph.roots == (0, 1)
    assert graph.retokenization_splits == ((1, 0),)
    # Both roots hold exactly what the model saw; both train.
    assert graph.agent_roots == (0, 1)


def test_retokenised_later_reply_forks_below_the_last_exact_ancestor() -> None:
    t0, t1 = chain(2)
    t2 = turn(2, [*t1.prompt_ids.tolist(), 999, 5], [30])
    t3 = follow(t2, 3, [6], [31])
    graph = build_graph([t0, t1, t2, t3])
    assert parents(graph) == {0: None, 1: 0, 2: 0, 3: 2}
    assert graph.retokenization_splits == ((2, 1),)


@pytest.mark.parametrize(
    "session",
    [
        pytest.param(lambda: chain(5), id="chain"),
        pytest.param(fork_session, id="fork"),
        pytest.param(
            lambda: [
                t0 := turn(0, [1, 2, 3], [10]),
                follow(t0, 1, [4], [20]),
                retry := follow(t0, 2, [4], [30]),
                follow(retry, 3, [5], [40]),
            ],
            id="discarded retry",
        ),
    ],
)
def test_no_split_reported_without_one(session) -> None:
    assert build_graph(session()).retokenization_splits == ()


# --- sequences: masks and logprobs ---------------------------------------------------


def test_three_turn_chain_masks_exactly_the_sampled_tokens() -> None:
    t0 = turn(0, [1, 2, 3], [10, 11], [-0.5, -0.25])
    t1 = follow(t0, 1, [4, 5], [12, 13, 14], [-1.0, -2.0, -3.0])
    t2 = follow(t1, 2, [6], [15], [-0.125])
    (sequence,) = build_graph([t0, t1, t2]).sequences
    assert sequence.input_ids.dtype == np.int32
    assert sequence.loss_mask.dtype == np.uint8
    assert sequence.logprobs.dtype == np.float32
    assert sequence.input_ids.tolist() == [1, 2, 3, 10, 11, 4, 5, 12, 13, 14, 6, 15]
    assert sequence.loss_mask.tolist() == [0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0, 1]
    assert sequence.logprobs.tolist() == [
        0, 0, 0, -0.5, -0.25, 0, 0, -1.0, -2.0, -3.0, 0, -0.125
    ]  # fmt: skip


def test_each_parent_token_sits_right_after_its_prompt_in_the_leaf() -> None:
    turns = chain(6, reply_len=3, message_len=4)
    (sequence,) = build_graph(turns).sequences
    for t in turns:
        start = len(t.prompt_ids)
        end = start + len(t.token_ids)
        assert sequence.input_ids[start:end].tolist() == t.token_ids.tolist()
        assert sequence.logprobs[start:end].tolist() == t.logprobs.tolist()
    assert int(sequence.loss_mask.sum()) == 6 * 3


def test_missing_logprob_entries_are_masked() -> None:
    t0 = turn(0, [1, 2], [10, 11, 12], [-0.5, float("nan"), -0.25])
    t1 = follow(t0, 1, [3], [13])
    (sequence,) = build_graph([t0, t1]).sequences
    assert sequence.loss_mask.tolist() == [0, 0, 1, 0, 1, 0, 1]
    assert sequence.logprobs.tolist() == [0, 0, -0.5, 0, -0.25, 0, -0.125]


@pytest.mark.parametrize(
    "logprobs", [None, [-0.5], [-0.5, -0.5, -0.5]], ids=["absent", "short", "long"]
)
def test_absent_or_misaligned_logprobs_mask_the_whole_turn(logprobs) -> None:
    t0 = turn(0, [1, 2], [10, 11], logprobs)
    t1 = follow(t0, 1, [3], [13])
    (sequence,) = build_graph([t0, t1]).sequences
    assert sequence.loss_mask.tolist() == [0, 0, 0, 0, 0, 1]


def test_infinite_logprob_is_not_trained_on() -> None:
    (sequence,) = build_graph([turn(0, [1], [2, 3], [float("-inf"), -1.0])]).sequences
    assert sequence.loss_mask.tolist() == [0, 0, 1]
    assert sequence.logprobs.tolist() == [0, 0, -1.0]


def test_sequences_are_fresh_arrays() -> None:
    t0 = turn(0, [1, 2], [3])
    (sequence,) = build_graph([t0]).sequences
    sequence.input_ids[0] = 99
    assert t0.prompt_ids.tolist() == [1, 2]


# --- against a direct reading of the rule ---------------------------------------------


def reference_parents(turns: list[TurnRecord]) -> dict[int, int | None]:
    """The parent rule on Python lists, O(n^2): longest full prefix of a non-empty reply,
    lowest index among equals."""
    out: dict[int, int | None] = {}
    for t in turns:
        prompt = t.prompt_ids.tolist()
        best: tuple[int, int] | None = None
        for c in turns:
            f = full(c)
            if len(c.token_ids) and len(f) <= len(prompt) and prompt[: len(f)] == f:
                key = (-len(f), c.index)
                best = key if best is None or key < best else best
        out[t.index] = None if best is None else best[1]
    return out


def random_session(rng: random.Random, n: int) -> list[TurnRecord]:
    """A random forest: each call continues a random earlier call, retries one, or starts over."""

    def tokens(k: int) -> list[int]:
        return [rng.randrange(1, 6) for _ in range(k)]  # a tiny vocabulary: many near-misses

    turns: list[TurnRecord] = []
    for index in range(n):
        roll = rng.random()
        if not turns or roll < 0.1:
            turns.append(turn(index, tokens(rng.randint(1, 3)), tokens(rng.randint(0, 3))))
        elif roll < 0.3:
            twin = rng.choice(turns)
            turns.append(turn(index, twin.prompt_ids.tolist(), tokens(rng.randint(0, 3))))
        else:
            base = rng.choice(turns)
            turns.append(follow(base, index, tokens(rng.randint(0, 3)), tokens(rng.randint(0, 3))))
    return turns


@pytest.mark.parametrize("seed", range(40))
def test_matches_the_rule_on_random_forests(seed: int) -> None:
    rng = random.Random(seed)
    turns = random_session(rng, rng.randint(2, 30))
    graph = build_graph(shuffled(turns, seed))
    assert parents(graph) == reference_parents(turns)
    for s in graph.sequences:
        # The path really is a chain of prefixes ending at the leaf.
        assert s.turns[-1] == s.leaf and s.turns[0] == s.root
        assert graph.nodes[s.root].parent is None
        assert all(graph.nodes[b].parent == a for a, b in zip(s.turns, s.turns[1:], strict=False))
        for index in s.turns:
            t = turns[index]
            assert s.input_ids[: len(full(t))].tolist() == full(t)
    for i in graph.discarded:
        assert graph.nodes[i].children == ()


def test_a_few_thousand_tokens_with_forks_and_retries() -> None:
    long_chain = chain(30, system=tuple(range(1, 500)), reply_len=40, message_len=60)
    side = follow(long_chain[10], 30, [7, 7], [8, 8])
    branch = follow(long_chain[-2], 31, [999], [9])
    abandoned = turn(32, long_chain[20].prompt_ids.tolist(), [5])  # a retry of turn 20
    turns = [*long_chain, side, branch, abandoned]
    assert sum(len(t.prompt_ids) for t in turns) > 50_000
    graph = build_graph(shuffled(turns, 3))
    assert parents(graph) == reference_parents(turns)
    assert graph.forks == (10, 19, 28)
    assert graph.discarded == (32,)
    assert sequence_to(graph, 29).turns == tuple(range(30))
    assert int(sequence_to(graph, 29).loss_mask.sum()) == 30 * 40


def test_graph_is_immutable() -> None:
    graph = build_graph(chain(2))
    with pytest.raises(dataclasses.FrozenInstanceError):
        graph.roots = ()  # type: ignore[misc]
    with pytest.raises(TypeError):
        graph.nodes[5] = graph.nodes[0]  # type: ignore[index]
