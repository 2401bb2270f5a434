"""terminus-2 against the real engine: SmolLM2 on vLLM through Ray Serve LLM."""

from __future__ import annotations

from pathlib import Path

import pytest

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.proxy.local import local_capture
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.data.rebuild import export_document
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.rollout import RolloutSpec, run_rollout
from tests.fixtures.recording_engine import RecordingEngine, assert_turns_are_the_engines

pytestmark = pytest.mark.integration


async def test_terminus2_full_rollout_on_smollm2(tmp_path: Path, engine_url: str) -> None:
    (task,) = select_tasks(resolve_dataset("samples"), ["hello-file"])
    engine = HttpEngine(engine_url)
    recorder = RecordingEngine(engine)
    try:
        async with local_capture(recorder, engine.root) as capture:
            recorder.generations.clear()  # the certification's probes
            record = await run_rollout(
                RolloutSpec(
                    rollout_id="real-terminus",
                    task=task,
                    agent="terminus-2",
                    trials_dir=tmp_path / "trials",
                    budget=3,
                    deadline_s=900,
                    sampling=Sampling(temperature=0.7, max_tokens=48),
                    sandbox_kwargs={"sandboxes_dir": str(tmp_path / "sandboxes")},
                ),
                capture,
            )
    finally:
        await engine.aclose()
    result = record.result
    assert result.reward is not None, (result.error_type, result.error)
    assert result.model == capture.served_model
    doc = export_document(record)
    assert 1 <= result.model_calls <= 3
    assert doc["counts"]["turns"] == result.model_calls
    trainable = [s for s in doc["sequences"] if s["role"] == "agent" and any(s["loss_mask"])]
    assert trainable, doc["findings"]
    # Every turn is exactly the engine's reply to the call terminus-2 made.
    assert_turns_are_the_engines(doc["turns"], recorder.generations)
    for sent, _ in recorder.generations:
        assert sent["temperature"] == 0.7 and sent["max_tokens"] <= 48
    for turn in doc["turns"]:
        assert 0 < len(turn["token_ids"]) <= 48
        assert all(lp is not None and lp <= 0 for lp in turn["logprobs"])
