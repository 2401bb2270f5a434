"""The logprobs a turn records are those of the distribution its tokens were drawn from:
sampled at temperature 0.7 on the real engine, they are the model's re-scored at
logits / 0.7 (what a trainer computes), not at temperature 1."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from harbor_ray.capture.core.sampling import Sampling, TurnSampling
from harbor_ray.capture.proxy.local import local_capture
from harbor_ray.capture.proxy.upstream import HttpEngine
from tests.fixtures.policy_step import CHANGED, SAME, max_gap, rescore

pytestmark = pytest.mark.integration

TEMPERATURE = 0.7


async def test_recorded_logprobs_match_a_rescore_at_the_sampling_temperature(
    engine_url: str, prepared_model_dir: Path
) -> None:
    engine = HttpEngine(engine_url)
    try:
        async with local_capture(engine, engine.root) as capture:
            info = await capture.open_session(
                budget=None, sampling=Sampling(temperature=TEMPERATURE, max_tokens=48)
            )
            async with httpx.AsyncClient(timeout=300) as http:
                reply = await http.post(
                    f"{capture.host_url}/v1/chat/completions",
                    headers={"authorization": f"Bearer {info.key}"},
                    json={
                        "model": capture.served_model,
                        "messages": [
                            {"role": "user", "content": "Write a short poem about the sea."}
                        ],
                    },
                )
            assert reply.status_code == 200, reply.text
            closed = await capture.close_session(info.session_id)
    finally:
        await engine.aclose()
    [turn] = closed.turns
    assert turn.logprobs_mode == "processed"
    assert turn.sampling == TurnSampling(temperature=TEMPERATURE)
    ids = [*turn.prompt_ids.tolist(), *turn.token_ids.tolist()]
    mask = [0] * len(turn.prompt_ids) + [1] * len(turn.token_ids)
    recorded = turn.logprobs.tolist()
    at_sampling = max_gap(recorded, rescore(prepared_model_dir, ids, mask, TEMPERATURE))
    at_one = max_gap(recorded, rescore(prepared_model_dir, ids, mask))
    print(
        f"{len(recorded)} sampled ids: max |dlogp| {at_sampling:.2e} against the model at "
        f"T={TEMPERATURE}, {at_one:.2e} against it at T=1"
    )
    assert at_sampling < SAME
    assert at_one > CHANGED  # the comparison can tell the two apart
