"""The bundled sample tasks, run as real Harbor trials in the bwrap sandbox.

The oracle agent must score 1.0 and the nop agent 0.0 on every task. Scores are read from
the verifier's own file, as harbor_ray must: Harbor refuses a reward.json holding a null
value as a whole. Wherever Harbor does parse the file, its rewards must equal the file's.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import pytest
from harbor.models.trial.config import AgentConfig, EnvironmentConfig, TaskConfig, TrialConfig
from harbor.models.trial.result import TrialResult
from harbor.trial.trial import Trial

from harbor_ray.trials.datasets import TaskRef, resolve_dataset
from harbor_ray.trials.environment_need import NeedKind, uploads_environment_dir

BWRAP = "harbor_ray.trials.sandbox.bwrap:BwrapEnvironment"
SAMPLES = resolve_dataset("samples").tasks
SAMPLE_NAMES = [task.name for task in SAMPLES]
AGENTS = ("oracle", "nop")
MULTI_KEY_TASK = "fix-mean"
NULL_KEY_TASK = "json-active-users"


@dataclass(frozen=True)
class Run:
    result: TrialResult
    verifier_dir: Path

    def raw_rewards(self) -> dict[str, Any]:
        """The verifier's file as written: reward.json wins over reward.txt, as in Harbor."""
        reward_json = self.verifier_dir / "reward.json"
        if reward_json.exists():
            return json.loads(reward_json.read_text())
        return {"reward": float((self.verifier_dir / "reward.txt").read_text())}


async def run_trial(task: TaskRef, agent: str, root: Path) -> Run:
    config = TrialConfig(
        task=TaskConfig(path=task.path),
        trials_dir=root / "trials",
        agent=AgentConfig(name=agent),
        environment=EnvironmentConfig(
            import_path=BWRAP, kwargs={"sandboxes_dir": str(root / "sandboxes")}
        ),
    )
    trial = await Trial.create(config)
    result = await trial.run()
    return Run(result=result, verifier_dir=trial.paths.verifier_dir)


@pytest.fixture(scope="module")
async def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[tuple[str, str], Run]:
    """Every sample under every agent, all at once: one trial takes seconds, mostly waiting."""
    root = tmp_path_factory.mktemp("samples")
    pairs = [(task, agent) for task in SAMPLES for agent in AGENTS]
    done = await asyncio.gather(*(run_trial(task, agent, root) for task, agent in pairs))
    return {(task.name, agent): run for (task, agent), run in zip(pairs, done, strict=True)}


def assert_harbor_reads(run: Run, task: str) -> None:
    """Harbor's own verdict: the file's rewards, except for the null key it refuses."""
    if task == NULL_KEY_TASK:
        assert run.result.verifier_result is None
        assert run.result.exception_info is not None
        assert run.result.exception_info.exception_type == "VerifierOutputParseError"
    else:
        assert run.result.exception_info is None
        assert run.result.verifier_result is not None
        assert run.result.verifier_result.rewards == run.raw_rewards()


# --- Shipping and conventions ----------------------------------------------------------


def test_samples_ship_inside_the_package() -> None:
    tasks_dir = resources.files("harbor_ray") / "samples" / "tasks"

    assert isinstance(tasks_dir, Path)
    assert sorted(path.name for path in tasks_dir.iterdir()) == SAMPLE_NAMES
    assert all(task.path.parent == tasks_dir for task in SAMPLES)
    assert {MULTI_KEY_TASK, NULL_KEY_TASK} <= set(SAMPLE_NAMES)


@pytest.mark.parametrize("task", SAMPLES, ids=SAMPLE_NAMES)
def test_each_sample_declares_no_image_and_brings_its_files(task: TaskRef) -> None:
    """A sample needs only what any sandbox has (no image: the local sandbox runs it
    honestly), and what the agent finds in /app is its environment/, copied in."""
    assert task.environment.kind is NeedKind.NONE
    assert uploads_environment_dir(task.path / "environment")
    assert task.workdir == "/app"
    assert task.has_solution


# --- Real trials -----------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.parametrize("task", SAMPLE_NAMES)
def test_the_oracle_scores_one(runs: dict[tuple[str, str], Run], task: str) -> None:
    run = runs[task, "oracle"]

    assert run.raw_rewards()["reward"] == 1.0
    assert_harbor_reads(run, task)


@pytest.mark.integration
@pytest.mark.parametrize("task", SAMPLE_NAMES)
def test_the_nop_agent_scores_zero(runs: dict[tuple[str, str], Run], task: str) -> None:
    run = runs[task, "nop"]

    assert run.raw_rewards()["reward"] == 0.0
    assert_harbor_reads(run, task)


@pytest.mark.integration
def test_a_multi_key_reward_travels_whole(runs: dict[tuple[str, str], Run]) -> None:
    oracle = runs[MULTI_KEY_TASK, "oracle"].result.verifier_result
    nop = runs[MULTI_KEY_TASK, "nop"].result.verifier_result

    assert oracle is not None and nop is not None
    assert oracle.rewards == {"reward": 1.0, "style": 1.0, "tests_passed": 3}
    # The untouched file passes the one check integer division gets right.
    assert nop.rewards == {"reward": 0.0, "style": 1.0, "tests_passed": 1}


@pytest.mark.integration
def test_harbor_refuses_a_null_reward_key(runs: dict[tuple[str, str], Run]) -> None:
    run = runs[NULL_KEY_TASK, "oracle"]

    assert run.raw_rewards() == {"reward": 1.0, "latency_bonus": None}
    assert run.result.verifier_result is None
    assert run.result.exception_info is not None
    assert "Non-numeric reward None" in run.result.exception_info.exception_message
