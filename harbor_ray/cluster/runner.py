"""One rollout on a pool's hosts, to its one row: what the sweep driver and the online
controller share.

- A rollout takes a slot on a host (`HostPool`) and runs there; the clock starts once
  the host runs, since a host's start (seconds on a loaded node) must not count against
  the rollout's deadline.
- A rollout ends itself at its deadline; one with no row `grace_s` later is cancelled
  on its host, and if it ignores that for another `grace_s`, its host is killed. Either
  way the row says `deadline`.
- A rollout whose host died (or never started) is `infra_lost`; only infrastructure
  errors (`RETRIED`) are retried, `retries` times, each on a fresh try (a new sandbox).
  With journaling, the row of a rollout whose host died carries the turns the host's
  journal kept (`partial`); a lost try that is retried keeps its turns in a row of its
  own, `<rollout_id>@<host>` (`on_lost`), so that each recorded turn is in exactly one row
  and the retry starts afresh.
- A caller that cancels `run` (the online controller cancelling a group) cancels the
  rollout on its host the same way, then sees the cancellation.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import ray
from ray.exceptions import RayActorError, RayTaskError

from harbor_ray.cluster.journaling import partial_record
from harbor_ray.cluster.pool import Host, HostPool
from harbor_ray.data.encode import RolloutRecord, encode_record, with_findings
from harbor_ray.data.result import ErrorType, FindingRecord, RolloutResult, describe_bug
from harbor_ray.trials.spec import RolloutSpec

__all__ = ["RETRIED", "RetryPolicy", "RolloutRunner", "failed_record", "first_line"]

RETRIED = frozenset({ErrorType.INFRA_LOST, ErrorType.SANDBOX_START})


@dataclass(frozen=True)
class RetryPolicy:
    """How long a rollout may take past its deadline, and how often it is tried again."""

    retries: int = 1
    grace_s: float = 60.0
    host_start_s: float = 600.0  # a host not running by then is lost (and retried)

    def __post_init__(self) -> None:
        assert self.retries >= 0, "retries cannot be negative"


class RolloutRunner:
    """Runs specs on `pool`'s hosts; `on_start`/`on_end` bracket every try (the callers'
    in-flight counts); `on_lost` gets the partial row of each lost try that is retried."""

    def __init__(
        self,
        pool: HostPool,
        policy: RetryPolicy,
        *,
        on_start: Callable[[], None] = lambda: None,
        on_end: Callable[[], None] = lambda: None,
        on_lost: Callable[[RolloutRecord], None] = lambda _: None,
    ) -> None:
        self.pool, self.policy = pool, policy
        self._on_start, self._on_end, self._on_lost = on_start, on_end, on_lost

    async def run(self, spec: RolloutSpec) -> RolloutRecord:
        """The rollout's row, after the retries its infrastructure errors allow."""
        retry = 0
        while True:
            self._on_start()
            host = self.pool.acquire()
            last = retry >= self.policy.retries
            try:
                record = await self._on_host(spec, host, last)
            finally:
                self.pool.release(host)
                self._on_end()
            if record.result.error_type not in RETRIED or last:
                break
            if record.result.partial and record.result.counts and record.result.counts.turns:
                self._on_lost(record)  # under its own id: the retry starts afresh
            retry += 1
        if retry:
            record = with_findings(
                record,
                [
                    FindingRecord(
                        code="infra_retries",
                        severity="info",
                        message=f"{retry} retries after infrastructure errors",
                    )
                ],
            )
        return record

    async def _on_host(self, spec: RolloutSpec, host: Host, last: bool) -> RolloutRecord:
        """One try; `last`: no retry follows it."""
        policy, pool = self.policy, self.pool
        started = time.time()
        try:
            async with asyncio.timeout(policy.host_start_s):
                host.placement = await host.ready
        except TimeoutError:
            pool.kill(host)
            return failed_record(
                spec,
                ErrorType.INFRA_LOST,
                f"the rollout's host did not start in {policy.host_start_s:g} s",
                time.time() - started,
                host,
            )
        except RayActorError as exc:
            return await _host_died(spec, host, pool, exc, started, last)
        ref = host.handle.run.remote(spec, pool.starts.of(spec.sandbox))
        # Only this clock makes a row `deadline`: a TimeoutError the rollout raised
        # arrives as a RayTaskError that is also a TimeoutError.
        running = asyncio.ensure_future(ref)
        try:
            if spec.deadline_s is not None:
                hard = spec.deadline_s + policy.grace_s
                await asyncio.wait({running}, timeout=hard)
                if not running.done():
                    how = await _cancel(ref, running, policy.grace_s, host, pool)
                    return failed_record(
                        spec,
                        ErrorType.DEADLINE,
                        f"{how} by the driver: no row {hard:g} s after the start "
                        f"(deadline {spec.deadline_s:g} s + grace {policy.grace_s:g} s)",
                        time.time() - started,
                        host,
                    )
            return await asyncio.shield(running)
        except asyncio.CancelledError:
            # The caller cancelled the rollout: end it on its host (Harbor tears its
            # sandbox down), then let the cancellation through.
            await _cancel(ref, running, policy.grace_s, host, pool)
            raise
        except RayActorError as exc:
            return await _host_died(spec, host, pool, exc, started, last)
        except RayTaskError as exc:
            # A host's `run` returns a row whatever the rollout did; this is a bug in the
            # work it ran, which must still end as one row, not end the run.
            # Ray keeps no frame of an async actor's exception (its text shows only
            # concurrent.futures'): the row names the exception and the host.
            cause = exc.cause if exc.cause is not None else exc
            return failed_record(
                spec,
                ErrorType.INTERNAL,
                f"the rollout raised {describe_bug(cause)}",
                time.time() - started,
                host,
            )


async def _host_died(
    spec: RolloutSpec, host: Host, pool: HostPool, exc: RayActorError, started: float, last: bool
) -> RolloutRecord:
    """The lost try's row: partial, with the turns of the host's journal, when the
    rollout is found there; named `<rollout_id>@<host>` unless no retry follows."""
    pool.lost(host)
    error = f"the rollout's host died: {first_line(exc)}"
    turns = (await pool.salvaged(host)).get(spec.rollout_id)
    if turns is None or pool.journaling is None:
        return failed_record(spec, ErrorType.INFRA_LOST, error, time.time() - started, host)
    record = partial_record(
        spec,
        turns,
        rollout_id=spec.rollout_id if last else f"{spec.rollout_id}@{host.name}",
        error=error,
        seconds=time.time() - started,
        node=host.node,
        host=host.name,
        train_partial=pool.journaling.train_partial,
    )
    pool.rebuilt(record.rollout_id, host, spec.rollout_id)
    return record


async def _cancel(
    ref: Any, running: asyncio.Future[RolloutRecord], grace_s: float, host: Host, pool: HostPool
) -> str:
    """Cancel a rollout's task on its host; kill the host if that does not end it."""
    if running.done():
        return "finished"
    ray.cancel(ref)
    await asyncio.wait({running}, timeout=grace_s)
    if not running.done():
        running.cancel()
        pool.kill(host)
        return "killed with its host"
    if not running.cancelled():
        running.exception()  # retrieved: a cancelled rollout's error is expected
    return "cancelled"


def failed_record(
    spec: RolloutSpec, error_type: ErrorType, error: str, seconds: float, host: Host | None = None
) -> RolloutRecord:
    """The record of a rollout whose host never returned one: a row, no tokens; it names
    the host it was given (and that host's node, if it ever started)."""
    return encode_record(
        RolloutResult(
            rollout_id=spec.rollout_id,
            task=spec.task.name,
            attempt=spec.attempt,
            agent=spec.agent,
            sandbox=spec.sandbox,
            ok=False,
            reward=None,
            error_type=error_type,
            error=error,
            timings={"total": seconds},
            node=None if host is None else host.node,
            host=None if host is None else host.name,
            provenance=spec.provenance,
        ),
        None,
    )


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
