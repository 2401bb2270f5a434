"""A `Call` per route of the controller's API, and the `groups()` iteration: pure."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict
from urllib.parse import quote

import orjson
from pydantic import BaseModel

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.client.calls import Call
from harbor_ray.online.wire import (
    AckReply,
    AckRequest,
    CancelReply,
    Group,
    GroupsReply,
    PolicyReply,
    StatsReply,
    SubmitReply,
    SubmitRequest,
    TaskRequest,
    WeightsReply,
    WeightsRequest,
)

__all__ = [
    "WEIGHTS_TIMEOUT_S",
    "GroupCursor",
    "SubmitOptions",
    "ack",
    "cancel",
    "groups",
    "health",
    "policy",
    "stats",
    "submit",
    "update_weights",
]

# Added to a long poll's wait for the reply's own way back.
_POLL_MARGIN_S = 30.0
# A weight update's wait: above the controller's own bound on an update (900 s unless
# configured otherwise), so that the controller, not the client, says it timed out.
WEIGHTS_TIMEOUT_S = 960.0


class SubmitOptions(TypedDict, total=False):
    """`submit`'s optional fields (the `POST /v1/rollouts` body's)."""

    request_id: str
    sandbox: str
    dataset: str
    sampling: Sampling | Mapping[str, Any]
    budget: int
    deadline_s: float
    max_staleness: int
    drop_no_signal: bool
    max_extra_groups: int
    replacement_tasks: list[str]
    metadata: dict[str, Any]


def _reader[M: BaseModel](model: type[M]) -> Callable[[bytes], M]:
    return model.model_validate_json


def _groups(raw: bytes) -> list[Group]:
    return GroupsReply.model_validate_json(raw).groups


def _health(raw: bytes) -> bool:
    reply = orjson.loads(raw)
    ok = reply.get("ok") if isinstance(reply, dict) else None
    if not isinstance(ok, bool):
        raise ValueError(f"not a health reply: {reply!r}")
    return ok


def submit(
    tasks: Mapping[str, int] | Sequence[TaskRequest], agent: str, options: SubmitOptions
) -> Call[SubmitReply]:
    """`tasks`: {task: n} or `TaskRequest`s. A request id is made when none is
    given, once: every retry resends it, so the controller starts the work once."""
    asked = (
        [TaskRequest(task=t, n=n) for t, n in tasks.items()]
        if isinstance(tasks, Mapping)
        else list(tasks)
    )
    body = SubmitRequest.model_validate(
        {"request_id": uuid.uuid4().hex, **options, "tasks": asked, "agent": agent}
    )
    return Call("POST", "/v1/rollouts", _reader(SubmitReply), body, status=202)


def groups(max_groups: int, wait_s: float) -> Call[list[Group]]:
    return Call(
        "GET",
        "/v1/groups",
        _groups,
        params={"max": str(max_groups), "wait_s": f"{wait_s:g}"},
        timeout_s=wait_s + _POLL_MARGIN_S,
    )


def ack(group_ids: Sequence[str]) -> Call[AckReply]:
    return Call("POST", "/v1/groups/ack", _reader(AckReply), AckRequest(group_ids=list(group_ids)))


def cancel(group_id: str) -> Call[CancelReply]:
    return Call("POST", f"/v1/groups/{quote(group_id, safe='')}/cancel", _reader(CancelReply))


def update_weights(path: str, version: int, timeout_s: float) -> Call[WeightsReply]:
    return Call(
        "POST",
        "/v1/weights",
        _reader(WeightsReply),
        WeightsRequest(path=path, version=version),
        resendable=False,
        timeout_s=timeout_s,
    )


def policy() -> Call[PolicyReply]:
    return Call("GET", "/v1/policy", _reader(PolicyReply))


def stats() -> Call[StatsReply]:
    return Call("GET", "/v1/stats", _reader(StatsReply))


def health() -> Call[bool]:
    return Call("GET", "/health", _health)


class GroupCursor:
    """The `groups()` iteration: long-poll, hand a batch out, and acknowledge it only
    when the caller asks for the next one, so a caller that dies holding a batch gets it
    again. `total` ends the iteration after that many groups (their last batch
    acknowledged first); None polls forever."""

    def __init__(self, max_groups: int, wait_s: float, total: int | None) -> None:
        assert max_groups >= 1 and (total is None or total >= 0), (
            "max_groups must be at least 1 and total not negative"
        )
        self.max_groups, self.wait_s, self.total = max_groups, wait_s, total
        self.taken = 0
        self.pending: list[str] = []  # the batch handed out, not yet acknowledged

    def next_call(self) -> Call[Any] | None:
        """What to send next: the pending ack, a poll, or None when done."""
        if self.pending:
            ids, self.pending = self.pending, []
            return ack(ids)
        if self.total is not None and self.taken >= self.total:
            return None
        wanted = (
            self.max_groups if self.total is None else min(self.max_groups, self.total - self.taken)
        )
        return groups(wanted, self.wait_s)

    def batch(self, reply: Any) -> list[Group] | None:
        """The batch to hand out from a poll's reply; None for an ack's or an empty poll."""
        if not isinstance(reply, list) or not reply:
            return None
        self.pending = [g.group_id for g in reply]
        self.taken += len(reply)
        return reply
