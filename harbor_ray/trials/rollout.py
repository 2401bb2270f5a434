"""One rollout: a Harbor trial run with its agent wired to a capture session.

`run_rollout` ends every rollout as one `RolloutRecord`: the row, and the token tables
encoded here from the session's closed capture (its graph built once, by its owner).
It never raises (a failed rollout is a row, docs/lessons.md), except that a
cancellation from the caller propagates: swallowing it would hide the caller's intent,
and the trial's own teardown runs on the way out. Harbor objects stay at this edge;
what is decided (the outcome, the reward, whether the row is usable) is decided by
the pure functions of `outcome`, `rewards`, `atif` and the capture core.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from harbor.models.trial.config import AgentConfig, TrialConfig
from harbor.models.trial.config import TaskConfig as TrialTaskConfig
from harbor.trial.trial import Trial

from harbor_ray.capture.core.auxiliary import MainLoop
from harbor_ray.capture.core.record import ClosedCapture
from harbor_ray.capture.core.session_info import SessionInfo
from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ErrorType, FindingRecord, RanIn, RolloutResult, describe_bug
from harbor_ray.errors import AgentInstallError, AgentNotWiredError
from harbor_ray.trials.agent_pins import PINS
from harbor_ray.trials.agents import ProxyEndpoint, agent_config, needs_model, runs_in_sandbox
from harbor_ray.trials.atif import cross_check
from harbor_ray.trials.backends import (
    ON_THIS_NODE,
    environment_config,
    provides_task_image,
    raised_constructing,
)
from harbor_ray.trials.environment_need import ran_in, refusal
from harbor_ray.trials.installs import (
    DEFAULT_CACHE,
    PREINSTALLED,
    host_node_tools,
    sandbox_runtimes,
    sandbox_tools,
)
from harbor_ray.trials.outcome import classify
from harbor_ray.trials.rewards import findings_for, select_reward
from harbor_ray.trials.sandbox.bwrap import ENVIRONMENT_FILE
from harbor_ray.trials.spec import CaptureService, RolloutSpec
from harbor_ray.trials.stages import StageListener, watch_stages

# The port at which an agent inside the local sandbox finds the proxy (forwarded).
SANDBOX_PROXY_PORT = 18080
# Finding code of a row run on the host's userland in place of the task's image.
HOST_OVERRIDE = "host_userland_override"


async def run_rollout(
    spec: RolloutSpec,
    capture: CaptureService | None,
    *,
    clock: Callable[[], float] = time.time,
    on_stage: StageListener | None = None,
) -> RolloutRecord:
    """Run one rollout to its record. Only a cancellation from the caller escapes.
    `on_stage` hears each stage its trial reaches (`stages.Stage`)."""
    started = clock()
    closed: ClosedCapture | None = None
    try:
        result, closed = await _run(spec, capture, on_stage)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # a bug here must still end as a row
        result = _row(spec, capture, error_type=ErrorType.INTERNAL, error=describe_bug(exc))
    result.timings["total"] = clock() - started
    return encode_record(result, closed)


async def _run(
    spec: RolloutSpec, capture: CaptureService | None, on_stage: StageListener | None
) -> tuple[RolloutResult, ClosedCapture | None]:
    refused = refusal(
        spec.task.environment,
        task=spec.task.name,
        sandbox=spec.sandbox,
        provides_image=provides_task_image(spec.sandbox),
        host_userland=spec.host_userland,
    )
    if refused is not None:
        return _row(
            spec, capture, error_type=ErrorType.ENVIRONMENT_UNSUPPORTED, error=refused
        ), None
    wants_model = needs_model(spec.agent)
    if wants_model and capture is None:
        no_engine = f"agent {spec.agent!r} needs a model: give an engine (--llm-url)"
        return _row(spec, capture, error_type=ErrorType.ENGINE_ERROR, error=no_engine), None
    session = None
    if wants_model and capture is not None:
        # The wiring names the served model in every agent's main slot (and another
        # name in its small/fast slots): calls asking for any other are side calls.
        session = await capture.open_session(
            budget=spec.budget,
            sampling=spec.sampling,
            main_loop=MainLoop(model=capture.served_model, agent=spec.agent),
        )
    closed = None
    try:
        trial_config = _trial_config(spec, capture, session)
        error_type, error, trial_result = await _run_trial(trial_config, spec.deadline_s, on_stage)
    except (AgentNotWiredError, AgentInstallError) as exc:
        return _row(spec, capture, error_type=ErrorType.AGENT_SETUP, error=str(exc)), None
    finally:
        if session is not None and capture is not None:
            # The session is read and dropped even when the trial was cancelled.
            closed = await asyncio.shield(capture.close_session(session.session_id))
    trial_dir = spec.trials_dir / trial_config.trial_name
    return _judge(spec, capture, trial_result, error_type, error, closed, trial_dir), closed


def _trial_config(
    spec: RolloutSpec, capture: CaptureService | None, session: SessionInfo | None
) -> TrialConfig:
    sandbox_kwargs = dict(spec.sandbox_kwargs)
    if session is not None and capture is not None:
        inside = runs_in_sandbox(spec.agent)
        if inside and spec.sandbox in ON_THIS_NODE:
            # The proxy may sit under a path (the cluster's deployment is at /capture).
            url = urlsplit(capture.host_url)
            sandbox_kwargs["forward"] = {SANDBOX_PROXY_PORT: url.netloc}
            sandbox_url = f"http://127.0.0.1:{SANDBOX_PROXY_PORT}{url.path.rstrip('/')}"
        else:
            # A sandbox elsewhere (a cloud backend) cannot reach this node's loopback:
            # it uses the address the user configured, when there is one.
            sandbox_url = capture.remote_url or capture.host_url
        agent = agent_config(
            spec.agent,
            proxy=ProxyEndpoint(host_url=capture.host_url, sandbox_url=sandbox_url),
            session_key=session.key,
            served_model=capture.served_model,
            sampling=spec.sampling,
            extra_kwargs=spec.agent_kwargs,
            budget=spec.budget,
            profile=spec.profile,
        )
        if inside and spec.sandbox in ON_THIS_NODE:
            agent = _preinstalled(spec, agent, sandbox_kwargs)
    else:
        agent = AgentConfig(name=spec.agent, kwargs=dict(spec.agent_kwargs))
    return TrialConfig(
        task=TrialTaskConfig(path=spec.task.path),
        trial_name=spec.rollout_id,
        trials_dir=spec.trials_dir,
        agent=agent,
        environment=environment_config(spec.sandbox, sandbox_kwargs),
    )


def _preinstalled(
    spec: RolloutSpec, agent: AgentConfig, sandbox_kwargs: dict[str, Any]
) -> AgentConfig:
    """A pinned agent runs its CLI from the host's cache, mounted into the sandbox, since
    Harbor's own install needs the network; the Harbor adapters that would install
    anyway are swapped for variants that skip it when the CLI is there."""
    pin = PINS.get(spec.agent)
    if pin is None:
        return agent
    cache = spec.agents_cache or DEFAULT_CACHE
    sandbox_kwargs["tools"] = sandbox_tools(cache, pin)
    if provides_task_image(spec.sandbox):
        # The image's /usr is not the host's: its Node comes along, mounted.
        sandbox_kwargs["tools"] |= host_node_tools(cache, pin)
    if runtimes := sandbox_runtimes(cache, pin):
        sandbox_kwargs["runtimes"] = runtimes
    if spec.agent not in PREINSTALLED:
        return agent
    return agent.model_copy(update={"name": None, "import_path": PREINSTALLED[spec.agent]})


async def _run_trial(
    config: TrialConfig, deadline_s: float | None, on_stage: StageListener | None
) -> tuple[ErrorType | None, str | None, Any]:
    """Run the Harbor trial in this event loop (never a nested `asyncio.run`: that
    cancelled Harbor's shielded teardown and leaked sandboxes, docs/lessons.md)."""
    try:
        async with asyncio.timeout(deadline_s):
            try:
                trial = await Trial.create(config)
            except Exception as exc:
                if not raised_constructing(exc):
                    raise
                # A constructor's TypeError or ValueError says what the backend lacks.
                return (
                    ErrorType.SANDBOX_START,
                    f"the sandbox backend could not be constructed: {type(exc).__name__}: {exc}",
                    None,
                )
            if on_stage is not None:
                watch_stages(trial, config.trial_name, on_stage)
            return None, None, await trial.run()
    except TimeoutError:
        return ErrorType.DEADLINE, f"rollout passed its deadline of {deadline_s} s", None


def _judge(
    spec: RolloutSpec,
    capture: CaptureService | None,
    trial_result: Any,
    error_type: ErrorType | None,
    error: str | None,
    closed: ClosedCapture | None,
    trial_dir: Path,
) -> RolloutResult:
    findings: list[FindingRecord] = []
    raw_rewards = None
    timings: dict[str, float] = {}
    if trial_result is not None:
        outcome = classify(trial_result, reward_file=_read_reward_json(trial_dir))
        error_type, error = outcome.error_type, outcome.message
        raw_rewards, timings = outcome.raw_rewards, dict(outcome.timings)
        findings += outcome.findings
    choice = select_reward(raw_rewards, key=spec.reward_key)
    findings += findings_for(choice)
    if closed is not None:
        findings += [FindingRecord.of(f) for f in closed.findings]
        findings += cross_check(_read_trajectory(trial_dir), closed)
    where, digest, build_s = _environment(spec, trial_dir)
    if build_s:
        timings["environment_build"] = build_s
    if where is RanIn.HOST_OVERRIDE:
        findings.append(
            FindingRecord(
                code=HOST_OVERRIDE,
                severity="warn",
                message=f"ran on the host's userland in place of the task's own environment "
                f"({spec.task.environment.why}), as asked (--host-userland): the "
                "reward is not the task's",
            )
        )
    model_calls = len(closed.turns) if closed else 0
    engine_errors = closed.counts.engine_errors if closed else 0
    if error_type == ErrorType.AGENT_ERROR and engine_errors and not model_calls:
        # The agent gave up because every call it made failed at the engine.
        error_type = ErrorType.ENGINE_ERROR
        error = f"all {engine_errors} model calls failed at the engine; the agent said: {error}"
    if error_type is None:
        error_type, error = _late_error(spec, choice.error, raw_rewards, closed, model_calls)
    ok = error_type is None and not any(f.severity == "fatal" for f in findings)
    return _row(
        spec,
        capture,
        ok=ok,
        error_type=error_type,
        error=error,
        reward=choice.reward,
        reward_key=choice.reward_key,
        rewards=choice.rewards,
        findings=findings,
        counts=None if closed is None else closed.counts,
        capture_level=None if closed is None else closed.capture_level,
        model_calls=model_calls,
        timings=timings,
        trial_dir=str(trial_dir) if trial_dir.exists() else None,
        environment=where,
        image_digest=digest,
    )


def _environment(spec: RolloutSpec, trial_dir: Path) -> tuple[RanIn | None, str | None, float]:
    """Where the trial ran, the image's digest and the seconds spent building it. The
    sandbox says in the trial's `environment.json` (harbor_ray's own write it at
    start); a Harbor backend writes none: it ran the task's image, digest unknown. No
    sandbox start, no environment."""
    written = _read_json(trial_dir / ENVIRONMENT_FILE)
    if spec.sandbox in ON_THIS_NODE and written is None:
        return None, None, 0.0
    where = ran_in(spec.task.environment, provides_image=provides_task_image(spec.sandbox))
    if written is None:
        return where, None, 0.0
    digest = written.get("digest")
    build_s = written.get("build_s")
    return (
        where,
        digest if isinstance(digest, str) else None,
        float(build_s) if isinstance(build_s, int | float) else 0.0,
    )


def _late_error(
    spec: RolloutSpec,
    reward_error: str | None,
    raw_rewards: Mapping[str, Any] | None,
    closed: ClosedCapture | None,
    model_calls: int,
) -> tuple[ErrorType | None, str | None]:
    """Errors only visible once the trial ended cleanly, in the order a user fixes them."""
    if raw_rewards is None:
        return ErrorType.VERIFIER_MISSING, "the verifier wrote no reward"
    if reward_error is not None:
        return ErrorType.REWARD_INVALID, reward_error
    if needs_model(spec.agent) and model_calls == 0:
        engine_errors = closed.counts.engine_errors if closed else 0
        if engine_errors:
            return ErrorType.ENGINE_ERROR, f"all {engine_errors} model calls failed at the engine"
        return ErrorType.NO_MODEL_CALLS, f"agent {spec.agent!r} made no model call"
    if closed is not None and not closed.valid:
        return ErrorType.CAPTURE_INVALID, "the capture has a fatal finding"
    return None, None


def _row(spec: RolloutSpec, service: CaptureService | None, **values: Any) -> RolloutResult:
    values.setdefault("ok", False)
    values.setdefault("reward", None)
    return RolloutResult(
        rollout_id=spec.rollout_id,
        task=spec.task.name,
        attempt=spec.attempt,
        agent=spec.agent,
        sandbox=spec.sandbox,
        model=service.served_model if service is not None and needs_model(spec.agent) else None,
        provenance=spec.provenance,
        **values,
    )


def _read_reward_json(trial_dir: Path) -> dict[str, Any] | None:
    """The verifier's raw reward.json: Harbor refuses the whole file for one null value,
    while rewards are judged key by key (docs/lessons.md)."""
    return _read_json(trial_dir / "verifier" / "reward.json")


def _read_trajectory(trial_dir: Path) -> dict[str, Any] | None:
    return _read_json(trial_dir / "agent" / "trajectory.json")


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return value if isinstance(value, dict) else None
