"""A host killed mid-burst on a real local Ray: its warm pool drew its starts from the
run's bucket actor, kept to the rate, and every sandbox it had started (pooled or
handed out) is stopped by the reaper from its ledger: starts == stops."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest
import ray

from harbor_ray.cluster.reaper import reap_pool
from harbor_ray.cluster.start_bucket import StartBuckets
from harbor_ray.trials.start_rate import StartRate
from tests.rates import went_early
from tests.trials import fake_backend
from tests.trials.fake_backend import FakeBackend, PoolHost

pytestmark = pytest.mark.integration

RATE = 50.0


@pytest.fixture(scope="module", autouse=True)
def _by_value(ray_cluster: None):
    ray.cloudpickle.register_pickle_by_value(fake_backend)


async def test_a_host_killed_mid_burst_leaks_no_sandbox(tmp_path: Path) -> None:
    backend, ledger = FakeBackend(tmp_path / "backend"), tmp_path / "ledger"
    since = time.time()  # the bucket actor is made after this
    buckets = StartBuckets(StartRate(per_s=RATE))
    host = (
        ray.remote(PoolHost)
        .options(num_cpus=0)
        .remote(backend, {"env-a": 5}, ledger, buckets.of("fake"))
    )
    pid = await host.pid.remote()
    burst = host.burst.remote("env-a", 500)
    async with asyncio.timeout(60):
        while len(backend.events("start")) < 100:
            await asyncio.sleep(0.05)
    ray.kill(host)
    with pytest.raises(ray.exceptions.RayActorError):
        await burst
    async with asyncio.timeout(30):  # Ray's kill is asynchronous: until the process is gone
        while Path(f"/proc/{pid}").exists():
            await asyncio.sleep(0.05)
    started = backend.events("start")
    assert len(backend.live()) == len(started) >= 100  # none stopped: its host died
    assert went_early(started, since, RATE) == []  # late is allowed, early is not

    node_id = ray.get_runtime_context().get_node_id()
    assert await reap_pool(ledger, backend, node_id) == len(started)
    assert backend.live() == [] and len(backend.events("stop")) == len(started)
    buckets.close()
