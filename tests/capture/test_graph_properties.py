"""build_graph against the linking it replaced, on random conversations (hypothesis).

A conversation is drawn step by step, each step one model call built from earlier ones
the way agents make them: a new root (auxiliary or not), the next call of a loop, a
fork (another continuation of a call already continued), a retry with the same prompt
(same or another reply: duplicated full sequences), a call that sampled nothing, a
re-tokenised reply, a rewritten history, a call missing its prompt or its ids. Indices
are then permuted and the calls arrive shuffled. Ids come from a tiny vocabulary, so
near misses are the rule; some roots start with a long shared block with at most one
changed token, so comparisons run over several chunks and differ far in.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from harbor_ray.capture.core import prefixes
from harbor_ray.capture.core.graph import build_graph
from harbor_ray.capture.core.turn import TurnRecord
from tests.capture.graph_reference import build_graph_reference
from tests.capture.test_graph import signature
from tests.capture.turns_factory import full, turn

LONG = np.random.default_rng(7).integers(1, 4, 3000).tolist()


@pytest.fixture(autouse=True, scope="module")
def small_chunks():
    """Comparison chunks far shorter than LONG: a difference can sit in any chunk."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(prefixes, "_FIRST_CHUNK", 8)
        patch.setattr(prefixes, "_GROWTH", 2)
        yield


ids = st.lists(st.integers(1, 4), max_size=3)
replies = st.lists(st.integers(1, 4), max_size=3)  # may be empty: the call sampled nothing


@st.composite
def long_prefix(draw) -> list[int]:
    block = LONG[: draw(st.integers(0, len(LONG)))]
    if block and draw(st.booleans()):
        block = list(block)
        block[draw(st.integers(0, len(block) - 1))] = 5  # a token no other turn has there
    return block


@st.composite
def retokenised(draw, reply: list[int]) -> list[int]:
    """Another rendering of `reply`: one token changed, dropped or added."""
    at = draw(st.integers(0, len(reply)))
    how = draw(st.sampled_from(["change", "drop", "add"] if at < len(reply) else ["add"]))
    if how == "change":
        return [*reply[:at], reply[at] % 4 + 1, *reply[at + 1 :]]
    if how == "drop":
        return [*reply[:at], *reply[at + 1 :]]
    return [*reply[:at], draw(st.integers(1, 4)), *reply[at:]]


@st.composite
def conversations(draw) -> list[TurnRecord]:
    calls: list[tuple[list[int] | None, list[int] | None, bool]] = []
    linked: list[tuple[list[int], list[int]]] = []  # (prompt, reply) of calls with both
    for _ in range(draw(st.integers(1, 12))):
        kinds = ["root", "root", "unlinked"]
        if linked:
            kinds += ["next"] * 4 + ["retry", "duplicate", "retokenised", "rewrite"]
        kind = draw(st.sampled_from(kinds))
        auxiliary = False
        if kind == "root":
            prompt = (draw(long_prefix()) if draw(st.booleans()) else []) + draw(ids)
            reply, auxiliary = draw(replies), draw(st.integers(0, 4)) == 0
        elif kind == "unlinked":
            prompt, reply = draw(ids), draw(replies)
            if draw(st.booleans()):
                prompt = None
            else:
                reply = None
        else:
            base_prompt, base_reply = draw(st.sampled_from(linked))
            base_full = base_prompt + base_reply
            reply = draw(replies)
            if kind == "next":  # forks arise when a call already continued is drawn again
                prompt = base_full + draw(ids)
            elif kind == "retry":
                prompt = base_prompt
            elif kind == "duplicate":
                prompt, reply = base_prompt, base_reply
            elif kind == "retokenised":
                prompt = base_prompt + draw(retokenised(base_reply)) + draw(ids)
            else:  # rewrite: keep a head of the history, drop or replace the rest
                prompt = base_full[: draw(st.integers(0, len(base_full)))] + draw(ids)
        calls.append((prompt, reply, auxiliary))
        if prompt is not None and reply is not None:
            linked.append((prompt, reply))

    indices = draw(st.permutations(range(len(calls))))
    turns = []
    for index, (prompt, reply, auxiliary) in zip(indices, calls, strict=True):
        logprobs = draw(st.sampled_from([..., ..., None, [-0.5]]))
        if reply is not None and logprobs is ... and reply and draw(st.booleans()):
            logprobs = [float("nan"), *(-0.25 for _ in reply[1:])]
        turns.append(turn(index, prompt, reply, logprobs, auxiliary=auxiliary))
    return draw(st.permutations(turns))


@settings(max_examples=300, deadline=None)
@given(conversations())
def test_matches_the_previous_linking(turns: list[TurnRecord]) -> None:
    assert signature(build_graph(turns)) == signature(build_graph_reference(turns))


@settings(max_examples=100, deadline=None)
@given(conversations(), st.randoms(use_true_random=False))
def test_arrival_order_never_matters(turns: list[TurnRecord], rng) -> None:
    again = list(turns)
    rng.shuffle(again)
    assert signature(build_graph(again)) == signature(build_graph(turns))


def test_the_strategy_makes_the_shapes_it_claims() -> None:
    """The conversations drawn cover forks, discards, splits, unlinked and auxiliary turns."""
    seen: set[str] = set()

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(conversations())
    def collect(turns: list[TurnRecord]) -> None:
        graph = build_graph(turns)
        seen.update(
            name
            for name, present in [
                ("fork", graph.forks),
                ("discarded", graph.discarded),
                ("split", graph.retokenization_splits),
                ("unlinked", graph.unlinked),
                ("auxiliary", graph.agent_roots != graph.roots),
                ("several roots", len(graph.roots) > 1),
                ("deep", any(n.depth >= 3 for n in graph.nodes.values())),
                ("duplicate full", _has_duplicate_full(turns)),
            ]
            if present
        )

    collect()
    assert seen == {
        "fork",
        "discarded",
        "split",
        "unlinked",
        "auxiliary",
        "several roots",
        "deep",
        "duplicate full",
    }


def _has_duplicate_full(turns: list[TurnRecord]) -> bool:
    fulls = [tuple(full(t)) for t in turns if t.prompt_ids is not None and t.token_ids is not None]
    return len(fulls) != len(set(fulls))
