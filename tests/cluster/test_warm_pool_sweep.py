"""A sweep's warm pool on a real local Ray with real Harbor trials (the oracle agent, the
local sandbox, and the container sandbox over a task's own image): rollouts take
sandboxes their host started ahead of them, and once the hosts end (or one is killed) no
sandbox process, directory or ledger line is left."""

from __future__ import annotations

import asyncio
import dataclasses
import shutil
from pathlib import Path

import pytest

from harbor_ray.cluster.sweep import SweepConfig, SweepStats, in_sandboxes_dir, run_rollouts
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import RolloutSpec, make_specs
from harbor_ray.trials.warm_pool import Ledger
from tests.fixtures.cluster_actors import kill_the_only_host, session_hosts
from tests.fixtures.images import JQ_TASK
from tests.processes import sandbox_processes

pytestmark = pytest.mark.integration

TASK = "hello-file"


def specs_for(
    out: Path,
    attempts: int,
    *,
    dataset: str = "samples",
    task: str = TASK,
    sandbox: str = "local",
    **sandbox_kwargs: str,
) -> list[RolloutSpec]:
    specs = make_specs(
        select_tasks(resolve_dataset(dataset), [task]),
        attempts,
        agent="oracle",
        sandbox=sandbox,
        trials_dir=out / "trials",
        run_id="w",
        deadline_s=300,
        sandbox_kwargs=sandbox_kwargs,
    )
    return in_sandboxes_dir(specs, out / "sandboxes")


def left_behind(config: SweepConfig) -> tuple[list[str], list[Path], list[int]]:
    """Ledger lines, sandbox directories and sandbox processes left under OUT."""
    ledgers = config.ledgers_dir
    lines = [
        line
        for ledger in (ledgers.iterdir() if ledgers.is_dir() else ())
        for line in Ledger(ledger).listed()
    ]
    sandboxes = config.sandboxes_dir
    directories = [
        p for host in (sandboxes.iterdir() if sandboxes.is_dir() else ()) for p in host.iterdir()
    ]
    return lines, directories, sandbox_processes(sandboxes) if sandboxes.is_dir() else []


@pytest.mark.parametrize("sandbox", ["local", "container"])
async def test_rollouts_take_pooled_sandboxes_and_the_hosts_leave_nothing(
    tmp_path: Path, ray_cluster: None, sandbox: str, request: pytest.FixtureRequest
) -> None:
    out = tmp_path / "out"
    if sandbox == "local":
        task, specs = TASK, specs_for(out, 3)
    else:  # jq-data's oracle scores 1 only in its own image (its data file and jq)
        task = JQ_TASK.name
        specs = specs_for(
            out,
            3,
            dataset=str(JQ_TASK),
            task=task,
            sandbox=sandbox,
            images_dir=str(request.getfixturevalue("images_dir")),
        )
    config = SweepConfig(out=out, concurrency=1, rollouts_per_host=1, warm_pool={task: 1})
    rows = []
    await run_rollouts(specs, config, SweepStats(total=3), rows.append)

    assert [(r.result.ok, r.result.reward) for r in rows] == [(True, 1.0)] * 3
    assert {r.result.environment for r in rows} == {"host" if sandbox == "local" else "image"}
    logs = [(out / "trials" / r.result.rollout_id / "trial.log").read_text() for r in rows]
    # One host runs them one after another: the first shows the pool what its sandbox
    # holds (and starts its own through it); each later one takes the one made ready.
    assert ["from the warm pool ready" in log for log in logs] == [False, True, True]
    # The host ended normally: its pool stopped the sandbox it still held.
    assert left_behind(config) == ([], [], [])


async def test_a_killed_hosts_pooled_sandboxes_are_reaped(
    tmp_path: Path, ray_cluster: None
) -> None:
    out = tmp_path / "out"
    config = SweepConfig(
        out=out, concurrency=1, rollouts_per_host=1, retries=0, warm_pool={TASK: 1}
    )
    # A solution that outlives the test's patience: the host dies under it.
    [spec] = specs_for(out, 1)
    slow = tmp_path / TASK
    shutil.copytree(spec.task.path, slow)
    (slow / "solution" / "solve.sh").write_text("#!/bin/bash\nsleep 600\n")
    spec = dataclasses.replace(spec, task=spec.task.model_copy(update={"path": slow}))
    rows = []
    before = session_hosts()
    running = asyncio.create_task(run_rollouts([spec], config, SweepStats(total=1), rows.append))
    # Wait until the host holds two started sandboxes: its rollout's, and a ready one.
    async with asyncio.timeout(120):
        while len(left_behind(config)[0]) < 2:
            assert not running.done()
            await asyncio.sleep(0.2)
    kill_the_only_host(before)
    async with asyncio.timeout(120):
        await running
    assert [r.result.error_type for r in rows] == ["infra_lost"]
    async with asyncio.timeout(60):  # the reapers run on the node, not waited for
        while left_behind(config) != ([], [], []):
            await asyncio.sleep(0.2)
