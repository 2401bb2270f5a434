"""`WeightSync`: TRL's trained weights into the engine after every optimizer step, as
policy version `base + global_step`: the whole model, or a peft model's adapter alone."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from harbor_ray.client import Client
from harbor_ray.errors import TrainerError

__all__ = ["WeightSync"]


class WeightSync(TrainerCallback):
    """After every optimizer step: the model saved under `checkpoint_dir` and loaded into
    the engine as policy version `base + global_step` (`base`: the version serving when
    training began), before the next rollouts are submitted. Keeps the `keep` newest
    checkpoints (the engine reads the one it serves on a restart of a replica).

    A peft model (TRL's `peft_config`, or a `PeftModel` handed to the trainer) is saved
    as its adapter alone (`adapter_config.json`, `adapter_model.safetensors`: megabytes,
    not the whole model), which an engine with `lora:` loads as the new version
    (docs/trainers.md, "LoRA updates"). Whole weights are saved with the trainer's
    tokenizer (its `processing_class`), so that a checkpoint is a model directory a
    sweep's `--engine` can serve on its own (docs/evaluation.md)."""

    def __init__(self, client: Client, checkpoint_dir: str | Path, *, keep: int = 2) -> None:
        if keep < 1:
            raise TrainerError("WeightSync keeps at least the checkpoint the engine serves")
        self.client, self.dir, self.keep = client, Path(checkpoint_dir), keep
        self.base: int | None = None
        self.saved: list[Path] = []
        # (version, seconds) of every update, for a trainer's logs.
        self.updates: list[tuple[int, float]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.base = self.client.policy().version - state.global_step

    def on_step_end(
        self,
        args: Any,
        state: Any,
        control: Any,
        model: Any = None,
        processing_class: Any = None,
        **kwargs: Any,
    ) -> None:
        if not state.is_world_process_zero:
            return
        if model is None or self.base is None:
            raise TrainerError("WeightSync needs the trainer's model and on_train_begin")
        started = time.monotonic()
        version = self.base + state.global_step
        path = self.dir / f"version-{version}"
        model.save_pretrained(path, safe_serialization=True)
        if _is_peft(model):
            if not (path / "adapter_config.json").is_file():
                raise TrainerError(
                    f"the peft model saved no adapter_config.json in {path}: "
                    "train it as a peft PeftModel (TRL's peft_config)"
                )
        elif processing_class is not None:
            processing_class.save_pretrained(path)
        self.client.update_weights(str(path.resolve()), version)
        self.updates.append((version, time.monotonic() - started))
        self.saved.append(path)
        while len(self.saved) > self.keep:
            shutil.rmtree(self.saved.pop(0), ignore_errors=True)


def _is_peft(model: Any) -> bool:
    """Whether `model` trains peft adapters (a `PeftModel`, or a transformers model
    with adapters attached): its `save_pretrained` then writes only the adapter."""
    return bool(getattr(model, "peft_config", None))
