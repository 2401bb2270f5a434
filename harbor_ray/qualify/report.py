"""The qualification report: a row per (agent, profile, task), its verdict, JSON and
markdown. Pure.

Two levels. `scripted`: the scripted engine plays a model that solves the task by its
solution commands, so every qualified agent must score 1.0 in one agent root (side calls
apart), with no retokenization split, the recorded ids exactly the engine's, and no 4xx
from the proxy. `model`: a real model, which may well fail the task; the agent must
still be captured (at least one turn) without an infrastructure error, and the capture
must hold at both levels: one agent root (but for an agent in `REWRITES_HISTORY`, at
the levels it names), no split, the engine's exact ids, no 4xx.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from harbor_ray.capture.proxy.engine_adapter import EngineKind
from harbor_ray.data.result import ErrorType, Provenance

__all__ = [
    "INFRASTRUCTURE",
    "REPORT_VERSION",
    "REWRITES_HISTORY",
    "HarnessRow",
    "Level",
    "QualifyReport",
    "QualifyRow",
    "Rewrite",
    "problems",
    "render_markdown",
]

# Bumped whenever a field's meaning changes, or a field is added. 2: `harnesses`; 3: a
# row's `profile`; 4: a harness's `level_2`; 5: a harness's `level_2_reason`.
REPORT_VERSION = 6

Level = Literal["scripted", "model"]

# Errors that say the stack failed, not the model: at level `model` none may appear.
INFRASTRUCTURE = frozenset(
    {
        ErrorType.TASK_INVALID,
        ErrorType.SANDBOX_START,
        ErrorType.AGENT_SETUP,
        ErrorType.ENGINE_ERROR,
        ErrorType.CAPTURE_INVALID,
        ErrorType.NO_MODEL_CALLS,
        ErrorType.INFRA_LOST,
        ErrorType.INTERNAL,
        ErrorType.VERIFIER_ERROR,
        ErrorType.VERIFIER_MISSING,
    }
)


@dataclass(frozen=True)
class Rewrite:
    """How an agent rewrites its history, and at which levels that is seen."""

    how: str
    # "model": only a real model's answers make it rewrite; "scripted" too: the scripted
    # model's answers, which solve the task as designed, already do.
    levels: frozenset[Level] = frozenset({"model"})


# Agents whose next request may not carry what came before it as it was sent, so that a
# call starts a new agent root without any split: at the levels named they may have
# several roots (never a split, never 0 roots). Every other agent must have exactly one.
REWRITES_HISTORY: Mapping[str, Rewrite] = MappingProxyType(
    {
        "mini-swe-agent": Rewrite(
            "a reply without a tool call is a format error to it: the reply is left out of "
            "the history it sends next, which starts a new root"
        ),
        "aider": Rewrite(
            "it rebuilds every request from its parts: system prompt, repository map, the "
            "files in its chat, then the conversation; when a reply edits a file of the "
            "repository that is not in the chat (greet-function's greet.sh), it adds the "
            "file (--yes) and asks again, so the file's content now stands ahead of the "
            "conversation and the request starts a new root (hello-file, whose file is new, "
            "keeps one)",
            levels=frozenset({"scripted", "model"}),
        ),
        "fabric": Rewrite(
            "it runs mini-swe-agent (its nvidia.fabric.mini-swe-agent adapter), which leaves a "
            "reply without a tool call out of the history it sends next, as mini-swe-agent "
            "does"
        ),
        "vibe": Rewrite(
            "a reply cut at the output-token limit is discarded: vibe asks again with a note "
            "that its previous response was discarded, which starts a new root"
        ),
        "cline-cli": Rewrite(
            "a reply cut at the output-token limit is compacted: cline drops it, adds a note "
            "that the reply was cut, and asks again, which starts a new root"
        ),
    }
)


class QualifyRow(BaseModel):
    """One agent, speaking one profile, on one task, as qualification saw it."""

    model_config = ConfigDict(extra="forbid")

    agent: str
    profile: str | None = Field(
        default=None,
        description="The profile (dialect) the agent was wired to speak; None: it calls no model.",
    )
    version: str = Field(description="The pinned CLI release; Harbor's for terminus-2.")
    dialect: str | None
    streaming: str = Field(
        description="yes, no or mixed: whether the model calls' "
        "answers were SSE streams; - without any."
    )
    task: str
    row_ok: bool = Field(description="The rollout row's `ok` (trainable, no error).")
    turns: int
    agent_roots: int
    auxiliary_turns: int
    splits: int = Field(description="retokenization_split findings.")
    stitched: int = Field(description="Turns whose prompt was stitched from earlier ids.")
    reward: float | None
    proxy_4xx: int = Field(
        description="4xx HTTP answers the proxy gave the agent, the "
        "websocket upgrade refusal (426) apart; an error "
        "event in a stream already begun is not one."
    )
    refusals: list[str] = Field(
        default_factory=list, description="Every 4xx answer: METHOD path status."
    )
    exact_ids: bool | None = Field(
        description="Every turn's stored prompt and sampled ids are those the engine "
        "returned for its own call, as many turns as generations; None: no "
        "turn."
    )
    error_type: str | None = None
    error: str | None = None
    seconds: float = 0.0
    qualified: bool = False
    why: list[str] = Field(default_factory=list, description="What failed the row.")
    provenance: Provenance | None = Field(
        None,
        description="What the row was made with, as a dataset's rows say it "
        "(SCHEMA.md, `provenance`): the harness as run (its profile and keyword "
        "arguments), and the engine's files where the run started the engine (`--engine` "
        "YAML); none of the engine's at the scripted level or against `--llm-url`. None "
        "before report v6.",
    )


class HarnessRow(BaseModel):
    """One harness Harbor knows: qualified, or why not (qualify/harnesses.py)."""

    model_config = ConfigDict(extra="forbid")

    name: str
    qualified: bool
    reason: str = Field(description="Why it is not qualified; empty when it is.")
    level_2: bool = Field(
        False,
        description="Also seen to qualify at level 2 (the real model); false before report v4.",
    )
    level_2_reason: str = Field(
        "",
        description="Why a harness qualified at level 1 "
        "cannot qualify at level 2 here, where that was tried; "
        "empty before report v5.",
    )


class QualifyReport(BaseModel):
    """A qualification run: what ran it, against what, and its rows."""

    model_config = ConfigDict(extra="forbid")

    report_version: int = REPORT_VERSION
    level: Level
    engine: str = Field(description="`scripted`, or the served model id.")
    engine_kind: EngineKind | None = Field(
        None,
        description="The certified engine's kind (level 2): `vllm` or `sglang`; "
        "None at the scripted level, and in reports from before it was recorded.",
    )
    harbor_ray: str
    harbor: str
    started_at: str
    rows: list[QualifyRow]
    harnesses: list[HarnessRow] = Field(
        default_factory=list,
        description="Every harness Harbor knows, qualified or why not; empty in a v1 report.",
    )

    @property
    def qualified(self) -> bool:
        return bool(self.rows) and all(row.qualified for row in self.rows)


def problems(row: QualifyRow, level: Level) -> list[str]:
    """Why `row` does not qualify at `level` (empty: it does)."""
    found: list[str] = []
    if row.error_type is not None and (
        level == "scripted" or ErrorType(row.error_type) in INFRASTRUCTURE
    ):
        found.append(f"{row.error_type}: {row.error}")
    if row.turns == 0:
        found.append("no captured turn")
    if level == "scripted":
        if row.reward != 1.0:
            found.append(f"reward {row.reward}, not 1.0")
        if not row.row_ok:
            found.append("row not ok")
    rewrite = REWRITES_HISTORY.get(row.agent)
    if (
        row.turns
        and row.agent_roots != 1
        and not (row.agent_roots > 1 and rewrite is not None and level in rewrite.levels)
    ):
        found.append(f"{row.agent_roots} agent roots, not 1")
    if row.splits:
        found.append(f"{row.splits} retokenization splits")
    if row.exact_ids is False:
        found.append("stored ids differ from the engine's")
    if row.proxy_4xx:
        found.append(f"{row.proxy_4xx} proxy 4xx: {', '.join(row.refusals)}")
    return found


_COLUMNS = (
    "agent",
    "profile",
    "version",
    "dialect",
    "streaming",
    "task",
    "row ok",
    "turns",
    "agent roots",
    "splits",
    "stitched",
    "reward",
    "proxy 4xx",
    "qualified",
)


def render_markdown(report: QualifyReport) -> str:
    """The report as a markdown table, with what failed each unqualified row below it."""
    kind = f" on {report.engine_kind}" if report.engine_kind else ""
    lines = [
        f"Qualification ({report.level}: {report.engine}{kind}; harbor_ray "
        f"{report.harbor_ray}, Harbor {report.harbor}; report v{report.report_version},"
        f" {report.started_at})",
        "",
        "| " + " | ".join(_COLUMNS) + " |",
        "|" + "---|" * len(_COLUMNS),
    ]
    lines += ["| " + " | ".join(_cells(row)) + " |" for row in report.rows]
    cells = {(row.agent, row.profile) for row in report.rows}
    failing = {(row.agent, row.profile) for row in report.rows if not row.qualified}
    lines += [
        "",
        f"{sum(row.qualified for row in report.rows)} of {len(report.rows)} rows "
        f"qualified; {len(cells - failing)} of {len(cells)} (agent, profile) "
        "cells on every task.",
    ]
    rewriters = sorted({row.agent for row in report.rows if row.qualified and row.agent_roots > 1})
    if rewriters:
        lines += [
            "",
            "Several agent roots, allowed for an agent that rewrites its history "
            "(REWRITES_HISTORY):",
            "",
        ]
        lines += [f"- {agent}: {REWRITES_HISTORY[agent].how}" for agent in rewriters]
    failed = [row for row in report.rows if not row.qualified]
    if failed:
        lines.append("")
        lines += [
            f"- {row.agent} ({row.profile or '-'}) on {row.task}: {'; '.join(row.why)}"
            for row in failed
        ]
    if report.harnesses:
        lines += ["", *_harness_section(report)]
    return "\n".join(lines) + "\n"


def _harness_section(report: QualifyReport) -> list[str]:
    """Counts, then every harness Harbor knows that is not qualified, with its reason."""
    qualified = sum(1 for h in report.harnesses if h.qualified)
    level_2 = sum(1 for h in report.harnesses if h.qualified and h.level_2)
    lines = [
        f"Harnesses: Harbor {report.harbor} knows {len(report.harnesses)}; "
        f"qualified at level 1 (scripted): {qualified}, at level 2 (model): "
        f"{level_2}.",
        "",
        "Not qualified:",
        "",
    ]
    lines += [f"- {h.name}: {h.reason}" for h in report.harnesses if not h.qualified]
    blocked = [h for h in report.harnesses if h.qualified and h.level_2_reason]
    if blocked:
        lines += [
            "",
            "Qualified at level 1, not at level 2:",
            "",
            *(f"- {h.name}: {h.level_2_reason}" for h in blocked),
        ]
    return lines


def _cells(row: QualifyRow) -> Sequence[str]:
    return (
        row.agent,
        row.profile or "-",
        row.version,
        row.dialect or "-",
        row.streaming,
        row.task,
        _yes(row.row_ok),
        str(row.turns),
        str(row.agent_roots),
        str(row.splits),
        str(row.stitched),
        "-" if row.reward is None else f"{row.reward:g}",
        str(row.proxy_4xx),
        _yes(row.qualified),
    )


def _yes(value: bool) -> str:
    return "yes" if value else "no"
