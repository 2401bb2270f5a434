"""A host killed mid-rollout on a real local Ray: its rollout's turns reach the dataset
from the host's journal, exactly once, as a partial `infra_lost` row; a retry adds its
own turns and none of the lost ones."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import pytest

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.cluster.sweep import SweepConfig, SweepStats, run_rollouts, sweep
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import make_specs
from tests.fixtures.cluster_actors import kill_the_only_host, session_hosts
from tests.fixtures.stub_agent import chat_agent
from tests.fixtures.threaded import fake_engine_in_thread

pytestmark = pytest.mark.integration

CALLS = 4
HELD_AFTER = 2  # calls answered (and journaled) before the first try holds


@pytest.fixture(scope="module")
def echo_engine(ray_cluster: None) -> Iterator[tuple[FakeEngine, str]]:
    with fake_engine_in_thread(FakeEngine()) as served:
        yield served


def _held_once(marker: str):
    """After call HELD_AFTER, the first try marks itself and waits forever; a retry
    (which finds the mark) goes on."""

    async def between(step: int) -> None:
        if step == HELD_AFTER - 1 and not Path(marker).exists():
            Path(marker).touch()
            await asyncio.Event().wait()

    return between


@pytest.mark.parametrize("retries", [0, 1])
async def test_a_killed_hosts_turns_are_in_the_dataset_exactly_once(
    tmp_path: Path, echo_engine: tuple[FakeEngine, str], retries: int
) -> None:
    engine, llm_url = echo_engine
    out, marker = tmp_path / "out", tmp_path / "held"
    [spec] = make_specs(
        select_tasks(resolve_dataset("samples"), ["hello-file"]),
        1,
        agent="terminus-2",
        sandbox="local",
        trials_dir=out / "trials",
        run_id="j",
        deadline_s=300,
    )
    config = SweepConfig(
        out=out,
        retries=retries,
        journal="fsync",
        proxy=ProxyTarget(llm_url, "fake-model", ingress="host"),
    )
    engine.calls.clear()
    before = session_hosts()
    running = asyncio.create_task(
        sweep([spec], config, {}, work=chat_agent(CALLS, between=_held_once(str(marker))))
    )
    async with asyncio.timeout(120):
        while not marker.exists():
            assert not running.done()
            await asyncio.sleep(0.1)
    host = kill_the_only_host(before)
    async with asyncio.timeout(120):
        stats = await running

    rows = {r["rollout_id"]: r for r in pq.read_table(out / "rollouts").to_pylist()}
    turns = pq.read_table(out / "turns").to_pylist()
    lost_id = spec.rollout_id if retries == 0 else f"{spec.rollout_id}@{host.split('-', 1)[1]}"
    lost = rows[lost_id]
    assert (lost["error_type"], lost["partial"], lost["trainable"], lost["ok"]) == (
        "infra_lost",
        True,
        False,
        False,
    )
    assert lost["counts"]["turns"] == HELD_AFTER
    # Every call the engine answered is one turn in the dataset: none lost, none twice.
    assert len(turns) == len(engine.calls) == HELD_AFTER + retries * CALLS
    # The retry asks the echo engine what the lost try asked, so answers repeat across
    # rows; within a row each call is there once.
    answered = [(t["rollout_id"], orjson.loads(t["response_message"])["content"]) for t in turns]
    assert len(set(answered)) == len(answered)
    # Its rows committed, no journal is left: not the dead host's, not the retry's.
    assert not list((out / "journal").glob("*.journal"))
    assert [t["index"] for t in turns if t["rollout_id"] == lost_id] == list(range(HELD_AFTER))
    sequences = pq.read_table(out / "sequences", columns=["rollout_id"]).to_pylist()
    assert any(row["rollout_id"] == lost_id for row in sequences)
    if retries:
        retried = rows[spec.rollout_id]
        assert retried["ok"] and not retried["partial"], retried["error"]
        assert retried["counts"]["turns"] == CALLS
        assert (stats.done, stats.ok, stats.salvaged) == (1, 1, 1)
    else:
        assert set(rows) == {spec.rollout_id}
        assert (stats.done, stats.failed) == (1, 1)


async def test_a_host_that_ends_normally_removes_its_journal(
    tmp_path: Path, echo_engine: tuple[FakeEngine, str]
) -> None:
    """Hosts ended by the driver, before the run removes any journal itself."""
    _, llm_url = echo_engine
    out = tmp_path / "out"
    specs = make_specs(
        select_tasks(resolve_dataset("samples"), ["hello-file"]),
        3,
        agent="terminus-2",
        sandbox="local",
        trials_dir=out / "trials",
        run_id="n",
        deadline_s=300,
    )
    config = SweepConfig(
        out=out,
        journal="fsync",
        rollouts_per_host=1,
        concurrency=3,
        proxy=ProxyTarget(llm_url, "fake-model", ingress="host"),
    )
    records: list[RolloutRecord] = []
    await run_rollouts(specs, config, SweepStats(total=3), records.append, work=chat_agent(CALLS))
    assert len(records) == 3 and all(r.result.ok for r in records)
    assert len({r.result.host for r in records}) == 3
    assert config.journaling.directory.is_dir()  # the hosts journaled there
    assert not list(config.journaling.directory.glob("*.journal"))
