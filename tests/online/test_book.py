"""The controller's pure bookkeeping: capacity, groups finishing, delivery until
acknowledged, the staleness policy."""

from __future__ import annotations

import dataclasses

import pytest

from harbor_ray.capture.core.record import close_capture
from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ErrorType, RolloutResult
from harbor_ray.online.groups import Book, GroupState, Phase
from tests.capture.turns_factory import turn


def _group(group_id: str, n: int, max_staleness: int | None = None) -> GroupState:
    return GroupState(
        group_id=group_id,
        request_id=f"r-{group_id}",
        task="t",
        rollout_ids=tuple(f"{group_id}__{k}" for k in range(n)),
        max_staleness=max_staleness,
        metadata={},
        agent="terminus-2",
    )


def _row(rollout_id: str, error: ErrorType | None = None) -> RolloutRecord:
    return encode_record(
        RolloutResult(
            rollout_id=rollout_id,
            task="t",
            agent="a",
            sandbox="local",
            ok=error is None,
            reward=None,
            error_type=error,
            error=None if error is None else "x",
        ),
        None,
    )


def test_capacity_counts_unfinished_rollouts_only() -> None:
    book = Book(capacity=4)
    assert book.over_capacity(4) is None
    book.accept("r1", [_group("a", 3)], 0)
    assert book.over_capacity(2) is not None
    book.finish(_row("a__0"), 0)
    assert book.over_capacity(2) is None


def test_a_group_is_ready_when_every_rollout_has_a_row_and_stays_until_acked() -> None:
    book = Book(capacity=8)
    book.accept("r1", [_group("a", 2), _group("b", 1)], 0)
    assert book.finish(_row("b__0"), 0) is not None  # b is done first
    assert book.finish(_row("a__0", ErrorType.INFRA_LOST), 0) is None
    assert book.finish(_row("a__0"), 0) is None  # a row delivered twice is kept once
    assert book.finish(_row("a__1"), 0) is not None
    assert [g.group_id for g in book.take(10)] == ["b", "a"]  # oldest first
    assert [g.group_id for g in book.take(10)] == ["b", "a"]  # again: not acknowledged
    assert book.ack(["b", "nope"]) == (["b"], ["nope"])
    assert book.ack(["b"]) == ([], ["b"])  # a retried ack is harmless
    assert [g.group_id for g in book.take(10)] == ["a"]
    assert book.errors == {"infra_lost": 1} and book.delivered == 1


def test_cancel_takes_a_group_out_of_delivery() -> None:
    book = Book(capacity=8)
    book.accept("r1", [_group("a", 1)], 0)
    assert book.cancel("a").phase is Phase.CANCELLED
    book.finish(_row("a__0", ErrorType.CANCELLED), 0)
    assert book.take(10) == [] and book.cancelled == 1 and book.cancel("zz") is None


def _versioned_row(rollout_id: str, start: int, end: int) -> RolloutRecord:
    first = turn(0, [1, 2], [3])
    stamped = dataclasses.replace(first, policy_version_start=start, policy_version_end=end)
    return encode_record(
        RolloutResult(
            rollout_id=rollout_id, task="t", agent="a", sandbox="local", ok=True, reward=1.0
        ),
        close_capture([stamped]),
    )


@pytest.mark.parametrize(("policy", "phase"), [("drop", Phase.DROPPED), ("deliver", Phase.READY)])
def test_a_group_too_far_behind_follows_the_stale_policy(policy, phase) -> None:
    book = Book(capacity=8, max_staleness=2, stale_policy=policy)
    book.accept("r1", [_group("old", 2), _group("fresh", 1), _group("own", 1, 5)], 0)
    book.finish(_versioned_row("old__0", 1, 1), 4)
    old = book.finish(_versioned_row("old__1", 3, 4), 4)  # oldest turn: 1, now 4
    assert old.phase is phase and old.staleness() == 3 and old.versions() == (1, 4)
    fresh = book.finish(_versioned_row("fresh__0", 2, 2), 4)  # 2 behind: within the bound
    assert fresh.phase is Phase.READY
    own = book.finish(_versioned_row("own__0", 0, 0), 4)  # its own bound, 5, overrides
    assert own.phase is Phase.READY
    assert book.dropped == (policy == "drop") and book.staleness_seen == {"3": 1, "2": 1, "4": 1}
    delivered = [g.group_id for g in book.take(10)]
    assert ("old" in delivered) is (policy == "deliver")
    payload = old.payload()
    assert (payload.policy_version_min, payload.policy_version_max) == (1, 4)
    assert [t["prompt_ids"] for t in payload.turns] == [[1, 2], [1, 2]]


def test_an_awaited_group_never_reaches_the_long_poll() -> None:
    book = Book(capacity=8)
    book.accept(
        "r1", [dataclasses.replace(_group("mine", 1), awaited=True), _group("theirs", 1)], 0
    )
    assert book.finish(_row("mine__0"), 0).phase is Phase.READY  # its waiter is told
    book.finish(_row("theirs__0"), 0)
    assert [g.group_id for g in book.take(10)] == ["theirs"]
    assert book.ack(["mine"]) == (["mine"], [])  # its waiter acknowledges it
    assert book.delivered == 1 and book.ready == ["theirs"]
    book.accept("r2", [dataclasses.replace(_group("gone", 1), awaited=True)], 0)
    book.finish(_row("gone__0"), 0)
    assert book.cancel("gone").phase is Phase.CANCELLED and book.ready == ["theirs"]


def test_the_mask_policy_delivers_a_stale_group_without_its_stale_tokens() -> None:
    # One call an update crossed: tokens 0-1 sampled at version 1, tokens 2-3 at 4.
    crossed = dataclasses.replace(
        turn(0, [1, 2], [3, 4, 5, 6]),
        policy_version_start=1,
        policy_version_end=4,
        policy_segments=((1, 0), (4, 2)),
    )
    row = encode_record(
        RolloutResult(rollout_id="g__0", task="t", agent="a", sandbox="local", ok=True, reward=1.0),
        close_capture([crossed]),
    )
    book = Book(capacity=8, max_staleness=2, stale_policy="mask")
    book.accept("r1", [_group("g", 1)], 0)
    group = book.finish(row, 4)
    assert group.phase is Phase.READY and group.staleness() == 3
    payload = group.payload()
    [sequence] = payload.sequences
    assert sequence["policy_versions"] == [None, None, 1, 1, 4, 4]
    assert sequence["loss_mask"] == [0, 0, 0, 0, 1, 1] and payload.masked_tokens == 2
    assert payload.turns[0]["policy_segments"] == [
        {"version": 1, "offset": 0},
        {"version": 4, "offset": 2},
    ]

    # Under `deliver` the same group keeps every token, and says which version made each.
    book = Book(capacity=8, max_staleness=2, stale_policy="deliver")
    book.accept("r1", [_group("g", 1)], 0)
    [sequence] = book.finish(row, 4).payload().sequences
    assert sequence["loss_mask"] == [0, 0, 1, 1, 1, 1]
    assert sequence["policy_versions"] == [None, None, 1, 1, 4, 4]
