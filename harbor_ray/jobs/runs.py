"""What a run of an agent on a dataset's tasks asks for (`RunRequest`: the flags
`rollout` and `sweep` share), what is checked before it starts (the agent and the engine
it needs, the tasks, the sandbox backend), and its rollout specs. A request that cannot
work fails here, naming what to change, before Ray, an engine or a sandbox is started."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.core.upstream_profile import PROFILES, UpstreamName
from harbor_ray.capture.proxy.engine_adapter import EngineChoice
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.data.result import Provenance
from harbor_ray.errors import StartError
from harbor_ray.trials.agents import needs_model
from harbor_ray.trials.backends import check_backend, provides_task_image
from harbor_ray.trials.datasets import TaskRef, resolve_dataset, select_tasks
from harbor_ray.trials.environment_need import refusal
from harbor_ray.trials.spec import RolloutSpec, make_specs

__all__ = [
    "CheckedStart",
    "Progress",
    "RunRequest",
    "check_sandbox",
    "checked_start",
    "environment_refusals",
    "sampling_of",
    "silent",
    "specs_of",
    "tasks_of",
]

# A job's narration: one line per step or notice (the CLI prints them as phases).
Progress = Callable[[str], None]


def silent(_: str) -> None:
    """The narration of a job nobody watches."""


@dataclass(frozen=True)
class RunRequest:
    """What a run of an agent on a dataset's tasks asks for: the flags of `harbor-ray
    rollout` and `harbor-ray sweep` in common."""

    agent: str
    dataset: str = "samples"
    tasks: Sequence[str] | None = None  # None: every task
    llm_url: str | None = None  # an engine already running, or:
    engine: Path | None = None  # a Serve YAML started for the run, and stopped after
    model: str | None = None  # None: the first model the engine lists
    sandbox: str = "local"
    sandbox_kwargs: Mapping[str, Any] = field(default_factory=dict)
    attempts: int = 1
    budget: int | None = 20
    deadline_s: float | None = 900.0
    temperature: float | None = None
    max_tokens: int | None = None
    reward_key: str | None = None
    engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S
    agents_cache: Path | None = None
    stitch: bool = True
    capture: CaptureLevel = "tokens"  # below `tokens`: an evaluation (capture_level.py)
    engine_kind: EngineChoice = "auto"  # which engine the URL is (engine_adapter.py)
    upstream: UpstreamName = "openai-chat"  # the API behind the proxy (upstream_profile.py)
    upstream_key_file: Path | None = None  # its credential's file (never the key itself)
    # Run tasks that need their own image on the host's userland when the sandbox cannot
    # build it (environment_need.py); every such row says `host_override`.
    host_userland: bool = False


@dataclass(frozen=True)
class CheckedStart:
    wants_model: bool  # whether the agent calls a model (else no engine, no proxy)
    tasks: list[TaskRef]
    # Why the sandbox must not run some of `tasks` (their environment), one line each:
    # `rollout` refuses to start, a sweep makes each an `environment_unsupported` row.
    refused: list[str] = field(default_factory=list)


def tasks_of(dataset: str, names: Sequence[str] | None, progress: Progress) -> list[TaskRef]:
    """The dataset's tasks named (all of them when None); each task it holds that cannot
    run is reported to `progress` and left out."""
    report = resolve_dataset(dataset)
    for problem in report.problems:
        progress(f"skipped task {problem.name}: {problem.reason}")
    return select_tasks(report, names)


def checked_start(request: RunRequest, progress: Progress) -> CheckedStart:
    """What a rollout or a sweep checks before starting anything."""
    wants_model = needs_model(request.agent)
    if request.llm_url is not None and request.engine is not None:
        raise StartError("give --llm-url or --engine, not both")
    if (
        wants_model
        and request.llm_url is None
        and request.engine is None
        and PROFILES[request.upstream].default_url is None
    ):
        raise StartError(
            f"agent {request.agent!r} calls a model: pass --llm-url, or "
            "--engine to start one (there is no default engine)"
        )
    chosen = tasks_of(request.dataset, request.tasks, progress)
    check_sandbox(request.sandbox, request.sandbox_kwargs)
    return CheckedStart(
        wants_model,
        chosen,
        environment_refusals(chosen, request.sandbox, host_userland=request.host_userland),
    )


def environment_refusals(
    tasks: Sequence[TaskRef], sandbox: str, *, host_userland: bool
) -> list[str]:
    """Why `sandbox` must not run each task it cannot give its environment."""
    provides = provides_task_image(sandbox)
    return [
        reason
        for task in tasks
        if (
            reason := refusal(
                task.environment,
                task=task.name,
                sandbox=sandbox,
                provides_image=provides,
                host_userland=host_userland,
            )
        )
        is not None
    ]


def specs_of(
    request: RunRequest,
    tasks: Sequence[TaskRef],
    *,
    trials_dir: Path,
    run_id: str | None = None,
    engine: Provenance | None = None,
) -> list[RolloutSpec]:
    """The request's rollouts: tasks x attempts, in task order then attempt order;
    `engine`: what the engine serves, for every row's provenance (None: unknown)."""
    return make_specs(
        tasks,
        request.attempts,
        agent=request.agent,
        sandbox=request.sandbox,
        trials_dir=trials_dir,
        sampling=sampling_of(request.temperature, request.max_tokens),
        budget=request.budget,
        deadline_s=request.deadline_s,
        reward_key=request.reward_key,
        sandbox_kwargs=dict(request.sandbox_kwargs),
        run_id=run_id,
        agents_cache=request.agents_cache and request.agents_cache.resolve(),
        host_userland=request.host_userland,
        engine=engine,
    )


def check_sandbox(sandbox: str, sandbox_kwargs: Mapping[str, Any]) -> None:
    """Raise a StartError saying why this machine cannot run the sandbox backend."""
    status = check_backend(sandbox, dict(sandbox_kwargs))
    if not status.usable:
        raise StartError(f"sandbox {sandbox!r} is not usable here: {status.reason}")


def sampling_of(temperature: float | None, max_tokens: int | None) -> Sampling | None:
    """The sampling a job imposes on every model call; None: the agent's own."""
    if temperature is None and max_tokens is None:
        return None
    return Sampling(temperature=temperature, max_tokens=max_tokens)
