"""Cross-check an agent's own record of its model calls (ATIF) against the captured calls.

The capture is the truth that is trained on; the agent's trajectory
(`agent/trajectory.json`, Harbor's ATIF models) is a second, independent witness, so
every disagreement (count, order, token ids) is a WARN finding, never FATAL. What counts
as a call and how order is checked: docs/rollouts.md, "The agent's own record".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

import numpy as np
import orjson
from harbor.models.trajectories.content import ContentPart
from harbor.models.trajectories.step import Step
from harbor.models.trajectories.trajectory import Trajectory
from pydantic import ValidationError

from harbor_ray.capture.core.findings import Severity
from harbor_ray.capture.core.graph import Role
from harbor_ray.capture.core.record import ClosedCapture
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.data.result import FindingRecord

__all__ = ["AtifCode", "cross_check"]

# How many step ids a finding lists before it says "and N more".
_LISTED = 5


class AtifCode(StrEnum):
    """Finding codes of the cross-check. Written to datasets: never rename."""

    ABSENT = "atif_absent"  # INFO: the agent wrote no trajectory
    INVALID = "atif_invalid"  # WARN: the trajectory is not valid ATIF
    CALL_COUNT_MISMATCH = "atif_call_count_mismatch"  # WARN
    ORDER_MISMATCH = "atif_order_mismatch"  # WARN
    TOKEN_MISMATCH = "atif_token_mismatch"  # WARN
    ORDER_UNCHECKED = "atif_order_unchecked"  # INFO: nothing allowed the order to be checked


@dataclass(frozen=True)
class _Call:
    """One model call as either side records it. `where` is a step id or a turn index."""

    where: int
    text: str  # whitespace-normalised reply text; "" when there is none
    prompt_ids: tuple[int, ...] | None
    completion_ids: tuple[int, ...] | None

    @property
    def has_tokens(self) -> bool:
        return self.prompt_ids is not None or self.completion_ids is not None


def cross_check(
    trajectory: Trajectory | Mapping[str, Any] | None, capture: ClosedCapture
) -> list[FindingRecord]:
    """Findings from comparing `trajectory` with the captured session."""
    if trajectory is None:
        return [_finding(AtifCode.ABSENT, Severity.INFO, "the agent wrote no ATIF trajectory")]
    try:
        parsed = (
            trajectory
            if isinstance(trajectory, Trajectory)
            else Trajectory.model_validate(trajectory)
        )
    except ValidationError as exc:
        return [_invalid(exc)]
    roles = [(turn, capture.graph.nodes[turn.index].role) for turn in capture.turns]
    agent_turns = [_turn_call(turn) for turn, role in roles if role is Role.AGENT]
    auxiliary = sum(1 for _, role in roles if role is Role.AUXILIARY)
    steps = _model_steps(parsed)
    findings = _count_findings(
        parsed, steps, len(agent_turns), auxiliary, capture.counts.budget_stops
    )
    if all((step.llm_call_count or 1) == 1 for step in steps):
        findings += _order_findings([_step_call(s) for s in steps], agent_turns)
    else:
        findings.append(
            _finding(
                AtifCode.ORDER_UNCHECKED,
                Severity.INFO,
                "a step stands for several model calls, so steps cannot be paired with "
                "captured calls; the order of calls was not checked",
            )
        )
    return findings


def _invalid(exc: ValidationError) -> FindingRecord:
    first = exc.errors()[0]
    loc = ".".join(str(part) for part in first["loc"])
    problem = f"{loc}: {first['msg']}" if loc else first["msg"]
    more = exc.error_count() - 1
    if more:
        problem += f" (and {more} more problems)"
    return _finding(
        AtifCode.INVALID, Severity.WARN, f"the agent's trajectory is not valid ATIF: {problem}"
    )


def _model_steps(trajectory: Trajectory) -> list[Step]:
    return [
        step
        for step in trajectory.steps
        if step.source == "agent" and not step.is_copied_context and step.llm_call_count != 0
    ]


def _call_count(steps: Sequence[Step]) -> int:
    return sum(step.llm_call_count or 1 for step in steps)


def _embedded_calls(trajectory: Trajectory) -> int:
    return sum(
        _call_count(_model_steps(sub)) + _embedded_calls(sub)
        for sub in trajectory.subagent_trajectories or []
    )


def _subagent_files(trajectory: Trajectory) -> int:
    """Subagent trajectories referenced by path rather than embedded."""
    return sum(
        1
        for step in trajectory.steps
        if step.observation is not None
        for result in step.observation.results
        for ref in result.subagent_trajectory_ref or []
        if ref.trajectory_path is not None
    )


def _count_findings(
    trajectory: Trajectory,
    steps: Sequence[Step],
    agent_turns: int,
    auxiliary: int,
    budget_stops: int,
) -> list[FindingRecord]:
    findings = []
    recorded = _call_count(steps)
    # A call answered with the budget stop reached the agent as a reply, which its
    # trajectory may record as a step (terminus-2 does), but it is no model turn.
    if not agent_turns <= recorded <= agent_turns + budget_stops:
        message = (
            f"the agent's trajectory records {recorded} model calls, "
            f"the capture holds {agent_turns} agent calls"
        )
        if budget_stops:
            message += f" and {budget_stops} answered with the budget stop"
        files = _subagent_files(trajectory)
        if files:
            message += (
                f"; {files} subagent trajectories are stored in separate files, and their "
                "calls count as agent calls unless the capture marked them auxiliary"
            )
        findings.append(_finding(AtifCode.CALL_COUNT_MISMATCH, Severity.WARN, message))
    if trajectory.subagent_trajectories:
        embedded = _embedded_calls(trajectory)
        if embedded != auxiliary:
            findings.append(
                _finding(
                    AtifCode.CALL_COUNT_MISMATCH,
                    Severity.WARN,
                    f"the agent's subagents record {embedded} model calls, "
                    f"the capture holds {auxiliary} auxiliary calls",
                )
            )
    return findings


def _order_findings(steps: Sequence[_Call], turns: Sequence[_Call]) -> list[FindingRecord]:
    """Walk the steps against the captured calls (docs/rollouts.md, "The agent's own record")."""
    position = 0
    evidenced = 0
    misplaced: list[tuple[_Call, _Call]] = []  # (step, the earlier turn it matches)
    unmatched: list[tuple[_Call, _Call | None]] = []  # (step, the turn in its place)
    for step in steps:
        matches = [i for i, turn in enumerate(turns) if _agrees(step, turn)]
        ahead = [i for i in matches if i >= position]
        if ahead:
            position = ahead[0] + 1
        elif matches:
            misplaced.append((step, turns[matches[0]]))
        elif step.has_tokens:
            unmatched.append((step, turns[position] if position < len(turns) else None))
            position += 1
        else:
            position += 1  # nothing to compare: assume the step is where it should be
            continue
        evidenced += 1

    findings = []
    if misplaced:
        step, earlier = misplaced[0]
        findings.append(
            _finding(
                AtifCode.ORDER_MISMATCH,
                Severity.WARN,
                f"ATIF steps out of the captured order: {_steps(s for s, _ in misplaced)} "
                f"(step {step.where} matches captured turn {earlier.where}, which precedes "
                "the calls matched before it)",
                earlier.where,
            )
        )
    if unmatched:
        step, turn = unmatched[0]
        detail = (
            f"step {step.where} vs captured turn {turn.where}: {_token_difference(step, turn)}"
            if turn is not None
            else f"step {step.where} has no captured turn in its place"
        )
        findings.append(
            _finding(
                AtifCode.TOKEN_MISMATCH,
                Severity.WARN,
                f"ATIF steps whose token ids no captured agent call has: "
                f"{_steps(s for s, _ in unmatched)} ({detail})",
                None if turn is None else turn.where,
            )
        )
    if steps and not evidenced:
        findings.append(
            _finding(
                AtifCode.ORDER_UNCHECKED,
                Severity.INFO,
                "no ATIF step carries token ids or reply text matching a captured call; "
                "the order of calls was not checked",
            )
        )
    return findings


def _agrees(step: _Call, turn: _Call) -> bool:
    if step.has_tokens:
        return (step.prompt_ids is None or step.prompt_ids == turn.prompt_ids) and (
            step.completion_ids is None or step.completion_ids == turn.completion_ids
        )
    return bool(step.text) and step.text == turn.text


def _token_difference(step: _Call, turn: _Call) -> str:
    differ = [
        name
        for name, mine, theirs in (
            ("prompt", step.prompt_ids, turn.prompt_ids),
            ("completion", step.completion_ids, turn.completion_ids),
        )
        if mine is not None and mine != theirs
    ]
    return " and ".join(differ) + " ids differ"


def _step_call(step: Step) -> _Call:
    metrics = step.metrics
    return _Call(
        where=step.step_id,
        text=_step_text(step.message),
        prompt_ids=_ids(metrics.prompt_token_ids if metrics else None),
        completion_ids=_ids(metrics.completion_token_ids if metrics else None),
    )


def _turn_call(turn: TurnRecord) -> _Call:
    return _Call(
        where=turn.index,
        text=_reply_text(orjson.loads(turn.response_message_json).get("content")),
        prompt_ids=_ids(turn.prompt_ids),
        completion_ids=_ids(turn.token_ids),
    )


def _step_text(message: str | list[ContentPart]) -> str:
    if isinstance(message, str):
        return _normalise(message)
    return _normalise(" ".join(part.text or "" for part in message if part.type == "text"))


def _reply_text(content: Any) -> str:
    # The engine's chat message: text, or null when the reply is only tool calls.
    return _normalise(content) if isinstance(content, str) else ""


def _normalise(text: str) -> str:
    return " ".join(text.split())


def _ids(ids: Sequence[int] | np.ndarray | None) -> tuple[int, ...] | None:
    if isinstance(ids, np.ndarray):
        ids = ids.tolist()  # Python ints: tuples of numpy scalars compare ~10x slower
    return None if ids is None else tuple(ids)


def _steps(steps: Iterable[_Call]) -> str:
    ids = [str(step.where) for step in steps]
    shown = ", ".join(ids[:_LISTED])
    return shown if len(ids) <= _LISTED else f"{shown} and {len(ids) - _LISTED} more"


def _finding(
    code: AtifCode, severity: Severity, message: str, turn: int | None = None
) -> FindingRecord:
    return FindingRecord(code=code, severity=severity, message=message, turn=turn)
