"""What a rollout is, as plain data, and what it needs of the capture layer.

Kept apart from `rollout`, which runs Harbor trials: the cluster passes specs between
processes and hosts rollouts, and needs only this much of a rollout's shape.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from harbor_ray.capture.core.auxiliary import MainLoop
from harbor_ray.capture.core.record import ClosedCapture
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.session_info import SessionInfo
from harbor_ray.data.result import Provenance
from harbor_ray.trials.backends import LOCAL
from harbor_ray.trials.datasets import TaskRef
from harbor_ray.trials.harness import harness_provenance


class CaptureService(Protocol):
    """What a rollout needs of the capture layer: sessions, and the proxy's address."""

    @property
    def served_model(self) -> str: ...

    @property
    def host_url(self) -> str: ...

    @property
    def remote_url(self) -> str | None: ...

    async def open_session(
        self,
        *,
        budget: int | None,
        sampling: Sampling | None,
        main_loop: MainLoop | None = None,
    ) -> SessionInfo: ...

    async def close_session(self, session_id: str) -> ClosedCapture | None: ...


@dataclass(frozen=True)
class RolloutSpec:
    """Everything one rollout needs, as plain data (it crosses process boundaries)."""

    rollout_id: str
    task: TaskRef
    agent: str
    trials_dir: Path
    sandbox: str = LOCAL
    profile: str | None = None  # the dialect the agent speaks (None: its default)
    attempt: int = 0
    sampling: Sampling | None = None
    budget: int | None = None
    deadline_s: float | None = None
    reward_key: str | None = None
    agent_kwargs: Mapping[str, Any] = field(default_factory=dict)
    sandbox_kwargs: Mapping[str, Any] = field(default_factory=dict)
    # The host's agent CLI cache (`harbor-ray agents install`); None: the default one.
    agents_cache: Path | None = None
    # Run a task that needs its own image on the host's userland anyway, when the
    # sandbox cannot give it (--host-userland); its row says `host_override`.
    host_userland: bool = False
    # What every row of the rollout says it was made with (data/result.py); None:
    # nothing recorded.
    provenance: Provenance | None = None


def make_specs(
    tasks: Sequence[TaskRef],
    attempts: int,
    *,
    agent: str,
    sandbox: str,
    trials_dir: Path,
    sampling: Sampling | None = None,
    budget: int | None = None,
    deadline_s: float | None = None,
    reward_key: str | None = None,
    agent_kwargs: dict[str, Any] | None = None,
    sandbox_kwargs: dict[str, Any] | None = None,
    run_id: str | None = None,
    agents_cache: Path | None = None,
    host_userland: bool = False,
    engine: Provenance | None = None,
) -> list[RolloutSpec]:
    """tasks x attempts, in task order then attempt order (the documented output order).
    `engine`: what the engine serves (its half of every row's provenance; None: unknown)."""
    run_id = run_id or uuid.uuid4().hex[:8]
    provenance = harness_provenance(
        agent, profile=None, agent_kwargs=agent_kwargs or {}
    ).with_engine(engine)
    return [
        RolloutSpec(
            rollout_id=f"{task.name}__{attempt}__{run_id}",
            task=task,
            agent=agent,
            sandbox=sandbox,
            attempt=attempt,
            trials_dir=trials_dir,
            sampling=sampling,
            budget=budget,
            deadline_s=deadline_s,
            reward_key=reward_key,
            agent_kwargs=agent_kwargs or {},
            sandbox_kwargs=sandbox_kwargs or {},
            agents_cache=agents_cache,
            host_userland=host_userland,
            provenance=provenance,
        )
        for task in tasks
        for attempt in range(attempts)
    ]
