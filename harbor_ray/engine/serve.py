"""The Ray Serve application builder behind `serve_configs/engine_*.yaml`.

A Serve YAML cannot hold a machine-specific model path, so it names this builder with
`args:` instead; `model_source: default` is resolved here, on the machine that builds
the application, by preparing the default model if it is missing. The builder takes a
plain dict and validates it itself, as ray.serve.llm's builders do, so the YAML works
with `serve run` unchanged.

The prepared directory is local to the node that builds the application (the driver,
or the node running Serve's build task); a multi-node cluster that may place the engine
elsewhere needs the same cache directory on every node, or a hub id as model_source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ray.serve import Application
from ray.serve.llm import build_openai_app

from harbor_ray.engine.config import EngineConfig, to_llm_config
from harbor_ray.engine.model import prepare_model
from harbor_ray.engine.tokenize import TokenizingIngress
from harbor_ray.switches import set_switches

DEFAULT_CHAT_TEMPLATE = Path(__file__).with_name("smollm2_chat.jinja")


def build_engine_app(args: dict[str, Any]) -> Application:
    """Build the OpenAI-compatible engine application from a Serve YAML's `args`."""
    set_switches()  # under `uv run serve run`: refused at once, naming the fix
    config = EngineConfig.model_validate(args)
    return build_openai_app(
        {
            "llm_configs": [
                to_llm_config(config, resolve_model_source(config), resolve_chat_template(config))
            ],
            # The ingress only relays HTTP. Its default CPU request competes with the
            # engine's, and on a 2-core machine Serve then waits forever for a CPU.
            "ingress_deployment_config": {"ray_actor_options": {"num_cpus": 0}},
            # /tokenize with chat messages, which the capture proxy's stitching needs.
            "ingress_cls_config": {"ingress_cls": TokenizingIngress},
        }
    )


def resolve_model_source(config: EngineConfig) -> str:
    """What vLLM loads: `default` becomes the prepared model's directory (made if missing)."""
    if config.uses_default_model:
        return str(prepare_model(config.cache_dir))
    return config.model_source


def resolve_chat_template(config: EngineConfig) -> Path | None:
    """The template vLLM renders prompts with: the config's, else the shipped one for the
    default model (SmolLM2's own ignores `tools`), else None (the model's own)."""
    if config.chat_template is not None:
        return config.chat_template
    return DEFAULT_CHAT_TEMPLATE if config.uses_default_model else None
