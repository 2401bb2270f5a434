"""A sweep under the adaptive cap (issue 25, item 3): an engine stand-in's `/metrics`
says it is over-full, then idle; the cap falls, then rises, and every rollout still
ends as exactly one row. Integration: it starts Ray (about 30 s here)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pyarrow.parquet as pq
import pytest
import ray

from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import make_specs
from tests.cluster import stubs
from tests.fixtures.pressure_engine import BUSY, IDLE, scripted
from tests.fixtures.threaded import serve_in_thread

pytestmark = pytest.mark.integration

N = 60


@pytest.fixture(scope="module", autouse=True)
def _stubs_by_value(ray_cluster: None):
    ray.cloudpickle.register_pickle_by_value(stubs)


async def test_the_cap_follows_the_engine_and_every_rollout_is_one_row(tmp_path: Path) -> None:
    out = tmp_path / "out"
    tasks = select_tasks(resolve_dataset("samples"), ["hello-file"])
    specs = make_specs(
        tasks, N, agent="oracle", sandbox="local", trials_dir=out / "trials", run_id="t"
    )
    with serve_in_thread(scripted([BUSY] * 6 + [IDLE])) as url:
        config = SweepConfig(
            out=out,
            concurrency=8,
            min_concurrency=2,
            max_concurrency=24,
            engine_metrics=(f"{url}/metrics",),
            metrics_every_s=0.2,
        )
        stats = await sweep(specs, config, {}, work=stubs.sleeping_work(0.3))
    low, high = stats.limits_seen
    assert low == 2 and high > 8, stats.limits_seen
    rows = pq.read_table(out / "rollouts").to_pylist()
    assert Counter(r["rollout_id"] for r in rows) == Counter(s.rollout_id for s in specs)
    assert stats.done == stats.ok == N and stats.peak_in_flight <= 24
