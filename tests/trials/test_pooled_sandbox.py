"""The local sandbox's warm pool with real bwrap and real Harbor trials: a trial takes a
sandbox started before it existed, its logs reach its trial directory, and the pool
leaves no process, directory or ledger line behind."""

from __future__ import annotations

import asyncio
from pathlib import Path, PurePosixPath

import pytest
from harbor.models.trial.config import AgentConfig, TaskConfig, TrialConfig
from harbor.models.trial.config import EnvironmentConfig as TrialEnvironmentConfig
from harbor.trial.trial import Trial

from harbor_ray.cluster.sweep import check_warm_pool
from harbor_ray.errors import HarborRayError, WarmPoolUnsupportedError
from harbor_ray.trials.sandbox.pooled import (
    BwrapBackend,
    Recipe,
    register_pool,
    unregister_pool,
)
from harbor_ray.trials.warm_pool import Ledger, WarmPool
from tests.processes import sandbox_processes
from tests.trials.test_bwrap_sandbox import IMPORT_PATH, write_task

pytestmark = pytest.mark.integration


def trial_config(tmp_path: Path, task: Path, sandboxes: Path, number: int) -> TrialConfig:
    return TrialConfig(
        task=TaskConfig(path=task),
        trials_dir=tmp_path / "trials",
        trial_name=f"t{number}",
        agent=AgentConfig(name="oracle"),
        environment=TrialEnvironmentConfig(
            import_path=IMPORT_PATH,
            kwargs={
                "sandboxes_dir": str(sandboxes),
                "warm_pool": "host-1",
                "warm_pool_environment": "answer-task",
            },
        ),
    )


async def test_trials_take_pooled_sandboxes_and_the_pool_leaves_nothing(tmp_path: Path) -> None:
    task = write_task(tmp_path / "answer-task", "$((6 * 7))")
    sandboxes, ledger = tmp_path / "sandboxes", Ledger(tmp_path / "ledger")
    backend = BwrapBackend(sandboxes)
    pool = WarmPool(backend, {"answer-task": 1}, ledger)
    register_pool("host-1", pool, backend)
    try:
        results = []
        for number in range(3):
            trial = await Trial.create(trial_config(tmp_path, task, sandboxes, number))
            results.append((trial, await trial.run()))
            # The refill its start began has its sandbox ready before the next trial.
            while pool.ready("answer-task") < 1:
                await asyncio.sleep(0.05)
            assert len(ledger.listed()) == 1  # the ready one; the trial's went with it
    finally:
        unregister_pool("host-1")
        await pool.close()

    for trial, result in results:
        assert result.exception_info is None
        assert result.verifier_result is not None
        assert result.verifier_result.rewards == {"reward": 1.0}
        # Harbor downloaded the verifier's logs from the pooled sandbox.
        assert (trial.paths.verifier_dir / "reward.txt").read_text().strip() == "1"
    took = [
        "from the warm pool ready" in (tmp_path / "trials" / f"t{n}" / "trial.log").read_text()
        for n in range(3)
    ]
    assert took == [False, True, True]  # the first showed the pool its recipe
    assert ledger.listed() == []
    assert list(sandboxes.iterdir()) == []
    assert sandbox_processes(sandboxes) == []


async def test_a_pooled_sandbox_a_dead_host_left_is_stopped_by_its_id(tmp_path: Path) -> None:
    sandboxes = tmp_path / "sandboxes"
    backend = BwrapBackend(sandboxes)
    backend.learn(
        "answer-task",
        Recipe(
            search_path=None,
            workdir=PurePosixPath("/app"),
            share_network=False,
            binds=(),
            forwards=(),
        ),
    )
    left = await backend.start("answer-task")  # its host then dies: nobody stops it
    assert sandbox_processes(sandboxes) != []  # its pid 1 runs
    # What the reaper does with a dead host's ledger line, on a fresh backend.
    await BwrapBackend(sandboxes).stop_id(left.sandbox_id)
    assert sandbox_processes(sandboxes) == []
    assert list(sandboxes.iterdir()) == []


@pytest.mark.parametrize("backend", ["docker", "modal", "daytona"])
def test_a_warm_pool_on_another_backend_is_refused_naming_the_fix(backend: str) -> None:
    with pytest.raises(WarmPoolUnsupportedError, match="--sandbox container or local") as refused:
        check_warm_pool(backend, {"hello-file": 1})
    assert isinstance(refused.value, HarborRayError)
    check_warm_pool(backend, {})  # no pool asked: nothing to refuse
    check_warm_pool("local", {"hello-file": 2})
    check_warm_pool("container", {"hello-file": 2})
