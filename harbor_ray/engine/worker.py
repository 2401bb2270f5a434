"""Worker methods harbor_ray adds to every vLLM engine it builds (vLLM's `worker_extension_cls`).

vLLM's in-place `reload_weights` reprocesses a layer only when the checkpoint holds
weights for it. A head tied to the embeddings (SmolLM2's `tie_word_embeddings`) has none
of its own, so it keeps what its processing derived from the old weights: on the CPU
the oneDNN copy of the matrix its logits are computed with. The engine then serves new
layers under the old head, a model that is neither checkpoint. `reload_weights_tied`
reloads, then reprocesses every unquantised layer whose weight is shared with another.

Importing this module costs nothing; vLLM is imported in the worker, when it reloads.
"""

from __future__ import annotations

from typing import Any

RELOAD_METHOD = "reload_weights_tied"
"""The worker method `WeightUpdater` calls through `collective_rpc` to reload."""


class WeightReloadExtension:
    """Mixed into vLLM's worker class: `self` is the worker."""

    def reload_weights_tied(self, weights_path: str) -> int:
        """`reload_weights(weights_path=...)`, then refresh tied layers; returns how many."""
        worker: Any = self
        worker.reload_weights(weights_path=weights_path)
        from vllm.model_executor.layers.vocab_parallel_embedding import (
            UnquantizedEmbeddingMethod,
        )

        return refresh_tied_layers(worker.model_runner.get_model(), UnquantizedEmbeddingMethod)


def refresh_tied_layers(model: Any, method_type: type[Any]) -> int:
    """Re-run `process_weights_after_loading` on every layer of `model` whose `weight`
    parameter another layer shares and whose quant method is a `method_type` (one whose
    processing only derives from the weight, so running it again is safe)."""
    sharing: dict[int, list[Any]] = {}
    for module in model.modules():
        weight = module._parameters.get("weight")
        if weight is not None:
            sharing.setdefault(id(weight), []).append(module)
    refreshed = 0
    for modules in sharing.values():
        if len(modules) < 2:
            continue
        for module in modules:
            method = getattr(module, "quant_method", None)
            if isinstance(method, method_type):
                method.process_weights_after_loading(module)
                refreshed += 1
    return refreshed
