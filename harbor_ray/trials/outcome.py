"""What happened to one finished Harbor trial, as plain data in harbor_ray's terms.

This is the edge where Harbor's `TrialResult` is read and left behind: `classify` takes
it (and, optionally, the parsed `reward.json`) and returns an `Outcome` (an `ErrorType`
from the closed set, the verifier's rewards verbatim, seconds per phase), so nothing
past this module touches a Harbor object. No I/O. The order in which a failure is named,
and why: docs/rollouts.md, "The outcome".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import IntEnum
from typing import Any

from harbor.models.agent.context import AgentContext
from harbor.models.trial.error_policy import FailureCause
from harbor.models.trial.result import ExceptionInfo, TrialResult

from harbor_ray.capture.core.findings import Severity
from harbor_ray.data.result import ErrorType, FindingRecord

__all__ = ["TEARDOWN_FAILED", "Outcome", "classify"]

# Finding code for a sandbox that failed to stop after the verifier had graded the run.
TEARDOWN_FAILED = "sandbox_teardown_failed"


@dataclass(frozen=True)
class Outcome:
    """One trial in plain data. `message` is set exactly when `error_type` is.

    `raw_rewards` is the verifier's dict as Harbor (or the refused file) holds it, or None
    when the verifier never produced one; it is forwarded even when `error_type` is set.
    `model_calls_hint` is the agent's own count of its model calls, when it keeps one:
    a cross-check for the capture, never a substitute for it. `findings` are problems
    that leave the row usable (a sandbox that failed to stop after grading).
    """

    error_type: ErrorType | None
    message: str | None
    raw_rewards: dict[str, Any] | None
    timings: dict[str, float] = field(default_factory=dict)
    model_calls_hint: int | None = None
    findings: tuple[FindingRecord, ...] = ()


class _Phase(IntEnum):
    """How far a trial got, in the order Harbor runs the phases."""

    PREPARE = 0  # before the sandbox was asked to start (agent/task checks)
    ENVIRONMENT = 1
    AGENT_SETUP = 2
    AGENT = 3
    VERIFIER = 4
    GRADED = 5  # the verifier produced rewards


_BY_NAME: Mapping[str, ErrorType] = {
    "CancelledError": ErrorType.CANCELLED,
    # The sandbox refused the task's environment, or its image did not build.
    "EnvironmentUnsupportedError": ErrorType.ENVIRONMENT_UNSUPPORTED,
    "EnvironmentBuildError": ErrorType.ENVIRONMENT_BUILD_FAILED,
    "EnvironmentStartTimeoutError": ErrorType.SANDBOX_START,
    "AgentSetupTimeoutError": ErrorType.AGENT_SETUP,
    "AgentTimeoutError": ErrorType.AGENT_TIMEOUT,
    "NonZeroAgentExitCodeError": ErrorType.AGENT_ERROR,
    "VerifierTimeoutError": ErrorType.VERIFIER_ERROR,
    "AddTestsDirError": ErrorType.VERIFIER_ERROR,
    "DownloadVerifierDirError": ErrorType.VERIFIER_ERROR,
    "RewardFileNotFoundError": ErrorType.VERIFIER_MISSING,
    "RewardFileEmptyError": ErrorType.VERIFIER_MISSING,
    "VerifierOutputParseError": ErrorType.VERIFIER_MISSING,
}

_BY_CAUSE: Mapping[FailureCause, ErrorType] = {
    # litellm's errors escaping a host-process agent: the proxy or the engine failed it.
    FailureCause.MODEL_PROVIDER_FAILED: ErrorType.ENGINE_ERROR,
    # Context or output length exhausted, or a refusal: the agent gave up on its own.
    FailureCause.AGENT_EXHAUSTED_BUDGET: ErrorType.AGENT_ERROR,
    FailureCause.AGENT_REFUSED_TASK: ErrorType.AGENT_ERROR,
}

_BY_PHASE: Mapping[_Phase, ErrorType] = {
    _Phase.PREPARE: ErrorType.TASK_INVALID,
    _Phase.ENVIRONMENT: ErrorType.SANDBOX_START,
    _Phase.AGENT_SETUP: ErrorType.AGENT_SETUP,
    _Phase.AGENT: ErrorType.AGENT_ERROR,
    _Phase.VERIFIER: ErrorType.VERIFIER_ERROR,
}


def classify(result: TrialResult, *, reward_file: Any = None) -> Outcome:
    """Name what happened to `result`; never raises on any shape Harbor records.

    `reward_file` is the parsed `verifier/reward.json` of the trial, if the caller read
    one; it is used only when Harbor refused that file.
    """
    exception = _first_exception(result)
    verified = result.verifier_result
    rewards = None if verified is None or verified.rewards is None else dict(verified.rewards)
    refused = exception is not None and exception.exception_type == "VerifierOutputParseError"
    if rewards is None and refused and isinstance(reward_file, Mapping):
        # The verifier did write rewards; they are judged key by key, not refused whole.
        rewards, exception = dict(reward_file), None
    error_type, message, findings = _verdict(result, exception, rewards)
    return Outcome(
        error_type=error_type,
        message=message,
        raw_rewards=rewards,
        timings=_timings(result),
        model_calls_hint=_model_calls_hint(result.agent_result),
        findings=findings,
    )


def _first_exception(result: TrialResult) -> ExceptionInfo | None:
    recorded = [result.exception_info, *(s.exception_info for s in result.step_results or [])]
    return next((e for e in recorded if e is not None), None)


def _verdict(
    result: TrialResult, exception: ExceptionInfo | None, rewards: dict[str, Any] | None
) -> tuple[ErrorType | None, str | None, tuple[FindingRecord, ...]]:
    if exception is None:
        if rewards:
            return None, None, ()
        if result.config.verifier.disable:
            return ErrorType.VERIFIER_MISSING, "the verifier is disabled in the trial config", ()
        return ErrorType.VERIFIER_MISSING, "the verifier finished without writing a reward", ()
    error_type = _error_type(exception, _phase(result))
    if error_type is not None:
        return error_type, _describe(exception), ()
    teardown = FindingRecord(
        code=TEARDOWN_FAILED,
        severity=Severity.WARN,
        message=f"the sandbox failed to stop after grading: {_describe(exception)}",
    )
    return None, None, (teardown,)


def _error_type(exception: ExceptionInfo, phase: _Phase) -> ErrorType | None:
    name = exception.exception_type
    if name in _BY_NAME:
        return _BY_NAME[name]
    if phase is _Phase.GRADED:
        return None
    cause = exception.policy.cause
    if cause in _BY_CAUSE:
        return _BY_CAUSE[cause]
    if cause is FailureCause.SANDBOX_FAILED:
        # A sandbox that broke after it had started was lost under the agent or verifier.
        return ErrorType.SANDBOX_START if phase <= _Phase.ENVIRONMENT else ErrorType.INFRA_LOST
    return _BY_PHASE[phase]


def _phase(result: TrialResult) -> _Phase:
    if result.verifier_result is not None:
        return _Phase.GRADED
    started = (
        (_Phase.VERIFIER, result.verifier),
        (_Phase.AGENT, result.agent_execution),
        (_Phase.AGENT_SETUP, result.agent_setup),
        (_Phase.ENVIRONMENT, result.environment_setup),
    )
    return next((phase for phase, timing in started if timing is not None), _Phase.PREPARE)


def _describe(exception: ExceptionInfo) -> str:
    text = exception.exception_message.strip()
    return f"{exception.exception_type}: {text}" if text else exception.exception_type


def _timings(result: TrialResult) -> dict[str, float]:
    """Seconds per phase that both started and finished, plus the whole trial."""
    spans = {
        "environment_setup": result.environment_setup,
        "agent_setup": result.agent_setup,
        "agent_execution": result.agent_execution,
        "verifier": result.verifier,
    }
    timings = {
        name: seconds
        for name, span in spans.items()
        if span is not None and (seconds := _seconds(span.started_at, span.finished_at)) is not None
    }
    total = _seconds(result.started_at, result.finished_at)
    if total is not None:
        timings["total"] = total
    return timings


def _seconds(started: datetime | None, finished: datetime | None) -> float | None:
    if started is None or finished is None:
        return None
    return (finished - started).total_seconds()


def _model_calls_hint(context: AgentContext | None) -> int | None:
    """The agent's own call count: token records if it kept them, else terminus-2's timings."""
    if context is None:
        return None
    completions = [
        detail["completion_token_ids"]
        for detail in context.rollout_details or []
        if "completion_token_ids" in detail
    ]
    if completions:
        return sum(len(per_call) for per_call in completions)
    # terminus-2 appends one request time per model call it made, subagents included.
    request_times = (context.metadata or {}).get("api_request_times_msec")
    return len(request_times) if isinstance(request_times, list) else None
