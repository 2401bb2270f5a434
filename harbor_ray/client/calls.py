"""What the client says to the controller and how it reads the answers: pure, no I/O.

Both clients (`Client`, `AsyncClient`) run the same exchanges; only how a request is
sent and how a wait is slept differ. So an exchange is a generator: it yields `Send`
(an HTTP request to make) and `Sleep` (a wait before a retry), is resumed with the
`SendOutcome` of a send, and returns the typed reply or raises `ClientError`. The drivers
loop over it; every rule (which failures are retried, how long to wait, what a refusal
means) lives here once.

Retries are safe because of what each route promises: a submit is idempotent by its
`request_id` (generated once per `submit`, resent as it was), acknowledging a group
twice reports it unknown, cancelling twice cancels nothing more, and GETs change
nothing. A weight update is not resent once it may have reached the controller: a
second one for the same version would be refused (409) after the first landed, and
the caller could not tell which happened.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from harbor_ray.errors import ClientError
from harbor_ray.online.wire import ReplicaResult

__all__ = ["Call", "Exchange", "Retry", "Send", "SendOutcome", "Sleep", "exchange", "refusal"]

# Statuses a proxy in front of the controller (Serve's) answers while a replica starts
# or is replaced: worth resending what may be resent. 502 is not among them: the
# controller answers it for a failed weight update.
_UNAVAILABLE = frozenset({503, 504})


@dataclass(frozen=True)
class Retry:
    """How often and how long a call is retried: on 429 (waiting what Retry-After
    says), on a connection that could not be made, and, for calls that may be resent,
    on a lost answer or a 503/504."""

    attempts: int = 8  # retries after the first try
    backoff_s: float = 0.5  # the first wait without Retry-After; doubled each time
    max_wait_s: float = 30.0  # no single wait is longer (a larger Retry-After included)

    def wait(self, attempt: int, retry_after: float | None) -> float:
        base = retry_after if retry_after is not None else self.backoff_s * 2**attempt
        return min(max(base, 0.0), self.max_wait_s)


@dataclass(frozen=True)
class Call[R]:
    """One route's request and how its answer is read."""

    method: str
    path: str
    parse: Callable[[bytes], R]
    body: BaseModel | None = None
    params: Mapping[str, str] | None = None
    status: int = 200  # the success status
    resendable: bool = True  # safe to send again when its answer may have been lost
    timeout_s: float | None = None  # None: the client's


@dataclass(frozen=True)
class Send:
    call: Call[Any]

    @property
    def content(self) -> bytes | None:
        if self.call.body is None:
            return None
        return orjson.dumps(self.call.body.model_dump(mode="json", exclude_none=True))


@dataclass(frozen=True)
class Sleep:
    seconds: float


@dataclass(frozen=True)
class SendOutcome:
    """What one send gave: an answer (status, headers, body), or a transport failure;
    `sent` is False when the connection was never made (nothing reached the server)."""

    status: int | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    content: bytes = b""
    failure: str | None = None
    sent: bool = True


type Exchange[R] = Generator[Send | Sleep, SendOutcome, R]


def exchange[R](call: Call[R], retry: Retry, url: str) -> Exchange[R]:
    """Send `call` until it is answered for good, retrying what `retry` allows."""
    for attempt in range(retry.attempts + 1):
        outcome = yield Send(call)
        if outcome.failure is not None:
            if attempt == retry.attempts or (outcome.sent and not call.resendable):
                raise ClientError(f"{call.method} {url}{call.path}: {outcome.failure}", status=None)
            yield Sleep(retry.wait(attempt, None))
            continue
        assert outcome.status is not None
        if outcome.status == call.status:
            try:
                return call.parse(outcome.content)
            except (ValidationError, ValueError) as exc:
                raise ClientError(
                    f"{call.method} {url}{call.path}: not the reply of this API: {exc}",
                    status=outcome.status,
                ) from exc
        if attempt < retry.attempts and (
            outcome.status == 429 or (outcome.status in _UNAVAILABLE and call.resendable)
        ):
            yield Sleep(retry.wait(attempt, _retry_after(outcome.headers)))
            continue
        raise refusal(call, outcome, url)
    raise AssertionError("unreachable: the last attempt returns or raises")


def refusal(call: Call[Any], outcome: SendOutcome, url: str) -> ClientError:
    """The controller's refusal (its `ErrorReply`) as a `ClientError`."""
    try:
        data = orjson.loads(outcome.content)
    except orjson.JSONDecodeError:
        data = None
    if not isinstance(data, dict):
        data = {"error": outcome.content[:200].decode(errors="replace") or "no body"}
    message = str(data.get("error"))
    if outcome.status == 401:
        message = f"the controller key is wrong or missing ({message})"
    replicas = [
        ReplicaResult.model_validate(r) for r in data.get("replicas") or [] if isinstance(r, dict)
    ]
    field_name = data.get("field")
    return ClientError(
        f"{call.method} {url}{call.path}: {message}",
        status=outcome.status,
        field=field_name if isinstance(field_name, str) else None,
        replicas=replicas,
    )


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return float(headers["retry-after"])
    except (KeyError, ValueError):
        return None  # absent, or an HTTP date: the backoff applies
