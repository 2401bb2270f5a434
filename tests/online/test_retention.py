"""Bounded retention (issue 27, item 4): closed groups (acknowledged, dropped, cancelled)
leave the book after the configured window or past the configured count; the
`request_id` index is bounded and never forgets a request that still has an open group;
the controller keeps nothing per rollout once it ended."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harbor_ray.online.groups import Book
from harbor_ray.online.wire import SubmitRequest
from tests.online.local import LocalRollouts, local_controller
from tests.online.test_book import _group, _row

SUBMIT = {"request_id": "r", "tasks": [{"task": "hello-file", "n": 2}], "agent": "terminus-2"}


def test_closed_groups_are_forgotten_after_the_window() -> None:
    book = Book(capacity=8, retain_s=60, retain_groups=100)
    book.accept("r-a", [_group("a", 1)], 0)
    book.accept("r-bc", [_group("b", 1), _group("c", 1)], 0)
    for g in "abc":
        book.finish(_row(f"{g}__0"), 0)
    book.ack(["a"])
    book.cancel("b")  # finished already: closed at once
    book.forget(now=1000.0)  # stamps what closed since the last call
    assert set(book.groups) == {"a", "b", "c"}
    book.forget(now=1059.0)
    assert set(book.groups) == {"a", "b", "c"}
    book.forget(now=1060.0)
    assert set(book.groups) == {"c"}  # ready, not acknowledged: kept however old
    assert set(book.by_rollout) == {"c__0"}
    assert book.ack(["a"]) == ([], ["a"])  # a late retried ack is still harmless
    assert book.known("r-bc") is not None  # its group c is open
    book.forget(now=2000.0)
    assert book.known("r-a") is not None  # within request_ids


def test_a_cancelled_group_closes_when_its_last_rollout_ended() -> None:
    book = Book(capacity=8, retain_s=0, retain_groups=100)
    book.accept("r1", [_group("a", 2)], 0)
    book.cancel("a")
    book.forget(now=1.0)
    assert "a" in book.groups  # its rollouts still run
    book.finish(_row("a__0"), 0)
    book.finish(_row("a__1"), 0)
    book.forget(now=2.0)
    assert book.groups == {} and book.by_rollout == {}


def test_closed_groups_past_the_count_go_oldest_first() -> None:
    book = Book(capacity=100, retain_s=3600, retain_groups=3)
    for i in range(6):
        book.accept(f"r{i}", [_group(f"g{i}", 1)], 0)
        book.finish(_row(f"g{i}__0"), 0)
        book.ack([f"g{i}"])
    book.forget(now=0.0)
    assert list(book.groups) == ["g3", "g4", "g5"]


def test_the_request_id_index_is_bounded_but_keeps_open_requests() -> None:
    book = Book(capacity=100, retain_s=0, retain_groups=0, request_ids=2)
    book.accept("r-o", [_group("o", 1)], 0)  # never finishes
    for i in range(5):
        book.accept(f"r-g{i}", [_group(f"g{i}", 1)], 0)
        book.finish(_row(f"g{i}__0"), 0)
        book.ack([f"g{i}"])
        book.forget(now=float(i))
    assert list(book.requests) == ["r-o", "r-g3", "r-g4"]
    assert book.known("r-g0") is None and book.known("r-o") is not None


def test_submit_and_cancel_cycles_leave_nothing_behind(tmp_path: Path) -> None:
    runner = LocalRollouts(hold_s=60)  # cancelled long before they would end
    controller = local_controller(
        tmp_path, runner=runner, capacity=4, retain_s=0, retain_groups=0, request_ids=10
    )

    async def cycles() -> None:
        for i in range(300):
            reply = await controller.submit(
                SubmitRequest.model_validate({**SUBMIT, "request_id": f"r{i}"})
            )
            if i % 2:
                await asyncio.sleep(0)  # half of them get to start
            await controller.cancel(reply.groups[0].group_id)
        await controller.ack([])

    asyncio.run(cycles())
    book = controller.book
    assert len(book.groups) == 0 and len(book.by_rollout) == 0
    assert len(book.requests) <= 10
    assert controller._tasks == {} and controller._awaited == {}
    assert book.cancelled == 300 and book.errors == {"cancelled": 600}
