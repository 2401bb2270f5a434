"""The online controller's adaptive cap (issue 25, item 3): the gate follows the engine's
`/metrics`, `/v1/stats` shows the cap, and every rollout still ends as one row."""

from __future__ import annotations

import asyncio
from pathlib import Path

from harbor_ray.online.wire import SubmitRequest
from tests.fixtures.pressure_engine import BUSY, IDLE, scripted
from tests.fixtures.threaded import serve_in_thread
from tests.online.local import LocalRollouts, local_controller

N = 120


async def test_the_cap_falls_under_pressure_then_rises_and_no_rollout_is_lost(
    tmp_path: Path,
) -> None:
    with serve_in_thread(scripted([BUSY] * 8 + [IDLE])) as url:
        runner = LocalRollouts(hold_s=0.02)
        controller = local_controller(
            tmp_path,
            runner=runner,
            concurrency=8,
            engine_metrics=(f"{url}/metrics",),
            min_concurrency=2,
            max_concurrency=16,
            metrics_every_s=0.01,
        )
        assert (await controller.stats()).concurrency_limit == 8
        await controller.submit(
            SubmitRequest.model_validate(
                {
                    "request_id": "r",
                    "tasks": [{"task": "hello-file", "n": N}],
                    "agent": "terminus-2",
                }
            )
        )
        seen: list[int] = []
        while (stats := await controller.stats()).finished < N:
            seen.append(stats.concurrency_limit)
            await asyncio.sleep(0.002)
        controller.shutdown()
    assert 2 in seen and max(seen[seen.index(2) :]) > 8, seen
    assert runner.started == N and stats.finished == N and stats.errors == {"agent_error": N}
