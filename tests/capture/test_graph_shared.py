"""build_graph on turns whose ids share memory, against the reference on copies (hypothesis).

A session holds its turns' ids as views of shared buffers (`held`), and linking and
validation skip comparisons over memory two arrays share (`memory`). Whatever memory the
arrays live in, the graph and the findings must be those of plain copies of the same
values: turns drawn as in test_graph_properties and held the way the session holds them
(any arrival order, any hint of the turn continued), and turns cut from one pool of ids
at random offsets, strides and dtypes (views at other offsets, adjacent or overlapping,
equal values at other addresses, the same address read as another dtype).
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from harbor_ray.capture.core.findings import validate
from harbor_ray.capture.core.graph import build_graph
from harbor_ray.capture.core.token_buffers import HeldTurns
from harbor_ray.capture.core.turn import TurnRecord
from tests.capture.graph_reference import build_graph_reference
from tests.capture.test_graph import signature
from tests.capture.test_graph_properties import conversations, small_chunks  # noqa: F401
from tests.capture.turns_factory import default_logprobs, turn

POOL = (np.random.default_rng(3).integers(0, 4, 400) - 1).astype(np.int32)  # near misses, -1
SOURCES = [POOL, POOL.copy(), POOL.view(np.uint32)]


def copies(turns: list[TurnRecord]) -> list[TurnRecord]:
    """The same turns, each array its own fresh copy."""
    return [
        dataclasses.replace(
            t,
            prompt_ids=None if t.prompt_ids is None else t.prompt_ids.copy(),
            token_ids=None if t.token_ids is None else t.token_ids.copy(),
        )
        for t in turns
    ]


def assert_same_as_copies(turns: list[TurnRecord]) -> None:
    plain = copies(turns)
    graph, expected = build_graph(turns), build_graph_reference(plain)
    assert signature(graph) == signature(expected)
    assert validate(turns, graph, vocab_size=3) == validate(plain, expected, vocab_size=3)


def held(turns: list[TurnRecord], hints: list[int | None]) -> list[TurnRecord]:
    store = HeldTurns()
    for t, hint in zip(turns, hints, strict=True):
        store.add(t, hint)
    return list(store.turns.values())


@settings(max_examples=300, deadline=None)
@given(conversations(), st.data())
def test_held_turns_link_as_their_copies_do(turns: list[TurnRecord], data) -> None:
    hints = [data.draw(st.none() | st.sampled_from([t.index for t in turns])) for _ in turns]
    shared = held(turns, hints)
    for arrived, kept in zip(turns, shared, strict=True):
        for name in ("prompt_ids", "token_ids"):
            a, b = getattr(arrived, name), getattr(kept, name)
            assert (a is None) == (b is None)
            assert a is None or (a.dtype == b.dtype and a.tolist() == b.tolist())
    assert_same_as_copies(shared)


@st.composite
def pooled(draw) -> list[TurnRecord]:
    turns = []
    for index in range(draw(st.integers(1, 10))):
        source = draw(st.sampled_from(SOURCES))
        start = draw(st.sampled_from([0, 0, draw(st.integers(0, 40))]))
        step = draw(st.sampled_from([1, 1, 1, 2]))
        prompt = source[start : start + draw(st.integers(0, 80)) * step : step]
        after = start + len(prompt) * step  # the reply right after the prompt
        # Or where prompts start: a reply over a prompt's memory at another depth.
        begin = draw(st.sampled_from([after, after, 0, draw(st.integers(0, 300))]))
        tokens = source[begin : begin + draw(st.integers(0, 6))]
        base = turn(index, [], [], default_logprobs(len(tokens)))
        turns.append(dataclasses.replace(base, prompt_ids=prompt, token_ids=tokens))
    return draw(st.permutations(turns))


@settings(max_examples=300, deadline=None)
@given(pooled())
def test_views_at_any_offset_link_as_their_copies_do(turns: list[TurnRecord]) -> None:
    assert_same_as_copies(turns)


def test_the_held_turns_share_memory() -> None:
    """The drawn conversations, held, do put prompts on one another's memory, and forks
    and unrelated roots on buffers of their own."""
    seen: set[str] = set()

    @settings(max_examples=200, deadline=None, database=None, derandomize=True)
    @given(conversations())
    def collect(turns: list[TurnRecord]) -> None:
        shared = held(turns, [None] * len(turns))
        owners = {
            id(t.prompt_ids.base)
            for t in shared
            if t.prompt_ids is not None and t.prompt_ids.base is not None
        }
        viewing = sum(
            1 for t in shared if t.prompt_ids is not None and t.prompt_ids.base is not None
        )
        if viewing > len(owners):
            seen.add("shared")
        if len(owners) > 1:
            seen.add("several buffers")
        if any(t.token_ids is not None and t.token_ids.base is None for t in shared):
            seen.add("own reply")

    collect()
    assert seen == {"shared", "several buffers", "own reply"}
