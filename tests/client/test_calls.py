"""The client's exchanges, driven by scripted outcomes: which failures are retried, how
long each wait is, what a refusal becomes; and the groups cursor's acknowledgements."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harbor_ray.client import routes
from harbor_ray.client.calls import Call, Retry, Send, SendOutcome, Sleep, exchange
from harbor_ray.errors import ClientError
from harbor_ray.online.wire import Group

URL = "http://controller"
SUBMITTED = orjson.dumps({"groups": [{"group_id": "g", "task": "t", "n": 2}], "policy_version": 3})


def answer(status: int, body: Any, **headers: str) -> SendOutcome:
    return SendOutcome(status=status, headers=headers, content=orjson.dumps(body))


def drive(
    call: Call[Any], outcomes: list[SendOutcome], retry: Retry | None = None
) -> tuple[Any, list[Send | Sleep]]:
    """Run the exchange over `outcomes` (one per send); (its result, every step)."""
    steps: list[Send | Sleep] = []
    gen = exchange(call, retry or Retry(), URL)
    given = iter(outcomes)
    outcome = None
    while True:
        try:
            step = gen.send(outcome)  # type: ignore[arg-type]
        except StopIteration as done:
            return done.value, steps
        steps.append(step)
        outcome = next(given) if isinstance(step, Send) else None


def sleeps(steps: list[Send | Sleep]) -> list[float]:
    return [s.seconds for s in steps if isinstance(s, Sleep)]


def test_429_waits_what_retry_after_says_and_resends_the_same_request_id() -> None:
    call = routes.submit({"t": 2}, "terminus-2", {})
    reply, steps = drive(
        call,
        [
            answer(429, {"error": "full"}, **{"retry-after": "2"}),
            answer(429, {"error": "full"}),
            SendOutcome(status=202, content=SUBMITTED),
        ],
    )
    assert reply.policy_version == 3 and reply.groups[0].group_id == "g"
    assert sleeps(steps) == [2.0, 1.0]  # Retry-After, then the backoff (0.5 x 2**1)
    bodies = {s.content for s in steps if isinstance(s, Send)}
    assert len(bodies) == 1  # one request id for every try
    assert orjson.loads(bodies.pop())["request_id"]


def test_429_past_the_attempts_is_the_controller_s_refusal() -> None:
    full = answer(429, {"error": "3 unfinished + 4 asked exceed 3"}, **{"retry-after": "99"})
    with pytest.raises(ClientError) as caught:
        drive(routes.submit({"t": 4}, "a", {}), [full] * 3, Retry(attempts=2, max_wait_s=5))
    assert caught.value.status == 429 and "exceed 3" in str(caught.value)


def test_a_lost_answer_is_resent_only_where_resending_is_safe() -> None:
    lost = SendOutcome(failure="ReadError: reset", sent=True)
    never_sent = SendOutcome(failure="ConnectError: refused", sent=False)
    policy = SendOutcome(
        status=200, content=orjson.dumps({"version": 1, "paused": False, "replicas": []})
    )
    assert drive(routes.policy(), [lost, never_sent, policy])[0].version == 1
    weights = routes.update_weights("/ckpt", 2, 60.0)
    with pytest.raises(ClientError) as caught:
        drive(weights, [lost])
    assert caught.value.status is None and "ReadError" in str(caught.value)
    # A connection never made reached nobody: even a weight update is sent again.
    done = answer(200, {"version": 2, "replicas": [], "steps": {"reload": 0.1}, "seconds": 0.1})
    assert drive(weights, [never_sent, done])[0].version == 2
    # 503 from a proxy in front: resendable calls only.
    unavailable = answer(503, {"error": "no replica"})
    assert drive(routes.policy(), [unavailable, policy])[0].version == 1
    with pytest.raises(ClientError) as caught:
        drive(weights, [unavailable])
    assert caught.value.status == 503


def test_refusals_carry_status_field_and_replicas() -> None:
    with pytest.raises(ClientError) as caught:
        drive(routes.policy(), [answer(401, {"error": "missing or wrong controller key"})])
    assert caught.value.status == 401 and "controller key is wrong" in str(caught.value)
    with pytest.raises(ClientError) as caught:
        drive(
            routes.submit({"t": 1}, "a", {}),
            [answer(404, {"error": "no task 't'", "field": "tasks[0].task"})],
        )
    assert (caught.value.status, caught.value.field) == (404, "tasks[0].task")
    failed = {
        "error": "failed on engine-1",
        "replicas": [
            {"replica": "engine-1", "ok": False, "version": 0, "step": "load", "error": "x"}
        ],
    }
    with pytest.raises(ClientError) as caught:
        drive(routes.update_weights("/c", 1, 60.0), [answer(502, failed)])
    assert [r.step for r in caught.value.replicas] == ["load"]
    with pytest.raises(ClientError) as caught:
        drive(routes.stats(), [SendOutcome(status=500, content=b"<html>oops")])
    assert caught.value.status == 500 and "oops" in str(caught.value)
    with pytest.raises(ClientError, match="not the reply"):
        drive(routes.stats(), [answer(200, {"queued": "many"})])


def test_submit_refuses_a_bad_field_before_sending() -> None:
    with pytest.raises(ValueError, match="budget"):
        routes.submit({"t": 1}, "a", {"budget": -1})
    call = routes.submit({"t": 1}, "a", {"request_id": "mine", "sampling": {"seed": 7}})
    assert call.body is not None and call.body.request_id == "mine"


def group(group_id: str) -> Group:
    return Group(
        group_id=group_id,
        request_id="r",
        task="t",
        n=1,
        metadata={},
        policy_version_min=0,
        policy_version_max=0,
        finished_version=0,
        staleness=0,
        rollouts=[],
        sequences=[],
        turns=[],
    )


def test_the_cursor_acknowledges_a_batch_only_when_the_next_is_asked_for() -> None:
    cursor = routes.GroupCursor(max_groups=2, wait_s=5, total=3)
    first = cursor.next_call()
    assert first is not None and first.params == {"max": "2", "wait_s": "5"}
    assert cursor.batch([]) is None  # an empty poll hands out nothing
    assert cursor.next_call().path == "/v1/groups"
    assert [g.group_id for g in cursor.batch([group("a"), group("b")])] == ["a", "b"]
    ack = cursor.next_call()  # asking for the next batch acknowledges this one
    assert ack.path == "/v1/groups/ack" and ack.body.group_ids == ["a", "b"]
    assert cursor.batch(None) is None
    poll = cursor.next_call()
    assert poll.params["max"] == "1"  # never more than the total left
    cursor.batch([group("c")])
    assert cursor.next_call().body.group_ids == ["c"]
    assert cursor.next_call() is None
