"""The typed clients of the online controller: `Client` (blocking) and `AsyncClient`.

Both drive the same exchanges (`calls.exchange` over `routes`), with httpx: every rule
about retries and refusals is there, and here only the sending and the sleeping.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any, Self, Unpack

import httpx

import harbor_ray.client.routes as routes
from harbor_ray.client.calls import Call, Exchange, Retry, Send, SendOutcome, Sleep, exchange
from harbor_ray.client.routes import GroupCursor, SubmitOptions
from harbor_ray.errors import ClientError
from harbor_ray.online.wire import (
    AckReply,
    CancelReply,
    Group,
    PolicyReply,
    StatsReply,
    SubmitReply,
    TaskRequest,
    WeightsReply,
)

__all__ = ["AsyncClient", "Client"]

DEFAULT_RETRY = Retry()

# Failures in which the request never left: safe to resend whatever it was.
_NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)


class _Connection:
    """What both clients hold: the base URL, the key, the retry policy."""

    def __init__(self, url: str, key: str, retry: Retry, timeout_s: float) -> None:
        if not key:
            raise ClientError(
                "the controller key is empty: pass the key the online service "
                "wrote to its key file",
                status=None,
            )
        self.url, self.retry = url.rstrip("/"), retry
        self.headers = {"authorization": f"Bearer {key}"}
        self.timeout_s = timeout_s

    def exchange[R](self, call: Call[R]) -> Exchange[R]:
        return exchange(call, self.retry, self.url)

    def request(self, send: Send) -> dict[str, Any]:
        """httpx's `request` arguments for `send` (whole: a caller's own httpx client
        needs no base URL or headers)."""
        content, call = send.content, send.call
        headers = (
            self.headers
            if content is None
            else {**self.headers, "content-type": "application/json"}
        )
        return {
            "method": call.method,
            "url": f"{self.url}{call.path}",
            "content": content,
            "params": call.params,
            "headers": headers,
            "timeout": call.timeout_s if call.timeout_s is not None else self.timeout_s,
        }

    @staticmethod
    def answered(response: httpx.Response) -> SendOutcome:
        return SendOutcome(
            status=response.status_code, headers=response.headers, content=response.content
        )

    @staticmethod
    def failed(exc: httpx.TransportError) -> SendOutcome:
        return SendOutcome(
            failure=f"{type(exc).__name__}: {exc}", sent=not isinstance(exc, _NOT_SENT)
        )


class Client:
    """The controller's API, blocking. `url` is the controller's base URL, `key` its
    controller key; `retry` says how 429s and lost connections are retried; `http` an
    httpx client of the caller's (event hooks, transport, limits), closed with this."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        retry: Retry = DEFAULT_RETRY,
        timeout_s: float = 60.0,
        http: httpx.Client | None = None,
    ) -> None:
        self._conn = _Connection(url, key, retry, timeout_s)
        self._http = http or httpx.Client()

    def _run[R](self, call: Call[R]) -> R:
        steps, outcome = self._conn.exchange(call), None
        while True:
            try:
                step = steps.send(outcome)  # type: ignore[arg-type]  # None starts it
            except StopIteration as done:
                result: R = done.value  # the exchange's R; StopIteration types it Any
                return result
            if isinstance(step, Send):
                outcome = self._send(step)
            else:
                _sleep(step)
                outcome = None

    def _send(self, send: Send) -> SendOutcome:
        try:
            return self._conn.answered(self._http.request(**self._conn.request(send)))
        except httpx.TransportError as exc:
            return self._conn.failed(exc)

    def submit(
        self,
        tasks: Mapping[str, int] | Sequence[TaskRequest],
        agent: str,
        **options: Unpack[SubmitOptions],
    ) -> SubmitReply:
        """Start a group per task (`{task: n}`); retried safely (one request id)."""
        return self._run(routes.submit(tasks, agent, options))

    def groups(
        self, *, max_groups: int = 16, wait_s: float = 30.0, total: int | None = None
    ) -> Iterator[list[Group]]:
        """Batches of finished groups, oldest first. A batch is acknowledged when the
        next one is asked for (or the iteration ends at `total` groups): leaving the loop
        early leaves the last batch unacknowledged, and it is delivered again."""
        cursor = GroupCursor(max_groups, wait_s, total)
        while (call := cursor.next_call()) is not None:
            if (batch := cursor.batch(self._run(call))) is not None:
                yield batch

    def poll(self, *, max_groups: int = 16, wait_s: float = 30.0) -> list[Group]:
        """One long poll: up to `max_groups` finished groups, oldest first, possibly
        none after `wait_s`; not acknowledged (`ack` them once used)."""
        return self._run(routes.groups(max_groups, wait_s))

    def ack(self, group_ids: Sequence[str]) -> AckReply:
        return self._run(routes.ack(group_ids))

    def cancel(self, group_id: str) -> CancelReply:
        return self._run(routes.cancel(group_id))

    def update_weights(
        self, path: str, version: int, *, timeout_s: float = routes.WEIGHTS_TIMEOUT_S
    ) -> WeightsReply:
        """Load the checkpoint at `path` as `version`; answers when every replica serves
        it. Never resent once it may have arrived (see `calls`)."""
        return self._run(routes.update_weights(path, version, timeout_s))

    def policy(self) -> PolicyReply:
        return self._run(routes.policy())

    def stats(self) -> StatsReply:
        return self._run(routes.stats())

    def health(self) -> bool:
        return self._run(routes.health())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


class AsyncClient:
    """`Client` for asyncio: the same methods, awaited; `groups` is an async iterator."""

    def __init__(
        self,
        url: str,
        key: str,
        *,
        retry: Retry = DEFAULT_RETRY,
        timeout_s: float = 60.0,
        http: httpx.AsyncClient | None = None,
    ) -> None:
        self._conn = _Connection(url, key, retry, timeout_s)
        self._http = http or httpx.AsyncClient()

    async def _run[R](self, call: Call[R]) -> R:
        steps, outcome = self._conn.exchange(call), None
        while True:
            try:
                step = steps.send(outcome)  # type: ignore[arg-type]  # None starts it
            except StopIteration as done:
                result: R = done.value  # the exchange's R; StopIteration types it Any
                return result
            outcome = await (self._send(step) if isinstance(step, Send) else _async_sleep(step))

    async def _send(self, send: Send) -> SendOutcome:
        try:
            return self._conn.answered(await self._http.request(**self._conn.request(send)))
        except httpx.TransportError as exc:
            return self._conn.failed(exc)

    async def submit(
        self,
        tasks: Mapping[str, int] | Sequence[TaskRequest],
        agent: str,
        **options: Unpack[SubmitOptions],
    ) -> SubmitReply:
        return await self._run(routes.submit(tasks, agent, options))

    async def groups(
        self, *, max_groups: int = 16, wait_s: float = 30.0, total: int | None = None
    ) -> AsyncIterator[list[Group]]:
        cursor = GroupCursor(max_groups, wait_s, total)
        while (call := cursor.next_call()) is not None:
            if (batch := cursor.batch(await self._run(call))) is not None:
                yield batch

    async def poll(self, *, max_groups: int = 16, wait_s: float = 30.0) -> list[Group]:
        return await self._run(routes.groups(max_groups, wait_s))

    async def ack(self, group_ids: Sequence[str]) -> AckReply:
        return await self._run(routes.ack(group_ids))

    async def cancel(self, group_id: str) -> CancelReply:
        return await self._run(routes.cancel(group_id))

    async def update_weights(
        self, path: str, version: int, *, timeout_s: float = routes.WEIGHTS_TIMEOUT_S
    ) -> WeightsReply:
        return await self._run(routes.update_weights(path, version, timeout_s))

    async def policy(self) -> PolicyReply:
        return await self._run(routes.policy())

    async def stats(self) -> StatsReply:
        return await self._run(routes.stats())

    async def health(self) -> bool:
        return await self._run(routes.health())

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


def _sleep(step: Sleep) -> None:
    time.sleep(step.seconds)


async def _async_sleep(step: Sleep) -> None:
    await asyncio.sleep(step.seconds)
