"""Running qualification: each agent on each task, in the local sandbox, into a report.

Each rollout is `harbor-ray rollout`'s (run_rollout, the in-process capture proxy, no
Ray), with a proxy of its own, so that what the proxy answered and what the engine
generated while it ran belong to it alone (the taps). The scripted level gives each
rollout its own scripted engine too (its replies depend on the agent and the task); the
model level shares one engine, certified once.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import importlib.metadata
import time
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import orjson

from harbor_ray.capture.core.detect import detect
from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.engine_adapter import EngineChoice, EngineKind, adapt_engine
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.local import LocalCapture, serve_capture
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.upstream import Engine
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.rebuild import export_document
from harbor_ray.data.result import ErrorType, Provenance
from harbor_ray.errors import DatasetError
from harbor_ray.qualify.harnesses import QUALIFIED, harbor_harnesses, harness_table
from harbor_ray.qualify.report import (
    HarnessRow,
    Level,
    QualifyReport,
    QualifyRow,
    problems,
    render_markdown,
)
from harbor_ray.qualify.script import scripted_engine
from harbor_ray.qualify.taps import Answer, EngineTap, Generation, ProxyTap
from harbor_ray.trials.agent_pins import PINS
from harbor_ray.trials.backends import LOCAL
from harbor_ray.trials.datasets import TaskRef
from harbor_ray.trials.harness import harness_provenance
from harbor_ray.trials.installs import DEFAULT_CACHE, entry_dir
from harbor_ray.trials.local_run import all_unwound
from harbor_ray.trials.rollout import run_rollout
from harbor_ray.trials.spec import RolloutSpec

__all__ = [
    "QUALIFIED",
    "Cell",
    "QualifyPlan",
    "default_agents",
    "qualify",
    "report_paths",
    "unplayable_row",
]

_UPGRADE_REFUSED = 426
SCRIPTED_MODEL = FakeEngine.model

# At the model level, agent options that keep a CLI's first prompt inside the default
# model's 8192-token context: as they ship, the tools codex, claude-code, gemini-cli,
# copilot-cli and qwen-code declare (rendered by the served template), and qwen-code's
# system prompt, take it past that before the task is read.
# Each keeps the agent's shell tool; the scripted level runs the CLIs as they ship.
_CLAUDE_TOOLS_BUT_BASH = (
    "Agent,CronCreate,CronDelete,CronList,Edit,EnterWorktree,ExitWorktree,NotebookEdit,"
    "Read,ReportFindings,ScheduleWakeup,SendMessage,Skill,TaskCreate,TaskGet,TaskList,"
    "TaskOutput,TaskStop,TaskUpdate,WebFetch,WebSearch,Workflow,Write"
)
SMALL_CONTEXT_KWARGS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "codex": {
            "config": {
                "web_search": "disabled",
                "features": {
                    "multi_agent": False,
                    "goals": False,
                    "view_image": False,
                    "image_generation": False,
                },
            }
        },
        "claude-code": {"disallowed_tools": _CLAUDE_TOOLS_BUT_BASH},
        # Its system prompt alone is about 6,800 tokens; its shell tool fits beside it.
        "gemini-cli": {"core_tools": ["run_shell_command"]},
        # As it ships it declares about 35,000 bytes of tools.
        "copilot-cli": {"available_tools": ["bash"]},
        # Its system prompt alone is past 8,700 tokens: a short one in its place.
        "qwen-coder": {
            "config": {"tools": {"core": ["run_shell_command"]}},
            "system_prompt": "You are a coding agent in a Linux shell. Complete the "
            "user's task by running commands with the "
            "run_shell_command tool, then say briefly what you did.",
        },
        # Its tools and system prompt as it ships come to about 8,500 tokens. Its unified
        # harness keeps its core tools whatever enabled_tools says, but drops the prompt's
        # sections on background processes, subagents and the project.
        "vibe": {
            "settings": {
                "enabled_tools": ["bash"],
                "enable_background_processes": False,
                "enable_subagents": False,
                "include_project_context": False,
                "include_prompt_detail": False,
            }
        },
        # As it ships its first request is about 14,500 tokens: a system prompt of 47,000
        # characters (deferred tool schemas, skills, and the workspace files it writes and
        # injects) beside eleven tools. Its exec tool alone, no tool search, no skills, and
        # no workspace files.
        "openclaw": {
            "openclaw_config": {
                "tools": {"allow": ["exec"], "toolSearch": False},
                "agents": {
                    "defaults": {"skipBootstrap": True, "contextInjection": "never", "skills": []}
                },
            }
        },
        # As it ships its first request is about 22,400 tokens, most of it 26 tools: an
        # agent of its own with the Bash tool alone, no subagents, and a short prompt.
        "kimi-code": {
            "agent_file": "---\nname: shell\ndescription: A coding agent that works "
            "through its shell.\ntools: Bash\nsubagents: []\n---\n"
            "You are a coding agent in a Linux shell. Complete the user's "
            "task by running commands with the Bash tool, then say "
            "briefly what you did.\n"
        },
    }
)


# Agent kwargs at both levels: the project Harbor's langgraph harness runs (it runs a
# user's own LangGraph project; this one, shipped with harbor_ray, has one agent with a
# shell tool, built the way Harbor's runner documents: samples/langgraph/agent.py).
LANGGRAPH_SAMPLE = Path(__file__).resolve().parents[1] / "samples" / "langgraph"
QUALIFY_KWARGS: Mapping[str, Mapping[str, Any]] = MappingProxyType(
    {
        "langgraph": {"project_path": str(LANGGRAPH_SAMPLE)},
    }
)


# One agent speaking one profile (None: an agent without a model, or not wired).
Cell = tuple[str, str | None]


@dataclass(frozen=True)
class QualifyPlan:
    cells: tuple[Cell, ...]  # (agent, profile), each run on every task
    tasks: tuple[TaskRef, ...]
    out: Path
    agents_cache: Path = DEFAULT_CACHE
    budget: int | None = 20
    deadline_s: float | None = 600.0
    sampling: Sampling | None = None
    sandbox_kwargs: dict[str, Any] = field(default_factory=dict)
    concurrency: int = 1  # rollouts at once (each has its own proxy and taps)
    sandbox: str = LOCAL  # harbor_ray's own: `local`, or `container` (the task's image)


def default_agents(cache: Path) -> tuple[list[str], list[str]]:
    """(qualified agents that can run here, pinned ones missing from `cache`)."""
    missing = [a for a in QUALIFIED if a in PINS and not entry_dir(cache, PINS[a]).is_dir()]
    return [a for a in QUALIFIED if a not in missing], missing


def report_paths(out: Path, level: Level) -> tuple[Path, Path]:
    """Where a level's report goes: (JSON, markdown)."""
    return out / f"qualification-{level}.json", out / f"qualification-{level}.md"


async def qualify(
    plan: QualifyPlan,
    *,
    level: Level,
    engine: Engine | None = None,
    url: str = "",
    model: str | None = None,
    on_row: Callable[[QualifyRow], None] | None = None,
    engine_kind: EngineChoice = "auto",
    engine_provenance: Provenance | None = None,
) -> QualifyReport:
    """Run the plan at `level` (`model` needs `engine`, at `url`, behind the adapter for
    `engine_kind`) and write its report. Rows are in plan order (cells, then tasks),
    whatever order they finish in. `engine_provenance`: what the engine serves, where the run
    started it (the engine's half of every row's provenance; None: unknown)."""
    started = datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds")
    model_engine = None
    kind: EngineKind | None = None
    stitch = True
    if level == "model":
        assert engine is not None, "the model level needs an engine"
        adapted = await adapt_engine(engine, engine_kind)
        model_engine, kind, stitch = adapted.engine, adapted.kind, adapted.stitch
        certification = await certify(model_engine, url, model=model, engine_kind=kind)
        served, logprobs_mode = certification.served_model, certification.logprobs_mode
    gate = asyncio.Semaphore(plan.concurrency)

    async def one(agent: str, profile: str | None, task: TaskRef) -> QualifyRow:
        kwargs = _agent_kwargs(agent, level)
        provenance = harness_provenance(agent, profile=profile, agent_kwargs=kwargs).with_engine(
            engine_provenance
        )
        async with gate:
            scripted = level == "scripted"
            try:
                # Off the loop: the script's cuts and aider's edits run bash (solution.py).
                played = EngineTap(
                    model_engine
                    if model_engine is not None
                    else await asyncio.to_thread(scripted_engine, agent, task.path, task.workdir)
                )
            except DatasetError as error:  # this agent cannot be played this solution
                row = unplayable_row(agent, profile, task.name, str(error), provenance)
            else:
                async with _capture(
                    played,
                    SCRIPTED_MODEL if scripted else served,
                    None if scripted else logprobs_mode,
                    stitch,
                ) as (capture, answers):
                    row = await _qualify_one(
                        plan,
                        level,
                        (agent, profile),
                        task,
                        capture,
                        answers,
                        played,
                        kwargs,
                        provenance,
                    )
        if on_row is not None:
            on_row(row)
        return row

    rows = await all_unwound(one(a, p, t) for a, p in plan.cells for t in plan.tasks)
    report = QualifyReport(
        level=level,
        engine="scripted" if level == "scripted" else served,
        engine_kind=kind,
        harbor_ray=_version("harbor-ray"),
        harbor=_version("harbor"),
        started_at=started,
        rows=list(rows),
        harnesses=[HarnessRow(**asdict(h)) for h in harness_table(harbor_harnesses())],
    )
    plan.out.mkdir(parents=True, exist_ok=True)
    json_path, md_path = report_paths(plan.out, level)
    json_path.write_text(report.model_dump_json(indent=2) + "\n")
    md_path.write_text(render_markdown(report))
    return report


@contextlib.asynccontextmanager
async def _capture(
    engine: EngineTap, served_model: str, logprobs_mode: str | None, stitch: bool
) -> AsyncIterator[tuple[LocalCapture, ProxyTap]]:
    """A proxy of its own for one rollout (so that what it answered and what the engine
    generated belong to that rollout alone), with its taps."""
    taps: list[ProxyTap] = []

    def wrap(app: Any) -> Any:
        taps.append(ProxyTap(app))
        return taps[0]

    async with serve_capture(
        InMemorySessionStore(),
        engine,
        served_model,
        wrap=wrap,
        logprobs_mode=logprobs_mode,
        stitch=stitch,
    ) as capture:
        taps[0].answers.clear()  # the server's readiness probe
        yield capture, taps[0]


async def _qualify_one(
    plan: QualifyPlan,
    level: Level,
    cell: Cell,
    task: TaskRef,
    capture: LocalCapture,
    proxy_tap: ProxyTap,
    engine_tap: EngineTap,
    agent_kwargs: dict[str, Any],
    provenance: Provenance,
) -> QualifyRow:
    agent, profile = cell
    stamp = time.strftime("%Y%m%d-%H%M%S")
    spec = RolloutSpec(
        rollout_id=f"{agent}__{profile}__{task.name}__{level}__{stamp}",
        task=task,
        agent=agent,
        profile=profile,
        sandbox=plan.sandbox,
        trials_dir=plan.out / "trials",
        budget=plan.budget,
        deadline_s=plan.deadline_s,
        sampling=plan.sampling,
        agents_cache=plan.agents_cache,
        agent_kwargs=agent_kwargs,
        sandbox_kwargs={"sandboxes_dir": str(plan.out / "sandboxes"), **plan.sandbox_kwargs},
        provenance=provenance,
    )
    record = await run_rollout(spec, capture)
    row = row_of(agent, record, proxy_tap.answers, engine_tap.generations)
    why = problems(row, level)
    return row.model_copy(update={"profile": profile, "qualified": not why, "why": why})


def _agent_kwargs(agent: str, level: Level) -> dict[str, Any]:
    """The keyword arguments `agent` runs with at `level` (a copy of its own)."""
    return copy.deepcopy(
        {
            **QUALIFY_KWARGS.get(agent, {}),
            **(SMALL_CONTEXT_KWARGS.get(agent, {}) if level == "model" else {}),
        }
    )


def unplayable_row(
    agent: str, profile: str | None, task: str, why: str, provenance: Provenance | None = None
) -> QualifyRow:
    """The row of a cell whose scripted engine cannot play the task's solution (the
    reason from solution.py): not qualified, nothing run."""
    row = QualifyRow(
        agent=agent,
        profile=profile,
        version=_agent_version(agent),
        dialect=None,
        streaming="-",
        task=task,
        row_ok=False,
        turns=0,
        agent_roots=0,
        auxiliary_turns=0,
        splits=0,
        stitched=0,
        reward=None,
        proxy_4xx=0,
        exact_ids=None,
        error_type=ErrorType.TASK_INVALID.value,
        error=f"the scripted engine cannot play this solution: {why}",
        provenance=provenance,
    )
    return row.model_copy(update={"why": problems(row, "scripted")})


def _agent_version(agent: str) -> str:
    return PINS[agent].version if agent in PINS else _version("harbor")


def row_of(
    agent: str, record: RolloutRecord, answers: Sequence[Answer], generations: Sequence[Generation]
) -> QualifyRow:
    """The report's row of one finished rollout, what the proxy answered during it, and
    what the engine generated."""
    result, doc = record.result, export_document(record)
    turns = doc["turns"] if doc is not None else []  # None: the rollout had no capture
    calls = [a for a in answers if a.path.startswith(("/v1/", "/v1beta/")) and a.status < 400]
    streamed = {a.streamed for a in calls}
    refusals = [f"{a.method} {a.path} {a.status}" for a in answers if 400 <= a.status < 500]
    return QualifyRow(
        agent=agent,
        version=_agent_version(agent),
        dialect=_dialect(calls),
        streaming="-"
        if not streamed
        else "mixed"
        if len(streamed) > 1
        else ("yes" if streamed == {True} else "no"),
        task=result.task,
        row_ok=result.ok,
        turns=len(turns),
        agent_roots=result.counts.agent_roots if result.counts else 0,
        auxiliary_turns=sum(1 for t in turns if t["auxiliary"]),
        splits=sum(1 for f in result.findings if f.code == "retokenization_split"),
        stitched=sum(1 for t in turns if (t["continuation"] or {}).get("stitched")),
        reward=result.reward,
        proxy_4xx=sum(1 for a in answers if 400 <= a.status < 500 and a.status != _UPGRADE_REFUSED),
        refusals=refusals,
        exact_ids=_exact_ids(turns, generations),
        error_type=result.error_type.value if result.error_type else None,
        error=result.error,
        seconds=round(result.timings.get("total", 0.0), 1),
        provenance=result.provenance,
    )


def _dialect(calls: Sequence[Answer]) -> str | None:
    """The dialect(s) of the model calls the proxy answered, by their routes (what the
    agent really spoke, not what its configuration says): `a+b` for several."""
    routes = (detect(a.path, {}, {}) for a in calls)
    spoken = sorted({r.dialect for r in routes if r is not None and r.kind == "generate"})
    return "+".join(spoken) or None


def _exact_ids(turns: Sequence[dict[str, Any]], generations: Sequence[Generation]) -> bool | None:
    """Whether each turn, by index, stores exactly the ids the engine generated for its
    own call (the generation for the same request messages, the earliest unpaired one
    among identical requests), with a generation for every turn and none left over.
    Paired per call, not compared as a whole: ids swapped between two calls are not
    exact. None: no turn."""
    if not turns:
        return None
    unpaired = list(generations)
    for turn in sorted(turns, key=lambda t: t["index"]):
        sent = orjson.dumps(turn["request_messages"])
        own = next((g for g in unpaired if g.messages == sent), None)
        if own is None or (own.prompt_ids, own.token_ids) != (
            tuple(turn["prompt_ids"] or ()),
            tuple(turn["token_ids"] or ()),
        ):
            return False
        unpaired.remove(own)
    return not unpaired


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
