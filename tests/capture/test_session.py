import asyncio

import numpy as np
import pytest

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.errors import SessionGone


def turn(index: int) -> TurnRecord:
    return TurnRecord(
        index=index,
        dialect="chat",
        prompt_ids=np.array([1, 2], dtype=np.int32),
        token_ids=np.array([3], dtype=np.int32),
        logprobs=np.array([-0.1], dtype=np.float32),
        finish_reason="stop",
    )


async def test_keys_open_only_their_own_session() -> None:
    store = InMemorySessionStore()
    a, b = await store.open_session(), await store.open_session()
    assert (await store.authenticate(a.key)).session_id == a.session_id
    assert (await store.authenticate(b.key)).session_id == b.session_id
    assert await store.authenticate(a.key + "x") is None
    assert await store.authenticate(a.key.replace(a.session_id, b.session_id)) is None


async def test_the_grant_carries_the_sessions_sampling() -> None:
    store = InMemorySessionStore()
    s = await store.open_session(sampling=Sampling(temperature=0.7))
    assert (await store.authenticate(s.key)).sampling == Sampling(temperature=0.7)


async def test_budget_counts_in_flight_calls_atomically() -> None:
    store = InMemorySessionStore()
    s = await store.open_session(budget=3)
    admissions = await asyncio.gather(*(store.admit(s.session_id) for _ in range(10)))
    admitted = [a.call_index for a in admissions if a.admitted]
    assert admitted == [0, 1, 2]
    doc = await store.export(s.session_id)
    assert doc["counts"]["budget_stops"] == 7


async def test_released_calls_give_budget_back_and_count_why() -> None:
    store = InMemorySessionStore()
    s = await store.open_session(budget=1)
    first = await store.admit(s.session_id)
    await store.release(s.session_id, first.call_index, "engine_error")
    second = await store.admit(s.session_id)
    assert first.admitted and second.admitted and second.call_index == 1
    await store.record(s.session_id, turn(second.call_index))
    assert not (await store.admit(s.session_id)).admitted
    doc = await store.export(s.session_id)
    assert doc["counts"]["engine_errors"] == 1 and len(doc["turns"]) == 1


async def test_a_release_delivered_twice_gives_back_one_call() -> None:
    """Release names its call: the old count-based release, delivered twice (a retried
    actor call), gave back a call still in flight, and the budget was overrun."""
    store = InMemorySessionStore()
    s = await store.open_session(budget=2)
    first, _ = await store.admit(s.session_id), await store.admit(s.session_id)
    await store.release(s.session_id, first.call_index)
    await store.release(s.session_id, first.call_index)
    assert (await store.admit(s.session_id)).admitted
    assert not (await store.admit(s.session_id)).admitted


async def test_calls_of_a_dead_holder_are_given_back() -> None:
    store = InMemorySessionStore()
    s = await store.open_session(budget=3)
    state = store.state(s.session_id)
    await store.admit(s.session_id, holder="serve/replica-a")
    await store.admit(s.session_id, holder="serve/replica-a")
    local = await store.admit(s.session_id)  # this process's own: never dropped
    assert state.full() and state.holders() == {"serve/replica-a"}
    assert state.drop_holder("serve/replica-a") == 2
    assert not state.full() and state.holders() == set()
    await store.record(s.session_id, turn(local.call_index))
    assert [(await store.admit(s.session_id)).admitted for _ in range(3)] == [True, True, False]


async def test_delete() -> None:
    store = InMemorySessionStore()
    s = await store.open_session()
    assert await store.delete(s.session_id)
    assert not await store.delete(s.session_id)
    assert await store.export(s.session_id) is None
    assert await store.authenticate(s.key) is None
    with pytest.raises(SessionGone):
        await store.admit(s.session_id)


async def test_close_gives_the_closed_record_then_forgets_the_session() -> None:
    store = InMemorySessionStore()
    s = await store.open_session()
    await store.admit(s.session_id)
    await store.record(s.session_id, turn(0))
    closed = await store.close_session(s.session_id)
    assert closed is not None and [t.index for t in closed.turns] == [0]
    assert closed.counts.turns == 1 and closed.graph.roots == (0,)
    assert await store.authenticate(s.key) is None
    assert await store.close_session(s.session_id) is None


async def test_admission_finds_the_turn_a_call_continues_and_forgets_a_withdrawn_one() -> None:
    import dataclasses

    from harbor_ray.capture.core.continuation import PrefixKey

    store = InMemorySessionStore()
    s = await store.open_session()
    key = b"k" * 16
    for index in (0, 1):  # the same conversation twice (a retry): the lowest index wins
        await store.admit(s.session_id)
        await store.record(s.session_id, dataclasses.replace(turn(index), conversation_key=key))
    offered = (PrefixKey(5, b"other" * 3 + b"x"), PrefixKey(3, key))
    base = (await store.admit(s.session_id, offered)).base
    assert base is not None and (base.turn, base.messages) == (0, 3)
    assert base.prompt_ids.tolist() == [1, 2] and base.token_ids.tolist() == [3]
    await store.release(s.session_id, 0)  # withdrawn: its reply never reached the agent
    assert (await store.admit(s.session_id, offered)).base.turn == 1
    await store.release(s.session_id, 1)
    assert (await store.admit(s.session_id, offered)).base is None


async def test_recorded_turns_hold_their_ids_once_and_stay_findable() -> None:
    """An agent loop's prompts are held as views of one buffer (capture.core.token_buffers); the
    turn a later call continues is found with its current ids after the buffer grew, and
    the session closes to the graph of the ids as they arrived."""
    import dataclasses

    from harbor_ray.capture.core.continuation import Continuation, PrefixKey
    from harbor_ray.capture.core.token_buffers import held_bytes

    store = InMemorySessionStore()
    s = await store.open_session()
    arrived, prompt = [], np.arange(1, 50, dtype=np.int32)
    for index in range(8):
        record = dataclasses.replace(
            turn(index),
            prompt_ids=prompt,
            token_ids=np.array([60 + index], np.int32),
            conversation_key=bytes([index]) * 16,
            continuation=Continuation(index - 1, True) if index else None,
        )
        arrived.append(record)
        await store.admit(s.session_id)
        await store.record(s.session_id, record)
        prompt = np.concatenate((prompt, record.token_ids, np.arange(100, 150, dtype=np.int32)))
    state = store.state(s.session_id)
    assert state is not None
    assert held_bytes(state.turns) < held_bytes(arrived) / 2
    base = (await store.admit(s.session_id, (PrefixKey(2, bytes([2]) * 16),))).base
    assert base is not None and base.turn == 2
    assert base.prompt_ids.base is state.turns[-1].prompt_ids.base  # re-pointed on growth
    assert base.prompt_ids.tolist() == arrived[2].prompt_ids.tolist()
    closed = await store.close_session(s.session_id)
    assert closed is not None
    assert [n.parent for n in closed.graph.nodes.values()] == [None, *range(7)]
    assert [t.prompt_ids.tolist() for t in closed.turns] == [t.prompt_ids.tolist() for t in arrived]


async def test_a_listener_hears_each_turn_once_as_it_is_recorded() -> None:
    heard: list[tuple[str, int]] = []
    store = InMemorySessionStore(on_turn=lambda session, t: heard.append((session, t.index)))
    s = await store.open_session()
    for _ in range(2):
        await store.admit(s.session_id)
    await store.record(s.session_id, turn(1))
    assert heard == [(s.session_id, 1)]
    await store.record(s.session_id, turn(1))  # delivered twice: still one turn
    await store.record(s.session_id, turn(0))
    assert heard == [(s.session_id, 1), (s.session_id, 0)]
