"""`harbor_ray.jobs.rollouts`: rollouts in this process, each line of results.jsonl
written by the library as its rollout lands, each stage of each trial heard as it is
reached."""

import json
from pathlib import Path

import pytest

from harbor_ray.errors import StartError
from harbor_ray.jobs.rollouts import RolloutRequest, run_rollouts
from harbor_ray.trials.stages import Stage


def test_an_agent_that_calls_a_model_needs_an_engine(tmp_path: Path) -> None:
    with pytest.raises(StartError, match="--llm-url"):
        run_rollouts(RolloutRequest(agent="terminus-2", out=tmp_path))
    assert not (tmp_path / "results.jsonl").exists()


def test_no_rollouts_at_once_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StartError, match="--concurrency"):
        run_rollouts(RolloutRequest(agent="oracle", concurrency=0, out=tmp_path))


@pytest.mark.integration
def test_the_rollouts_land_in_results_jsonl(tmp_path: Path) -> None:
    planned: list[int] = []
    seen: list[str] = []
    stages: list[tuple[str, Stage]] = []
    request = RolloutRequest(agent="oracle", tasks=["hello-file"], attempts=2, out=tmp_path)
    records = run_rollouts(
        request,
        on_planned=planned.append,
        on_result=lambda r: seen.append(r.rollout_id),
        on_stage=lambda rollout, stage: stages.append((rollout, stage)),
    )
    assert planned == [2] and sorted(seen) == sorted(r.rollout_id for r in records)
    # One rollout at a time: each trial's stages, in order, before the next one's.
    assert stages == [(r.rollout_id, stage) for r in records for stage in Stage]
    lines = [json.loads(x) for x in request.results_path.read_text().splitlines()]
    assert [(x["task"], x["ok"], x["reward"]) for x in lines] == [("hello-file", True, 1.0)] * 2
    assert all("capture" in x for x in lines)
