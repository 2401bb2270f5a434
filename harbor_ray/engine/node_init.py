"""Ray Serve LLM's node initialisation, skipped for a model already on disk.

Before it starts vLLM, Ray Serve LLM runs a Ray task on every node of the engine's
placement group to download the model (`initialize_node`). For a local directory that
task finds nothing to download and returns the path unchanged, but it still starts a
worker process that imports torch and transformers (its cost: docs/performance.md,
"Start-up"). This callback skips it when the model is a local directory.
"""

from __future__ import annotations

from pathlib import Path

# Ray Serve LLM's callback hook (LLMConfig.callback_config) takes a subclass of this;
# ray.serve.llm does not re-export it.
from ray.llm._internal.common.callbacks.base import CallbackBase


class SkipNodeInitForLocalModel(CallbackBase):
    """Skip the download step when the model source is a directory on this node."""

    async def on_before_node_init(self) -> None:
        # LLMConfig has validated the dict it may be given into a ModelLoadingConfig.
        source = self.llm_config.model_loading_config.model_source  # type: ignore[union-attr]
        if isinstance(source, str) and Path(source).is_dir():
            self.ctx.run_init_node = False
