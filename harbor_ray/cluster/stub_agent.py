"""A stub agent for sweeps: drives the capture proxy like an agent, without Harbor.

For benchmarks and fault tests of the cluster's serving layer, where a real agent's
minutes in a sandbox would only hide what is measured. It runs as a rollout's work on a
host: opens the session, makes chat calls through the proxy (each prompt extends the
previous one, as an agent's does), retries a call the way SDKs do when a replica fails,
and closes the session. Its row is ok only if every call got an answer and each answer
is among the recorded turns.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

import aiohttp
import orjson

from harbor_ray.cluster.host import Work
from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ErrorType, FindingRecord, RolloutResult
from harbor_ray.trials.spec import CaptureService, RolloutSpec

_RETRYABLE = frozenset({404, 500, 502, 503, 504})  # a replica restarting answers 404/5xx
# One client per event loop (a host's) while rollouts run in it, its keep-alive
# connections shared by them: a client per rollout cost its host a connector's set-up
# and teardown each time, CPU that a real agent spends in its own process.
_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _Shared] = (
    weakref.WeakKeyDictionary())


@dataclass
class _Shared:
    http: aiohttp.ClientSession
    users: int = 0


@contextlib.asynccontextmanager
async def _client() -> AsyncIterator[aiohttp.ClientSession]:
    """This loop's client, closed once no rollout uses it."""
    loop = asyncio.get_running_loop()
    shared = _CLIENTS.get(loop)
    if shared is None:
        shared = _CLIENTS[loop] = _Shared(aiohttp.ClientSession())
    shared.users += 1
    try:
        yield shared.http
    finally:
        shared.users -= 1
        if not shared.users:
            del _CLIENTS[loop]
            await shared.http.close()


def chat_agent(calls: int, think_s: float = 0.0, max_tokens: int = 16, retries: int = 8,
               backoff_s: float = 0.5, call_timeout_s: float = 60.0,
               between: Callable[[int], Awaitable[None]] | None = None) -> Work:
    """Work that makes `calls` chat calls, `think_s` apart. A call with no answer in
    `call_timeout_s` is retried, as SDKs do: a request a dying replica held may never
    be answered. `between(step)`, when given, is awaited after call `step` was answered
    (where a test holds rollouts mid-way, e.g. for a weight update)."""

    async def work(spec: RolloutSpec, capture: CaptureService | None) -> RolloutRecord:
        assert capture is not None, "the stub agent calls a model: the sweep needs a proxy"
        started = time.time()
        session = await capture.open_session(budget=spec.budget, sampling=spec.sampling)
        opened = time.time()
        messages = [{"role": "user", "content": f"task {spec.rollout_id}: begin"}]
        answers: list[str] = []
        retried = 0
        request = _Request(f"{capture.host_url}/v1/chat/completions",
                           {"authorization": f"Bearer {session.key}"},
                           aiohttp.ClientTimeout(total=call_timeout_s))
        try:
            async with _client() as http:
                for step in range(calls):
                    body = {"model": capture.served_model, "messages": messages,
                            "max_tokens": max_tokens}
                    answer, tries = await _call(http, request, body, retries, backoff_s)
                    retried += tries
                    if answer is None:
                        break
                    answers.append(answer)
                    messages += [{"role": "assistant", "content": answer},
                                 {"role": "user", "content": f"step {step} done"}]
                    if between is not None:
                        await between(step)
                    await asyncio.sleep(think_s)
        finally:
            called = time.time()
            closed = await capture.close_session(session.session_id)
        closed_at = time.time()
        turns = () if closed is None else closed.turns
        recorded = [orjson.loads(t.response_message_json).get("content") for t in turns]
        missing = sum(1 for a in answers if a not in recorded)
        ok = len(answers) == calls and missing == 0
        return encode_record(RolloutResult(
            rollout_id=spec.rollout_id, task=spec.task.name, attempt=spec.attempt,
            agent=spec.agent, sandbox=spec.sandbox, ok=ok, reward=1.0 if ok else 0.0,
            error_type=None if ok else ErrorType.AGENT_ERROR,
            error=None if ok else (f"{len(answers)}/{calls} calls answered, {missing} answers "
                                   "not recorded"),
            findings=[FindingRecord(code="stub_retries", severity="info",
                                    message=f"{retried} calls retried")] if retried else [],
            model=capture.served_model, counts=None if closed is None else closed.counts,
            model_calls=len(recorded),
            # Wall-clock marks too, so a benchmark can place the work in the sweep's time.
            timings={"open": opened - started, "calls": called - opened,
                     "close": closed_at - called, "total": closed_at - started,
                     "started_at": started, "ended_at": closed_at},
        ), closed)

    return work


@dataclass(frozen=True)
class _Request:
    """Where a rollout's calls go, with its session's key."""

    url: str
    headers: dict[str, str]
    timeout: aiohttp.ClientTimeout


async def _call(http: aiohttp.ClientSession, request: _Request, body: dict, retries: int,
                backoff_s: float) -> tuple[str | None, int]:
    """The answer's text and how many retries it took; None if every try failed."""
    for attempt in range(retries + 1):
        try:
            async with http.post(request.url, json=body, headers=request.headers,
                                      timeout=request.timeout) as reply:
                if reply.status == 200:
                    data = await reply.json()
                    return data["choices"][0]["message"]["content"], attempt
                if reply.status not in _RETRYABLE:
                    return None, attempt
        except (aiohttp.ClientError, TimeoutError):
            pass
        await asyncio.sleep(backoff_s)
    return None, retries
