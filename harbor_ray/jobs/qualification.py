"""Qualifying agent CLIs (`harbor-ray qualify`): each agent runs each task in the local
sandbox through the capture proxy, against the scripted engine (level 1) or a real one
(level 2), and the report is written under OUT."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harbor_ray.capture.proxy.engine_adapter import EngineChoice
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.data.result import Provenance
from harbor_ray.errors import EnvironmentUnsupportedError, StartError
from harbor_ray.jobs.engine import started_engine
from harbor_ray.jobs.interrupts import run_until_signalled
from harbor_ray.jobs.runs import (
    Progress,
    check_sandbox,
    environment_refusals,
    sampling_of,
    silent,
    tasks_of,
)
from harbor_ray.qualify.report import Level, QualifyReport, QualifyRow
from harbor_ray.qualify.run import Cell, QualifyPlan, default_agents, qualify
from harbor_ray.trials.agents import check_profile, profiles
from harbor_ray.trials.backends import LOCAL, ON_THIS_NODE
from harbor_ray.trials.installs import DEFAULT_CACHE

__all__ = ["SCRIPTED", "QualifyRequest", "plan_qualify", "run_qualify"]

SCRIPTED = "scripted"  # `engine` of level 1: the scripted engine plays the model
ALL_PROFILES = "all"  # `profiles` entry: every profile each agent is wired to speak


@dataclass(frozen=True)
class QualifyRequest:
    """Which agents to qualify, on what; the fields are `harbor-ray qualify`'s flags."""

    agents: Sequence[str] = ()  # empty: every qualified agent installed here
    profiles: Sequence[str] = ()  # empty: each agent's default; or names, or "all"
    engine: str = SCRIPTED  # or a Serve YAML started for the run (level 2)
    llm_url: str | None = None  # level 2 against an engine already running
    model: str | None = None
    tasks: Sequence[str] = ("hello-file",)
    dataset: str = "samples"
    budget: int | None = 20
    max_tokens: int | None = None  # level 2's cap per model call (None: 256)
    deadline_s: float = 600.0
    concurrency: int = 1
    out: Path = Path("qualify")
    agents_cache: Path | None = None
    engine_kind: EngineChoice = "auto"  # which engine the URL is (engine_adapter.py)
    # harbor_ray's own sandboxes only: an agent CLI from the host's cache runs inside.
    sandbox: str = LOCAL
    sandbox_kwargs: Mapping[str, Any] = field(default_factory=dict)

    @property
    def level(self) -> Level:
        return "scripted" if self.engine == SCRIPTED and self.llm_url is None else "model"


def plan_qualify(request: QualifyRequest, progress: Progress = silent) -> QualifyPlan:
    """The agents and tasks to qualify; raises before anything starts when the request
    cannot work (an agent skipped for not being installed is told to `progress`)."""
    if request.llm_url is not None and request.engine != SCRIPTED:
        raise StartError("give --llm-url or --engine YAML, not both")
    cache = (request.agents_cache or DEFAULT_CACHE).resolve()
    agents = list(request.agents)
    if not agents:
        agents, missing = default_agents(cache)
        for name in missing:
            progress(f"skipped {name}: not installed (run `harbor-ray agents install {name}`)")
    # An unknown name or an unsupported profile fails here, before anything starts.
    cells = [cell for name in agents for cell in _cells(name, request.profiles)]
    tasks = tasks_of(request.dataset, request.tasks, progress)
    if request.sandbox not in ON_THIS_NODE:
        raise StartError(
            f"qualify runs in harbor_ray's own sandboxes "
            f"({', '.join(sorted(ON_THIS_NODE))}), not {request.sandbox!r}"
        )
    check_sandbox(request.sandbox, request.sandbox_kwargs)
    if refused := environment_refusals(tasks, request.sandbox, host_userland=False):
        raise EnvironmentUnsupportedError("\n".join(refused))
    return QualifyPlan(
        cells=tuple(cells),
        tasks=tuple(tasks),
        out=request.out.resolve(),
        agents_cache=cache,
        budget=request.budget,
        deadline_s=request.deadline_s,
        concurrency=request.concurrency,
        sandbox=request.sandbox,
        sandbox_kwargs=dict(request.sandbox_kwargs),
        sampling=(
            None if request.level == "scripted" else sampling_of(None, request.max_tokens or 256)
        ),
    )


def _cells(agent: str, wanted: Sequence[str]) -> list[Cell]:
    """The (agent, profile) cells `wanted` asks of `agent`."""
    has = profiles(agent)
    if not has:  # no model, or not wired: run as it is (its row says why)
        return [(agent, None)]
    if not wanted:
        return [(agent, has[0])]
    if ALL_PROFILES in wanted:
        return [(agent, profile) for profile in has]
    for profile in wanted:
        check_profile(agent, profile)
    return [(agent, profile) for profile in has if profile in wanted]


def run_qualify(
    request: QualifyRequest,
    *,
    progress: Progress = silent,
    on_row: Callable[[QualifyRow], None] | None = None,
    plan: QualifyPlan | None = None,
) -> QualifyReport:
    """Qualify the request's agents and write the report (`report_paths` says where).
    A request that cannot work raises before anything starts; `plan`: its
    `plan_qualify`, when the caller made it already."""
    plan = plan or plan_qualify(request, progress)
    if request.level == "scripted":
        return run_until_signalled(qualify(plan, level="scripted", on_row=on_row))
    config = Path(request.engine) if request.llm_url is None else None
    with started_engine(config, None, progress) as started:
        return run_until_signalled(
            _against(
                plan,
                started.url if started else request.llm_url,
                request.model,
                request.engine_kind,
                on_row,
                started.provenance if started else None,
            )
        )


async def _against(
    plan: QualifyPlan,
    llm_url: str | None,
    model: str | None,
    engine_kind: EngineChoice,
    on_row: Callable[[QualifyRow], None] | None,
    served: Provenance | None,
) -> QualifyReport:
    engine = HttpEngine(llm_url or "")
    try:
        return await qualify(
            plan,
            level="model",
            engine=engine,
            url=engine.root,
            model=model,
            on_row=on_row,
            engine_kind=engine_kind,
            engine_provenance=served,
        )
    finally:
        await engine.aclose()
