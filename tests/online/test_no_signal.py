"""Groups that carry signal (DAPO's dynamic sampling), pure: the keep/drop decision, the
replacement's task, the request's bound, and the book's part (drop, replace, flag at the
bound, cancel through a replacement, the counts `/v1/stats` reports)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import RolloutResult
from harbor_ray.errors import FieldError
from harbor_ray.online.groups import Book, GroupState, Phase
from harbor_ray.online.no_signal import Refill, Verdict, carries_signal, judge
from harbor_ray.online.wire import SubmitRequest
from harbor_ray.trials.spec import RolloutSpec
from tests.online.local import LocalRollouts, local_controller


@pytest.mark.parametrize(
    ("rewards", "signal"),
    [
        ([1.0, 0.0], True),
        ([0.5, 0.5, 0.5000001], True),
        ([0.0, 0.0], False),
        ([1.0, 1.0, 1.0], False),
        ([1.0, None], None),
        ([None, None], None),
        ([1.0], None),
        ([], None),
    ],
)
def test_a_group_carries_signal_when_any_two_rewards_differ(rewards, signal) -> None:
    assert carries_signal(rewards) is signal


def test_the_verdict_drops_within_the_bound_then_flags() -> None:
    refill = Refill(tasks=("a", "b"), max_extra=1)
    assert judge([1.0, 1.0], None) is Verdict.KEEP  # not asked
    assert judge([1.0, 0.0], refill) is Verdict.KEEP
    assert judge([1.0, None], refill) is Verdict.KEEP  # unscored: not judged
    assert judge([0.0, 0.0], refill) is Verdict.DROP
    assert refill.next_task() == "a" and refill.next_task() is None  # the bound: 1
    assert judge([0.0, 0.0], refill) is Verdict.FLAG


def test_replacements_prefer_tasks_that_have_not_lacked_signal() -> None:
    refill = Refill(tasks=("a", "b", "c"), max_extra=6)
    refill.no_signal.add("a")
    assert [refill.next_task() for _ in range(3)] == ["b", "c", "b"]  # b, c in turn
    refill.no_signal.update({"b", "c"})  # every task lacked it once: any of them again
    assert [refill.next_task() for _ in range(3)] == ["a", "b", "c"]
    assert refill.next_task() is None and refill.used == 6


def _group(group_id: str, task: str, n: int, refill: Refill | None) -> GroupState:
    return GroupState(
        group_id=group_id,
        request_id="r",
        task=task,
        rollout_ids=tuple(f"{group_id}__{k}" for k in range(n)),
        max_staleness=None,
        metadata={},
        agent="terminus-2",
        refill=refill,
    )


def _row(rollout_id: str, reward: float | None) -> RolloutRecord:
    return encode_record(
        RolloutResult(
            rollout_id=rollout_id, task="t", agent="a", sandbox="local", ok=True, reward=reward
        ),
        None,
    )


def _finish(book: Book, group: str, rewards: list[float | None]) -> GroupState | None:
    last = None
    for k, reward in enumerate(rewards):
        last = book.finish(_row(f"{group}__{k}", reward), 0)
    return last


def _replace(book: Book, dropped: GroupState, group_id: str) -> GroupState:
    assert dropped.refill is not None
    task = dropped.refill.next_task()
    assert task is not None
    return book.replace(
        dropped, group_id, task, tuple(f"{group_id}__{k}" for k in range(dropped.n))
    )


def test_the_book_drops_a_group_without_signal_and_takes_its_replacement() -> None:
    book = Book(capacity=4)
    refill = Refill(tasks=("flat", "varied"), max_extra=2)
    book.accept("r", [_group("g1", "flat", 2, refill), _group("g2", "varied", 2, refill)], 0)
    assert _finish(book, "g2", [1.0, 0.0]).phase is Phase.READY
    flat = _finish(book, "g1", [1.0, 1.0])
    assert flat.phase is Phase.NO_SIGNAL and flat.closed and book.take(9)[0].group_id == "g2"
    assert book.unfinished == 0
    # Its replacement runs the task that has shown no lack of signal, in g1's place,
    # past the capacity it stands in for.
    again = _replace(book, flat, "g3")
    assert (again.task, again.replaces, again.dropped_before) == ("varied", "g1", 1)
    assert book.unfinished == 2 and book.extra_rollouts == 2
    # A cancel of the submit's group reaches its replacement.
    assert book.cancel("g1") is again and again.phase is Phase.CANCELLED


def test_past_the_bound_a_group_without_signal_is_delivered_flagged() -> None:
    book = Book(capacity=8)
    refill = Refill(tasks=("flat",), max_extra=1)
    book.accept("r", [_group("g1", "flat", 2, refill)], 0)
    again = _replace(book, _finish(book, "g1", [0.0, 0.0]), "g2")
    last = _finish(book, "g2", [0.0, 0.0])
    assert last is again and last.phase is Phase.READY and last.no_signal
    payload = last.payload()
    assert (payload.replaces, payload.no_signal, payload.no_signal_dropped) == ("g1", True, 1)
    assert (
        book.no_signal_dropped,
        book.no_signal_delivered,
        book.signal_kept,
        book.extra_rollouts,
    ) == (1, 1, 0, 2)


def test_groups_of_a_request_that_did_not_ask_are_never_judged() -> None:
    book = Book(capacity=8)
    book.accept("r", [_group("g1", "flat", 2, None)], 0)
    group = _finish(book, "g1", [1.0, 1.0])
    assert group.phase is Phase.READY and not group.no_signal
    assert (book.no_signal_dropped, book.no_signal_delivered, book.signal_kept) == (0, 0, 0)


class Passing(LocalRollouts):
    """Every rollout passes: reward 1.0, so no group has signal."""

    async def run(self, spec: RolloutSpec) -> RolloutRecord:
        self.started += 1
        return encode_record(
            RolloutResult(
                rollout_id=spec.rollout_id,
                task=spec.task.name,
                agent=spec.agent,
                sandbox=spec.sandbox,
                ok=True,
                reward=1.0,
            ),
            None,
        )


def _submit(request_id: str, n: int, **fields: object) -> SubmitRequest:
    return SubmitRequest.model_validate(
        {
            "request_id": request_id,
            "tasks": [{"task": "hello-file", "n": n}],
            "agent": "terminus-2",
            **fields,
        }
    )


def test_the_controllers_default_replaces_then_delivers_flagged(tmp_path: Path) -> None:
    """`drop_no_signal:` on, no bound set: a request of one group gets one replacement
    (as many as its groups), and the replacement, without signal too, comes back
    flagged in the submit's group's place."""
    runner = Passing()
    controller = local_controller(tmp_path, runner=runner, drop_no_signal=True)

    async def run() -> None:
        [ref] = (await controller.submit(_submit("r", 2))).groups
        [group] = await controller.groups(8, wait_s=30)
        assert (group.replaces, group.no_signal, group.no_signal_dropped) == (ref.group_id, True, 1)
        stats = await controller.stats()
        assert (
            stats.no_signal_dropped,
            stats.no_signal_delivered,
            stats.extra_rollouts,
            stats.signal_kept,
        ) == (1, 1, 2, 0)
        assert runner.started == 4
        # A group of one is not judged by the default, and refused when asked for.
        await controller.submit(_submit("one", 1))
        with pytest.raises(FieldError, match="a group of 1") as refused:
            await controller.submit(_submit("asked", 1, drop_no_signal=True))
        assert refused.value.field == "tasks[0].n"
        # Replacements may run tasks the request did not name, of the dataset only.
        await controller.submit(
            _submit(
                "wide",
                2,
                drop_no_signal=True,
                max_extra_groups=1,
                replacement_tasks=["count-words"],
            )
        )
        await controller.ack([group.group_id])
        wide = None
        while wide is None:  # each long poll waits for a group; the others acknowledged
            for taken in await controller.groups(8, wait_s=30):
                if taken.request_id == "wide":
                    wide = taken
                await controller.ack([taken.group_id])
        assert (wide.task, wide.no_signal) == ("count-words", True)
        with pytest.raises(FieldError) as unknown:
            await controller.submit(
                _submit("bad", 2, drop_no_signal=True, replacement_tasks=["count-words", "nope"])
            )
        assert (unknown.value.field, unknown.value.status) == ("replacement_tasks[1]", 404)
        controller.shutdown()

    asyncio.run(run())
