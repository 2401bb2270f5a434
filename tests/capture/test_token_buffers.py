"""A session's turns held once: views of shared buffers, values exactly as they arrived."""

from __future__ import annotations

import dataclasses

import numpy as np

from harbor_ray.capture.core.token_buffers import HeldTurns, held_bytes
from harbor_ray.capture.core.turn import TurnRecord
from tests.capture.turns_factory import follow, full, turn


def loop(n: int, start: list[int]) -> list[TurnRecord]:
    turns = [turn(0, start, [7, 8])]
    for index in range(1, n):
        turns.append(follow(turns[-1], index, [10 + index] * 5, [20 + index, 21]))
    return turns


def hold(turns: list[TurnRecord], store: HeldTurns | None = None) -> HeldTurns:
    store = store or HeldTurns()
    for t in turns:
        store.add(t)
    return store


def owner(ids: np.ndarray | None) -> object:
    assert ids is not None
    return ids.base


def test_a_loop_lives_in_one_buffer_and_keeps_its_values() -> None:
    turns = loop(12, [1, 2, 3])
    store = hold(turns)
    kept = list(store.turns.values())
    assert [(t.prompt_ids.tolist(), t.token_ids.tolist()) for t in kept] == [
        (t.prompt_ids.tolist(), t.token_ids.tolist()) for t in turns
    ]
    # Growing moved the buffer; every view was re-pointed to the one it grew into.
    owners = {id(owner(ids)) for t in kept for ids in (t.prompt_ids, t.token_ids)}
    assert len(owners) == 1
    assert not kept[0].prompt_ids.flags.writeable
    unique = len(full(turns[-1]))
    assert held_bytes(kept) < held_bytes(turns)
    assert held_bytes(kept) - sum(t.logprobs.nbytes for t in kept) <= 2 * 4 * unique


def test_a_retry_views_its_prompt_and_a_continued_retry_forks_a_buffer() -> None:
    first, second = loop(2, [1, 2, 3])
    retry = dataclasses.replace(second, index=2, token_ids=np.array([30, 31], np.int32))
    onward = follow(retry, 3, [40], [41])
    store = hold([first, second, retry, onward])
    held = store.turns
    assert owner(held[2].prompt_ids) is owner(held[1].prompt_ids)
    assert held[2].token_ids.base is None  # its reply is not what the buffer holds there
    assert owner(held[3].prompt_ids) is not owner(held[1].prompt_ids)
    assert held[3].prompt_ids.tolist() == onward.prompt_ids.tolist()


def test_the_turn_continued_is_tried_beyond_the_latest_lines() -> None:
    main = loop(2, [1, 2, 3])
    side = [turn(2 + k, [90 + k, 1], [5]) for k in range(4)]  # unrelated roots in between
    onward = follow(main[-1], 6, [50], [51])
    store = hold([*main, *side])
    store.add(onward, continues=None)
    assert owner(store.turns[6].prompt_ids) is not owner(store.turns[1].prompt_ids)
    hinted = hold([*main, *side])
    hinted.add(onward, continues=1)
    assert owner(hinted.turns[6].prompt_ids) is owner(hinted.turns[1].prompt_ids)


def test_removed_turns_and_ids_it_does_not_take() -> None:
    store = hold(loop(3, [1, 2]))
    store.remove(2)
    assert sorted(store.turns) == [0, 1]
    wide = dataclasses.replace(turn(5, [1, 2], [3]), prompt_ids=np.array([1, 2], np.int64))
    assert store.add(wide) is wide
    missing = turn(6, None, [3])
    assert store.add(missing) is missing


def test_linking_and_validation_read_held_memory_once(monkeypatch) -> None:
    """On held turns the build compares nothing (every stretch is shared memory) and
    validation reads each prompt id once; on copies both read every prompt."""
    from harbor_ray.capture.core import findings, prefixes
    from harbor_ray.capture.core.graph import build_graph

    turns = loop(12, [1, 2, 3])
    kept = list(hold(turns).turns.values())
    compared: list[int] = []
    checked: list[int] = []
    real_compare, real_check = prefixes.common_prefix, findings._bad_ids
    monkeypatch.setattr(
        prefixes, "common_prefix", lambda a, b: compared.append(len(a)) or real_compare(a, b)
    )
    monkeypatch.setattr(
        findings, "_bad_ids", lambda ids, vocab: checked.append(len(ids)) or real_check(ids, vocab)
    )

    def reads(of: list[TurnRecord]) -> tuple[int, int]:
        compared.clear()
        checked.clear()
        findings.validate(of, build_graph(of))
        return sum(compared), sum(checked)

    replies = sum(len(t.token_ids) for t in turns)
    assert reads(kept) == (0, len(turns[-1].prompt_ids) + replies)
    on_copies = reads(turns)
    assert on_copies[0] > 0 and on_copies[1] == sum(len(t.prompt_ids) for t in turns) + replies
