"""EngineConfig validation and its translation to Ray Serve LLM, plus the shipped YAMLs."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError
from ray.serve.schema import ServeDeploySchema

from harbor_ray.engine.config import WORKER_EXTENSION, EngineConfig, to_llm_config
from harbor_ray.engine.weights import LABEL_METHOD
from harbor_ray.engine.worker import RELOAD_METHOD

SERVE_CONFIGS = Path(__file__).resolve().parents[2] / "serve_configs"


def _engine_args(name: str) -> dict[str, Any]:
    # Validated the way `serve run` reads the file before calling the builder.
    deploy = ServeDeploySchema.model_validate(yaml.safe_load((SERVE_CONFIGS / name).read_text()))
    (app,) = deploy.applications
    assert app.import_path == "harbor_ray.engine.serve:build_engine_app"
    return dict(app.args)


def test_every_field_is_described() -> None:
    undescribed = [n for n, f in EngineConfig.model_fields.items() if not f.description]
    assert undescribed == []


def test_unknown_fields_are_refused() -> None:
    with pytest.raises(ValidationError, match="modle_id"):
        EngineConfig.model_validate({"modle_id": "x"})


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ({"engine_kwargs": {"dtype": "half"}}, "repeats \\['dtype'\\]"),
        ({"accelerator_type": "L4"}, "only with accelerator: gpu"),
        ({"tensor_parallel_size": 0}, "greater than or equal to 1"),
        ({"dtype": "fp8"}, "dtype"),
        ({"engine_kwargs": {"chat_template": "t.jinja"}}, "repeats \\['chat_template'\\]"),
        ({"engine_kwargs": {"enable_lora": True}}, "repeats \\['enable_lora'\\]"),
        ({"lora": {"max_rank": 12}}, "lora.max_rank\n  Input should be 1, 8, 16"),
        # one slot cannot hold the version in flight and the new one at once
        ({"lora": {"max_loras": 1}}, "greater than or equal to 2"),
        ({"lora": {"rank": 8}}, "lora.rank\n  Extra inputs"),
    ],
)
def test_contradictions_are_refused(args: dict[str, Any], message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        EngineConfig.model_validate(args)


def test_cpu_yaml_is_the_default_model_on_one_cpu() -> None:
    config = EngineConfig.model_validate(_engine_args("engine_cpu.yaml"))
    assert config.uses_default_model
    llm = to_llm_config(config, "/models/smollm2", Path("/t/smollm2_chat.jinja"))
    assert llm.model_loading_config.model_source == "/models/smollm2"
    assert llm.engine_kwargs["chat_template"] == "/t/smollm2_chat.jinja"
    # torch.compile stays on (eager costs 15-20% of tokens/s); native tool calling.
    assert "enforce_eager" not in llm.engine_kwargs
    assert llm.engine_kwargs["enable_auto_tool_choice"] is True
    assert llm.engine_kwargs["tool_call_parser"] == "xlam"
    assert llm.model_id == config.model_id
    assert llm.accelerator_config.kind == "cpu"
    assert llm.engine_kwargs["dtype"] == "float32"
    assert llm.get_engine_config().placement_bundles == [{"CPU": 1}]
    # The replica actor must not add its own CPU to the engine's bundle.
    assert llm.deployment_config["ray_actor_options"] == {"num_cpus": 0}
    env = dict(llm.runtime_env["env_vars"])
    assert Path(env.pop("VLLM_CACHE_ROOT")).name == "vllm"
    assert Path(env.pop("TORCHINDUCTOR_CACHE_DIR")).name == "torchinductor"
    assert env == {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        # vLLM's AOT compile cache never loads on torch 2.13; its older one does.
        "VLLM_USE_AOT_COMPILE": "0",
    }


def test_gpu_yaml_asks_for_gpus_of_a_type() -> None:
    args = _engine_args("engine_gpu.yaml")
    config = EngineConfig.model_validate({**args, "tensor_parallel_size": 2})
    assert not config.uses_default_model
    llm = to_llm_config(config, config.model_source)
    assert llm.accelerator_config.kind == "gpu"
    bundles = llm.get_engine_config().placement_bundles
    assert len(bundles) == 2
    gpu_type = f"accelerator_type:{args['accelerator_type']}"
    assert all(b["GPU"] == 1 and gpu_type in b for b in bundles)
    assert llm.engine_kwargs["tensor_parallel_size"] == 2
    assert llm.engine_kwargs["enable_auto_tool_choice"] is True


def test_engines_carry_the_weight_reload_worker_methods() -> None:
    llm = to_llm_config(EngineConfig(), "/m")
    assert llm.engine_kwargs["worker_extension_cls"] == WORKER_EXTENSION
    module, name = WORKER_EXTENSION.rsplit(".", 1)
    assert hasattr(getattr(importlib.import_module(module), name), RELOAD_METHOD)


def test_engines_serve_with_the_server_the_weight_updater_labels() -> None:
    server = to_llm_config(EngineConfig(), "/m").server_cls  # the class, once validated
    assert hasattr(server, LABEL_METHOD)


def test_max_model_len_is_left_to_vllm_when_unset() -> None:
    llm = to_llm_config(EngineConfig(), "/m")
    assert "max_model_len" not in llm.engine_kwargs


def test_compile_caches_live_under_the_model_cache() -> None:
    # Where the compiled model is kept, so that a later start loads it.
    llm = to_llm_config(EngineConfig(cache_dir=Path("/models")), "/m")
    assert llm.runtime_env == {
        "env_vars": {
            "VLLM_CACHE_ROOT": "/models/vllm",
            "TORCHINDUCTOR_CACHE_DIR": "/models/torchinductor",
        }
    }


def test_compile_caches_follow_the_default_model_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    llm = to_llm_config(EngineConfig(), "/m")
    assert llm.runtime_env["env_vars"]["VLLM_CACHE_ROOT"] == str(
        tmp_path / "harbor_ray" / "models" / "vllm"
    )


def test_a_cache_named_in_env_vars_wins() -> None:
    config = EngineConfig(cache_dir=Path("/models"), env_vars={"VLLM_CACHE_ROOT": "/fast/vllm"})
    llm = to_llm_config(config, "/m")
    assert llm.runtime_env == {
        "env_vars": {
            "VLLM_CACHE_ROOT": "/fast/vllm",
            "TORCHINDUCTOR_CACHE_DIR": "/models/torchinductor",
        }
    }


def test_no_template_named_leaves_the_models_own() -> None:
    llm = to_llm_config(EngineConfig(), "/models/smollm2")
    assert "chat_template" not in llm.engine_kwargs


def test_gpu_yaml_serves_tool_calls() -> None:
    config = EngineConfig.model_validate(_engine_args("engine_gpu.yaml"))
    assert config.engine_kwargs["enable_auto_tool_choice"] is True
    assert config.engine_kwargs["tool_call_parser"] == "hermes"  # Qwen2.5's form


def test_several_replicas_route_each_session_to_one_unless_asked_otherwise() -> None:
    router = "harbor_ray.engine.routing.SessionAffinityRouter"
    two = to_llm_config(EngineConfig(num_replicas=2), "/m")
    assert two.deployment_config["request_router_config"] == {"request_router_class": router}
    module, name = router.rsplit(".", 1)
    assert getattr(importlib.import_module(module), name).__name__ == name
    # Serve's default router: on request, and with one replica (nothing to choose).
    assert (
        "request_router_config"
        not in to_llm_config(EngineConfig(num_replicas=2, routing="load"), "/m").deployment_config
    )
    assert "request_router_config" not in to_llm_config(EngineConfig(), "/m").deployment_config
    with pytest.raises(ValidationError):
        EngineConfig(routing="round_robin")  # type: ignore[arg-type]


def test_lora_becomes_vllms_lora_arguments() -> None:
    config = EngineConfig.model_validate({"lora": {"max_rank": 8, "max_loras": 3}})
    kwargs = to_llm_config(config, "/models/smollm2").engine_kwargs
    assert (kwargs["enable_lora"], kwargs["max_lora_rank"], kwargs["max_loras"]) == (True, 8, 3)
    assert "enable_lora" not in to_llm_config(EngineConfig(), "/m").engine_kwargs
