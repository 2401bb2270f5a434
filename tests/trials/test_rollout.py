"""run_rollout end to end: real Harbor trials in the real bwrap sandbox, the capture
proxy in process (fake engine playing a scripted terminus-2), no Ray."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.local import LocalCapture, local_capture
from harbor_ray.data.rebuild import export_document
from harbor_ray.data.result import ErrorType, RolloutResult
from harbor_ray.trials.datasets import TaskRef, resolve_dataset, select_tasks
from harbor_ray.trials.rollout import RolloutSpec, run_rollout
from tests.processes import all_cmdlines, gone
from tests.trials.scripts import terminus_script

pytestmark = pytest.mark.integration


JQ_TASK = resolve_dataset(str(Path(__file__).parents[1] / "fixtures" / "tasks" / "jq-data")).tasks[
    0
]


def sample(name: str) -> TaskRef:
    (task,) = select_tasks(resolve_dataset("samples"), [name])
    return task


def spec(tmp_path: Path, task: TaskRef, agent: str, **kwargs) -> RolloutSpec:
    kwargs.setdefault("sandbox_kwargs", {"sandboxes_dir": str(tmp_path / "sandboxes")})
    return RolloutSpec(
        rollout_id=f"{task.name}-{agent}",
        task=task,
        agent=agent,
        trials_dir=tmp_path / "trials",
        **kwargs,
    )


@pytest.fixture
async def fake_capture() -> AsyncIterator[tuple[FakeEngine, LocalCapture]]:
    engine = FakeEngine(script=terminus_script("echo hello > /app/hello.txt\n"))
    async with local_capture(engine, "in-process") as capture:
        engine.calls.clear()  # certification's probes
        yield engine, capture


async def result_of(rollout_spec: RolloutSpec, capture: LocalCapture | None) -> RolloutResult:
    return (await run_rollout(rollout_spec, capture)).result


def leftovers(tmp_path: Path) -> list[str]:
    """Sandbox directories and processes that outlived their rollout."""
    sandboxes = tmp_path / "sandboxes"
    dirs = [p.name for p in sandboxes.iterdir()] if sandboxes.exists() else []
    return dirs + [cmdline for cmdline in all_cmdlines() if str(sandboxes) in cmdline]


async def test_oracle_needs_no_model_and_scores(tmp_path: Path) -> None:
    result = await result_of(spec(tmp_path, sample("hello-file"), "oracle"), None)
    assert result.ok, result
    assert result.reward == 1.0 and result.reward_key == "reward"
    assert result.model_calls == 0 and result.counts is None and result.model is None
    assert result.error_type is None
    assert leftovers(tmp_path) == []


async def test_nop_scores_zero_without_error(tmp_path: Path) -> None:
    result = await result_of(spec(tmp_path, sample("hello-file"), "nop"), None)
    assert result.reward == 0.0 and result.error_type is None and result.ok


async def test_null_reward_key_is_dropped_and_named(tmp_path: Path) -> None:
    result = await result_of(spec(tmp_path, sample("json-active-users"), "oracle"), None)
    assert result.ok and result.reward == 1.0
    assert result.rewards == {"reward": 1.0}
    assert any(
        f.code == "reward_key_dropped" and "latency_bonus" in f.message for f in result.findings
    )


async def test_terminus2_through_the_proxy_solves_and_links(
    tmp_path: Path, fake_capture: tuple[FakeEngine, LocalCapture]
) -> None:
    engine, capture = fake_capture
    record = await run_rollout(spec(tmp_path, sample("hello-file"), "terminus-2"), capture)
    result = record.result
    assert result.reward == 1.0, (result.error, result.findings)
    assert result.ok and result.model == "fake-model"
    doc = export_document(record)
    assert result.model_calls == len(doc["turns"]) == len(engine.calls) == 3
    assert doc["counts"]["roots"] == 1 and doc["trainable"]
    assert [t["parent"] for t in doc["turns"]] == [None, 0, 1]
    # The ATIF cross-check agreed: no mismatch findings.
    assert not [
        f for f in result.findings if f.code.startswith("atif_") and f.severity != "info"
    ], result.findings
    assert leftovers(tmp_path) == []


async def test_agent_that_needs_a_model_without_engine_is_a_row(tmp_path: Path) -> None:
    result = await result_of(spec(tmp_path, sample("hello-file"), "terminus-2"), None)
    assert not result.ok and result.error_type == ErrorType.ENGINE_ERROR
    assert "--llm-url" in result.error


async def test_engine_down_is_engine_error_not_zero_calls(
    tmp_path: Path, fake_capture: tuple[FakeEngine, LocalCapture]
) -> None:
    engine, capture = fake_capture
    engine.fail_with = 500
    result = await result_of(
        spec(tmp_path, sample("hello-file"), "terminus-2", deadline_s=120), capture
    )
    assert not result.ok
    assert result.model_calls == 0
    assert result.error_type == ErrorType.ENGINE_ERROR, result.error
    assert result.counts is not None and result.counts.engine_errors >= 1
    # Harbor runs no verifier after the agent failed: None, never a 0.0 the model earned.
    assert result.reward is None


def slow_task(tmp_path: Path, seconds: int) -> TaskRef:
    """hello-file whose solution hangs in a command (`sleep <seconds>`: each test its own
    number, so that it finds its own process)."""
    root = tmp_path / "tasks" / "slow"
    shutil.copytree(sample("hello-file").path, root)
    (root / "solution" / "solve.sh").write_text(f"#!/bin/bash\nsleep {seconds}\n")
    (task,) = resolve_dataset(str(root)).tasks
    return task


async def test_deadline_ends_as_a_row_and_leaves_nothing(tmp_path: Path) -> None:
    result = await result_of(spec(tmp_path, slow_task(tmp_path, 301), "oracle", deadline_s=8), None)
    assert result.error_type == ErrorType.DEADLINE and not result.ok
    assert result.reward is None  # the verifier never ran: None, not 0.0
    assert leftovers(tmp_path) == []
    assert gone("sleep 301")


async def test_cancelling_mid_command_propagates_and_leaves_nothing(tmp_path: Path) -> None:
    rollout = asyncio.create_task(
        run_rollout(spec(tmp_path, slow_task(tmp_path, 302), "oracle"), None)
    )
    deadline = asyncio.get_running_loop().time() + 60
    while not any("sleep 302" in p for p in all_cmdlines()):
        assert asyncio.get_running_loop().time() < deadline, "solution never started"
        await asyncio.sleep(0.2)
    rollout.cancel()
    with pytest.raises(asyncio.CancelledError):
        await rollout
    assert leftovers(tmp_path) == []
    assert gone("sleep 302")


async def test_a_backend_constructor_error_is_sandbox_start(tmp_path: Path) -> None:
    # EC2's constructor requires `region`: Harbor's TypeError must not be an internal error.
    rollout_spec = spec(tmp_path, JQ_TASK, "oracle", sandbox="ec2", sandbox_kwargs={})
    result = await result_of(rollout_spec, None)
    assert result.error_type is ErrorType.SANDBOX_START, result
    assert "TypeError" in result.error and "'region'" in result.error


async def test_a_task_without_an_image_is_refused_by_a_backend_that_runs_images(
    tmp_path: Path,
) -> None:
    result = await result_of(
        spec(tmp_path, sample("hello-file"), "oracle", sandbox="ec2", sandbox_kwargs={}), None
    )
    assert result.error_type is ErrorType.ENVIRONMENT_UNSUPPORTED and result.reward is None
    assert "declares no image" in result.error and result.environment is None


async def test_a_task_that_needs_its_image_is_a_row_without_a_reward_on_the_host(
    tmp_path: Path,
) -> None:
    """A sweep's or the online service's rollout: an environment_unsupported row, which
    nothing ran for (no trial directory), never a reward."""
    result = await result_of(spec(tmp_path, JQ_TASK, "oracle"), None)
    assert result.error_type is ErrorType.ENVIRONMENT_UNSUPPORTED and not result.ok
    assert result.reward is None and result.trial_dir is None
    assert "--sandbox container" in result.error and "--host-userland" in result.error


# --- Agents from the host's cache (harbor-ray agents install) --------------------------


class _Capture:
    served_model = "fake-model"
    host_url = "http://127.0.0.1:9"
    remote_url = None


def _cached_config(agent: str, cache: Path):
    from harbor_ray.capture.core.session_info import SessionInfo
    from harbor_ray.trials.rollout import _trial_config

    pinned = RolloutSpec(
        rollout_id="r",
        task=sample("hello-file"),
        agent=agent,
        trials_dir=cache / "trials",
        agents_cache=cache,
    )
    return _trial_config(pinned, _Capture(), SessionInfo("s", "k", None))


@pytest.mark.parametrize(
    ("agent", "import_path"),
    [
        ("gemini-cli", "harbor_ray.trials.preinstalled:PreinstalledGeminiCli"),
        ("codex", None),  # Harbor's codex skips its install when codex is on PATH
    ],
)
def test_a_pinned_agent_runs_from_the_cache_mounted_read_only(
    tmp_path: Path, agent: str, import_path: str | None
):
    from harbor_ray.trials.agent_pins import PINS

    entry = tmp_path / PINS[agent].entry_name
    (entry / "bin").mkdir(parents=True)
    config = _cached_config(agent, tmp_path)
    assert config.environment.kwargs["tools"] == {
        f"/opt/harbor-ray/agents/{entry.name}": str(entry)
    }
    assert config.agent.import_path == import_path
    assert config.agent.name == (None if import_path else agent)


def test_a_python_agent_gets_its_interpreter_and_venv_mounted_off_path(tmp_path: Path):
    from harbor_ray.trials.agent_pins import PINS

    entry = tmp_path / PINS["openhands-sdk"].entry_name
    (entry / "bin").mkdir(parents=True)
    (entry / "venv").mkdir()
    (entry / "venv" / "pyvenv.cfg").write_text("home = /opt/cpython-3.12/bin\n")
    kwargs = _cached_config("openhands-sdk", tmp_path).environment.kwargs
    assert kwargs["tools"] == {f"/opt/harbor-ray/agents/{entry.name}": str(entry)}
    assert kwargs["runtimes"] == {
        "/opt/openhands-sdk-venv": str(entry / "venv"),
        "/opt/cpython-3.12": "/opt/cpython-3.12",
    }
    # An npm agent's sandbox gets no runtimes kwarg at all, as before.
    (tmp_path / PINS["opencode"].entry_name / "bin").mkdir(parents=True)
    assert "runtimes" not in _cached_config("opencode", tmp_path).environment.kwargs


async def test_a_pinned_agent_not_in_the_cache_fails_its_setup_saying_how_to_install(
    tmp_path: Path,
):
    pinned = spec(tmp_path, sample("hello-file"), "opencode", agents_cache=tmp_path / "empty")
    async with local_capture(FakeEngine(), "in-process") as capture:
        record = await run_rollout(pinned, capture)
    assert record.result.error_type == ErrorType.AGENT_SETUP
    assert "harbor-ray agents install opencode" in (record.result.error or "")
