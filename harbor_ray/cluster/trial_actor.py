"""`TrialActor`: one Ray actor per rollout, owning its sandbox and its capture session.

The actor process is the rollout's owner: if it dies, the rollout is lost as a whole
(the driver writes an `infra_lost` row) and its bwrap sandbox dies with it
(`--die-with-parent`); the reaper removes the directory left behind.

This increment serves the capture proxy inside the actor (`local_capture` on loopback),
so the owner holds the session data trivially (ARCHITECTURE.md property 1). The
`admit`/`record`/`release`/`export` methods are the seam for the next increment: a
stateless proxy replica calls them on the owner, and they act on the same session
store the in-actor proxy uses.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import ray

from harbor_ray.capture.engine import HttpEngine
from harbor_ray.capture.local import LocalCapture, local_capture
from harbor_ray.capture.session import Admission, Counter, InMemorySessionStore
from harbor_ray.capture.turn import TurnRecord
from harbor_ray.trials.agents import needs_model
from harbor_ray.trials.result import RolloutResult
from harbor_ray.trials.rollout import CaptureService, RolloutSpec, run_rollout

NAMESPACE = "harbor_ray"
# Harbor and LiteLLM reach for the network at import unless told not to; actors are
# fresh processes, so they are told through their runtime env, not the driver's.
ACTOR_ENV = {"HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}

Work = Callable[[RolloutSpec, CaptureService | None], Awaitable[RolloutResult]]


class TrialActor:
    """Runs one rollout (`run`) and owns its capture session while it runs."""

    def __init__(
        self,
        spec: RolloutSpec,
        llm_url: str | None = None,
        model: str | None = None,
        work: Work | None = None,
    ) -> None:
        self._spec = spec
        self._llm_url = llm_url
        self._model = model
        # Injectable so that tests can exercise the cluster without Harbor trials.
        self._work = work or run_rollout
        self._capture: LocalCapture | None = None

    async def run(self) -> RolloutResult:
        """The rollout's row; like `run_rollout`, never raises but for cancellation."""
        async with self._capture_service() as capture:
            return await self._work(self._spec, capture)

    @contextlib.asynccontextmanager
    async def _capture_service(self) -> AsyncIterator[CaptureService | None]:
        if self._llm_url is None or not needs_model(self._spec.agent):
            yield None
            return
        engine = HttpEngine(self._llm_url)
        try:
            async with local_capture(engine, engine.root, model=self._model) as capture:
                self._capture = capture
                try:
                    yield capture
                finally:
                    self._capture = None
        finally:
            await engine.aclose()

    # The owner seam: what a stateless proxy replica will ask of the session's owner.

    async def admit(self, session_id: str) -> Admission:
        return await self._store().admit(session_id)

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        await self._store().record(session_id, turn)

    async def release(self, session_id: str, counter: Counter | None = None) -> None:
        await self._store().release(session_id, counter)

    async def export(self, session_id: str) -> dict[str, Any] | None:
        return await self._store().export(session_id)

    def _store(self) -> InMemorySessionStore:
        if self._capture is None:
            raise LookupError(f"rollout {self._spec.rollout_id!r} has no open capture session")
        return self._capture.store


def actor_name(rollout_id: str, retry: int = 0) -> str:
    """`rollout-<id>`; a retry gets its own name, the dead actor's may not be free yet."""
    return f"rollout-{rollout_id}" if retry == 0 else f"rollout-{rollout_id}-retry{retry}"


def start_trial_actor(
    spec: RolloutSpec,
    *,
    llm_url: str | None,
    model: str | None,
    num_cpus: float,
    retry: int = 0,
    work: Work | None = None,
) -> Any:  # ActorHandle
    """Create the rollout's actor. A small `num_cpus` so that Ray's CPU accounting never
    caps how many run at once: the sweep's concurrency is the only limit."""
    remote = ray.remote(TrialActor).options(
        name=actor_name(spec.rollout_id, retry),
        namespace=NAMESPACE,
        num_cpus=num_cpus,
        max_restarts=0,
        runtime_env={"env_vars": ACTOR_ENV},
    )
    return remote.remote(spec, llm_url, model, work)
