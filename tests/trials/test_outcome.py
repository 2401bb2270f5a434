"""Classifying real Harbor `TrialResult`s, built as Harbor builds them, into harbor_ray's terms."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from harbor.agents.installed.base import NonZeroAgentExitCodeError
from harbor.environments.base import HealthcheckError, SandboxBuildFailedError
from harbor.models.agent.context import AgentContext
from harbor.models.trial.config import TaskConfig, TrialConfig, VerifierConfig
from harbor.models.trial.error_policy import ERROR_POLICIES
from harbor.models.trial.result import (
    AgentInfo,
    ExceptionInfo,
    StepResult,
    TimingInfo,
    TrialResult,
)
from harbor.models.verifier.result import VerifierResult
from harbor.trial.errors import (
    AgentSetupTimeoutError,
    AgentTimeoutError,
    EnvironmentStartTimeoutError,
    VerifierTimeoutError,
)
from harbor.verifier.verifier import (
    AddTestsDirError,
    DownloadVerifierDirError,
    RewardFileEmptyError,
    RewardFileNotFoundError,
    VerifierOutputParseError,
)

from harbor_ray.data.result import ErrorType
from harbor_ray.trials.outcome import TEARDOWN_FAILED, Outcome, classify
from harbor_ray.trials.rewards import select_reward

T0 = datetime(2026, 1, 1, tzinfo=UTC)
# (phase field, start, end) in seconds after T0, in the order Harbor runs them.
SPANS = (
    ("environment_setup", 0, 10),
    ("agent_setup", 10, 15),
    ("agent_execution", 15, 75),
    ("verifier", 75, 80),
)
NOTHING, ENVIRONMENT, AGENT_SETUP, AGENT, VERIFIER = range(5)  # how many phases started


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def recorded(exc: BaseException) -> ExceptionInfo:
    """As Harbor records a raised exception (`Trial._record_exception`)."""
    try:
        raise exc
    except BaseException as caught:
        return ExceptionInfo.from_exception(caught)


def named(name: str, message: str = "boom") -> ExceptionInfo:
    """An exception from a library not imported here (litellm, sandbox SDKs), by its name."""
    return ExceptionInfo(
        exception_type=name, exception_message=message, exception_traceback="", occurred_at=T0
    )


def trial_result(
    *,
    reached: int = VERIFIER,
    rewards: dict[str, Any] | None = None,
    exception: ExceptionInfo | None = None,
    agent_result: AgentContext | None = None,
    verifier_disabled: bool = False,
    step_results: list[StepResult] | None = None,
) -> TrialResult:
    """A single-step trial that started `reached` phases, each of which finished."""
    config = TrialConfig(
        task=TaskConfig(path=Path("/tasks/hello")),
        verifier=VerifierConfig(disable=verifier_disabled),
    )
    spans = {
        name: TimingInfo(started_at=at(start), finished_at=at(end))
        for name, start, end in SPANS[:reached]
    }
    return TrialResult(
        task_name="hello",
        trial_name="hello__abc",
        trial_uri="file:///trials/hello__abc",
        task_id=config.task.get_task_id(),
        task_checksum="0" * 64,
        config=config,
        agent_info=AgentInfo(name="terminus-2", version="2.0.0"),
        agent_result=agent_result,
        verifier_result=None if rewards is None else VerifierResult(rewards=rewards),
        exception_info=exception,
        started_at=T0,
        finished_at=at(85),
        step_results=step_results,
        **spans,
    )


def test_a_clean_trial_forwards_its_rewards_and_times_every_phase():
    outcome = classify(trial_result(rewards={"reward": 1.0, "tests": 4}))
    assert outcome == Outcome(
        error_type=None,
        message=None,
        raw_rewards={"reward": 1.0, "tests": 4},
        timings={
            "environment_setup": 10.0,
            "agent_setup": 5.0,
            "agent_execution": 60.0,
            "verifier": 5.0,
            "total": 85.0,
        },
    )


def test_a_wrong_answer_is_a_clean_trial_with_reward_zero():
    outcome = classify(trial_result(rewards={"reward": 0.0}))
    assert (outcome.error_type, outcome.raw_rewards) == (None, {"reward": 0.0})
    assert select_reward(outcome.raw_rewards).reward == 0.0


@pytest.mark.parametrize(
    ("exception", "reached", "expected"),
    [
        # Harbor's own exception types, raised as Harbor raises them.
        (
            EnvironmentStartTimeoutError("Environment start timed out after 600.0 seconds"),
            ENVIRONMENT,
            ErrorType.SANDBOX_START,
        ),
        (
            AgentSetupTimeoutError("Agent setup timed out after 360.0 seconds"),
            AGENT_SETUP,
            ErrorType.AGENT_SETUP,
        ),
        (
            VerifierTimeoutError("Verifier execution timed out after 600.0 seconds"),
            VERIFIER,
            ErrorType.VERIFIER_ERROR,
        ),
        (
            AddTestsDirError("Failed to add tests directory to environment."),
            VERIFIER,
            ErrorType.VERIFIER_ERROR,
        ),
        (
            DownloadVerifierDirError("Failed to download verifier directory from environment"),
            VERIFIER,
            ErrorType.VERIFIER_ERROR,
        ),
        (
            RewardFileNotFoundError("No reward file found at /logs/verifier/reward.txt"),
            VERIFIER,
            ErrorType.VERIFIER_MISSING,
        ),
        (
            RewardFileEmptyError("Reward file is empty at /logs/verifier/reward.json"),
            VERIFIER,
            ErrorType.VERIFIER_MISSING,
        ),
        (
            VerifierOutputParseError("Non-finite reward nan in JSON file reward.json"),
            VERIFIER,
            ErrorType.VERIFIER_MISSING,
        ),
        (SandboxBuildFailedError("image build failed"), ENVIRONMENT, ErrorType.SANDBOX_START),
        (HealthcheckError("healthcheck failed"), ENVIRONMENT, ErrorType.SANDBOX_START),
        (asyncio.CancelledError(), AGENT, ErrorType.CANCELLED),
        (asyncio.CancelledError(), ENVIRONMENT, ErrorType.CANCELLED),
        # Anything else is named by the phase the trial had reached.
        (ValueError("Agent 'codex' does not support skills"), NOTHING, ErrorType.TASK_INVALID),
        (RuntimeError("docker: no such image"), ENVIRONMENT, ErrorType.SANDBOX_START),
        (RuntimeError("npm install failed"), AGENT_SETUP, ErrorType.AGENT_SETUP),
        (KeyError("analysis"), AGENT, ErrorType.AGENT_ERROR),
        (
            RuntimeError("Failed to remove verifier reward files"),
            VERIFIER,
            ErrorType.VERIFIER_ERROR,
        ),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else None,
)
def test_a_failure_without_a_reward_is_named_and_carries_no_reward(exception, reached, expected):
    outcome = classify(trial_result(reached=reached, exception=recorded(exception)))
    assert outcome.error_type is expected
    assert outcome.raw_rewards is None
    assert select_reward(outcome.raw_rewards).reward is None
    name = type(exception).__name__
    assert outcome.message == (f"{name}: {exception}" if str(exception) else name)
    assert outcome.findings == ()


@pytest.mark.parametrize(
    ("name", "reached", "expected"),
    [
        # litellm's errors, escaping terminus-2 when the proxy or engine fails it.
        ("APIConnectionError", AGENT, ErrorType.ENGINE_ERROR),
        ("InternalServerError", AGENT, ErrorType.ENGINE_ERROR),
        ("ServiceUnavailableError", AGENT, ErrorType.ENGINE_ERROR),
        ("BadRequestError", AGENT, ErrorType.ENGINE_ERROR),
        ("AuthenticationError", AGENT, ErrorType.ENGINE_ERROR),
        # The agent ran out of its own budget or refused.
        ("ContextLengthExceededError", AGENT, ErrorType.AGENT_ERROR),
        ("OutputLengthExceededError", AGENT, ErrorType.AGENT_ERROR),
        ("ContentPolicyViolationError", AGENT, ErrorType.AGENT_ERROR),
        # A sandbox that broke under a running agent or verifier was lost, not refused.
        ("SandboxLikelyOutOfMemoryError", AGENT, ErrorType.INFRA_LOST),
        ("GKEPodNotFoundError", VERIFIER, ErrorType.INFRA_LOST),
        ("SSHAccessError", ENVIRONMENT, ErrorType.SANDBOX_START),
    ],
)
def test_library_errors_are_named_by_harbors_failure_cause(name, reached, expected):
    outcome = classify(trial_result(reached=reached, exception=named(name, "it failed")))
    assert (outcome.error_type, outcome.message) == (expected, f"{name}: it failed")


def test_an_agent_timeout_keeps_the_reward_the_verifier_still_gave_but_is_an_error():
    exception = recorded(AgentTimeoutError("Agent execution timed out after 60.0 seconds"))
    outcome = classify(trial_result(rewards={"reward": 1.0}, exception=exception))
    assert outcome.error_type is ErrorType.AGENT_TIMEOUT
    assert outcome.message == "AgentTimeoutError: Agent execution timed out after 60.0 seconds"
    assert outcome.raw_rewards == {"reward": 1.0}


def test_an_agent_timeout_whose_verifier_then_failed_has_no_reward():
    # Harbor records only the first exception: the verifier's own failure is not there.
    exception = recorded(AgentTimeoutError("Agent execution timed out after 60.0 seconds"))
    outcome = classify(trial_result(exception=exception))
    assert (outcome.error_type, outcome.raw_rewards) == (ErrorType.AGENT_TIMEOUT, None)


def test_a_non_zero_agent_exit_keeps_the_reward_and_is_an_agent_error():
    exception = recorded(NonZeroAgentExitCodeError("claude exited with code 1"))
    outcome = classify(trial_result(rewards={"reward": 0.0}, exception=exception))
    assert (outcome.error_type, outcome.raw_rewards) == (ErrorType.AGENT_ERROR, {"reward": 0.0})


def test_a_sandbox_that_fails_to_stop_after_grading_keeps_an_ok_row_and_warns():
    exception = recorded(RuntimeError("container did not stop"))
    outcome = classify(trial_result(rewards={"reward": 1.0}, exception=exception))
    assert (outcome.error_type, outcome.message) == (None, None)
    assert outcome.raw_rewards == {"reward": 1.0}
    [finding] = outcome.findings
    assert (finding.code, finding.severity) == (TEARDOWN_FAILED, "warn")
    assert finding.message == (
        "the sandbox failed to stop after grading: RuntimeError: container did not stop"
    )


def test_a_cancellation_during_teardown_is_still_a_cancellation():
    outcome = classify(
        trial_result(rewards={"reward": 1.0}, exception=recorded(asyncio.CancelledError()))
    )
    assert (outcome.error_type, outcome.raw_rewards) == (ErrorType.CANCELLED, {"reward": 1.0})


def test_a_refused_reward_file_is_judged_key_by_key_when_the_caller_read_it():
    exception = recorded(VerifierOutputParseError("Non-finite reward nan in JSON file"))
    reward_file = {"reward": 1.0, "style": math.nan}
    outcome = classify(trial_result(exception=exception), reward_file=reward_file)
    assert (outcome.error_type, outcome.message) == (None, None)
    assert outcome.raw_rewards is not None
    assert outcome.raw_rewards["reward"] == 1.0 and math.isnan(outcome.raw_rewards["style"])
    choice = select_reward(outcome.raw_rewards)
    assert (choice.reward, choice.dropped) == (1.0, (("style", "not finite (nan)"),))


def test_a_refused_reward_file_whose_trained_key_is_bad_leaves_the_verdict_to_the_rule():
    exception = recorded(VerifierOutputParseError("Non-numeric reward None in JSON file"))
    outcome = classify(trial_result(exception=exception), reward_file={"reward": None})
    assert (outcome.error_type, outcome.raw_rewards) == (None, {"reward": None})
    assert select_reward(outcome.raw_rewards).error == "reward key 'reward' is unusable: null"


@pytest.mark.parametrize("reward_file", [None, [1.0], 0.5, "reward"])
def test_a_refused_reward_file_that_is_not_a_dict_is_a_missing_reward(reward_file):
    exception = recorded(VerifierOutputParseError("Failed to parse rewards from JSON file"))
    outcome = classify(trial_result(exception=exception), reward_file=reward_file)
    assert (outcome.error_type, outcome.raw_rewards) == (ErrorType.VERIFIER_MISSING, None)


def test_a_reward_file_is_ignored_unless_harbor_refused_it():
    exception = recorded(RewardFileNotFoundError("No reward file found"))
    outcome = classify(trial_result(exception=exception), reward_file={"reward": 1.0})
    assert (outcome.error_type, outcome.raw_rewards) == (ErrorType.VERIFIER_MISSING, None)
    clean = classify(trial_result(rewards={"reward": 0.0}), reward_file={"reward": 1.0})
    assert clean.raw_rewards == {"reward": 0.0}


def test_no_exception_and_no_reward_is_a_missing_reward():
    outcome = classify(trial_result())
    assert (outcome.error_type, outcome.message) == (
        ErrorType.VERIFIER_MISSING,
        "the verifier finished without writing a reward",
    )


def test_an_empty_reward_dict_is_a_missing_reward_but_is_still_forwarded():
    outcome = classify(trial_result(rewards={}))
    assert (outcome.error_type, outcome.raw_rewards) == (ErrorType.VERIFIER_MISSING, {})


def test_a_disabled_verifier_says_so():
    outcome = classify(trial_result(reached=AGENT, verifier_disabled=True))
    assert (outcome.error_type, outcome.message) == (
        ErrorType.VERIFIER_MISSING,
        "the verifier is disabled in the trial config",
    )


def test_an_exception_without_a_message_is_named_by_its_type():
    outcome = classify(trial_result(reached=AGENT, exception=named("ApiError", "  ")))
    assert outcome.message == "ApiError"


def test_a_multi_step_trial_takes_the_first_step_exception():
    step = StepResult(step_name="build", exception_info=recorded(VerifierTimeoutError("late")))
    outcome = classify(trial_result(step_results=[step]))
    assert (outcome.error_type, outcome.message) == (
        ErrorType.VERIFIER_ERROR,
        "VerifierTimeoutError: late",
    )


def test_an_unfinished_phase_has_no_timing():
    result = trial_result(reached=AGENT)
    assert result.agent_execution is not None
    result.agent_execution.finished_at = None
    result.finished_at = None
    assert classify(result).timings == {"environment_setup": 10.0, "agent_setup": 5.0}


@pytest.mark.parametrize(
    ("context", "hint"),
    [
        (None, None),
        (AgentContext(), None),
        (AgentContext(metadata={"n_episodes": 3}), None),
        # terminus-2 appends one request time per model call.
        (AgentContext(metadata={"api_request_times_msec": [120.0, 80.5, 99.0]}), 3),
        # Token records, when kept, count every call of every segment (subagents too).
        (
            AgentContext(
                rollout_details=[
                    {"prompt_token_ids": [[1], [1, 2, 3]], "completion_token_ids": [[2], [4]]},
                    {"completion_token_ids": [[9]]},
                ],
                metadata={"api_request_times_msec": [1.0]},
            ),
            3,
        ),
        (AgentContext(rollout_details=[{"extra": {}}]), None),
    ],
)
def test_the_agents_own_call_count_is_a_hint(context, hint):
    outcome = classify(trial_result(rewards={"reward": 1.0}, agent_result=context))
    assert outcome.model_calls_hint == hint


# What each exception Harbor names becomes in each phase (NOTHING .. VERIFIER), written
# out by hand from what the name means, not derived from Harbor's policy table.
E = ErrorType
ALWAYS_ENGINE = (E.ENGINE_ERROR,) * 5  # the model provider (proxy or engine) failed
ALWAYS_AGENT = (E.AGENT_ERROR,) * 5  # the agent gave up or refused on its own
# A sandbox that broke: before it ran, it failed to start; after, it was lost.
SANDBOX = (E.SANDBOX_START, E.SANDBOX_START, E.INFRA_LOST, E.INFRA_LOST, E.INFRA_LOST)
# harbor_ray knows nothing more than the phase the trial had reached.
BY_PHASE = (E.TASK_INVALID, E.SANDBOX_START, E.AGENT_SETUP, E.AGENT_ERROR, E.VERIFIER_ERROR)
EXPECTED_BY_PHASE: dict[str, tuple[ErrorType, ...]] = {
    **dict.fromkeys(
        [
            "APIConnectionError",
            "APIError",
            "APIResponseValidationError",
            "AgentAuthenticationError",
            "ApiConnectionClosedError",
            "ApiConnectionError",
            "ApiError",
            "ApiInternalServerError",
            "ApiOverloadedError",
            "ApiProviderResourceNotFoundError",
            "ApiRateLimitError",
            "ApiResponseStalledError",
            "ApiUsageLimitError",
            "AuthenticationError",
            "BadRequestError",
            "BudgetExceededError",
            "InternalServerError",
            "ModelNotFoundError",
            "NetworkConnectionError",
            "NotFoundError",
            "PermissionDeniedError",
            "RateLimitError",
            "ServiceUnavailableError",
            "Timeout",
            "UnknownApiError",
            "UnprocessableEntityError",
            "UnsupportedParamsError",
        ],
        ALWAYS_ENGINE,
    ),
    **dict.fromkeys(
        [
            "AddTestsDirError",
            "DownloadVerifierDirError",
            "VerifierTimeoutError",
        ],
        (E.VERIFIER_ERROR,) * 5,
    ),
    **dict.fromkeys(
        [
            "AgentSafetyRefusalError",
            "ContentPolicyViolationError",
            "ContextLengthExceededError",
            "ContextWindowExceededError",
            "OutputLengthExceededError",
            "OutputTokenExceededError",
        ],
        ALWAYS_AGENT,
    ),
    "AgentSetupTimeoutError": (E.AGENT_SETUP,) * 5,
    "AgentTimeoutError": (E.AGENT_TIMEOUT,) * 5,
    "CancelledError": (E.CANCELLED,) * 5,
    **dict.fromkeys(
        [
            "DspyImportError",
            "MissingExtraError",
            "RegradeError",
            "ServiceOperationsUnsupportedError",
            "VercelScopeError",
        ],
        BY_PHASE,
    ),
    "EnvironmentStartTimeoutError": (E.SANDBOX_START,) * 5,
    **dict.fromkeys(
        [
            "GKEExecStreamClosedError",
            "GKEPodNotFoundError",
            "HealthcheckError",
            "MemoryLimitExceededError",
            "RuntimeRequestError",
            "SSHAccessError",
            "SandboxBuildFailedError",
            "SandboxLikelyOutOfMemoryError",
        ],
        SANDBOX,
    ),
    "NonZeroAgentExitCodeError": (E.AGENT_ERROR,) * 5,
    **dict.fromkeys(
        [
            "RewardFileEmptyError",
            "RewardFileNotFoundError",
            "VerifierOutputParseError",
        ],
        (E.VERIFIER_MISSING,) * 5,
    ),
}


def test_the_expected_table_covers_every_exception_harbor_knows():
    # A name Harbor adds (or drops) must be decided here, not classified by accident.
    assert set(EXPECTED_BY_PHASE) == set(ERROR_POLICIES)


@pytest.mark.parametrize("name", sorted(EXPECTED_BY_PHASE))
@pytest.mark.parametrize("reached", range(5))
def test_every_exception_harbor_knows_is_named_for_its_phase(name, reached):
    outcome = classify(trial_result(reached=reached, exception=named(name)))
    assert outcome.error_type is EXPECTED_BY_PHASE[name][reached]
    assert outcome.message == f"{name}: boom"
    assert outcome.raw_rewards is None


def test_the_error_types_classify_can_produce():
    produced = {
        classify(trial_result(reached=reached, exception=named(name))).error_type
        for name in [*ERROR_POLICIES, "RuntimeError"]
        for reached in range(5)
    }
    produced.add(classify(trial_result()).error_type)
    assert produced == {
        ErrorType.TASK_INVALID,
        ErrorType.SANDBOX_START,
        ErrorType.AGENT_SETUP,
        ErrorType.AGENT_TIMEOUT,
        ErrorType.AGENT_ERROR,
        ErrorType.VERIFIER_ERROR,
        ErrorType.VERIFIER_MISSING,
        ErrorType.ENGINE_ERROR,
        ErrorType.CANCELLED,
        ErrorType.INFRA_LOST,
    }
