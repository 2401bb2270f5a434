"""The controller's pure bookkeeping: capacity, groups finishing, delivery until
acknowledged, the staleness policy."""

from __future__ import annotations

from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.online.groups import Book, GroupState, Phase
from harbor_ray.trials.result import ErrorType, RolloutResult


def _group(group_id: str, n: int, max_staleness: int | None = None) -> GroupState:
    return GroupState(group_id=group_id, request_id=f"r-{group_id}", task="t",
                      rollout_ids=tuple(f"{group_id}__{k}" for k in range(n)),
                      max_staleness=max_staleness, metadata={})


def _row(rollout_id: str, error: ErrorType | None = None) -> RolloutRecord:
    return encode_record(RolloutResult(
        rollout_id=rollout_id, task="t", agent="a", sandbox="local", ok=error is None,
        reward=None, error_type=error, error=None if error is None else "x"), None)


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
