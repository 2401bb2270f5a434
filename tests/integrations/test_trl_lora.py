"""`WeightSync` with a peft model: only the adapter is saved, and the engine is asked
to load that directory as the step's version (a stand-in client; the real engine loads
it in tests/engine/test_lora_engine.py). Whole weights come with the tokenizer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from peft import LoraConfig, get_peft_model
from transformers import AutoConfig, AutoTokenizer

from harbor_ray.engine.checkpoints import check_adapter, is_adapter
from harbor_ray.integrations.trl import WeightSync
from tests.integrations.test_trl_correction import tiny_model, tokenizer


class Client:
    """The two calls `WeightSync` makes, recorded."""

    def __init__(self, version: int) -> None:
        self.version = version
        self.updates: list[tuple[str, int]] = []

    def policy(self) -> SimpleNamespace:
        return SimpleNamespace(version=self.version)

    def update_weights(self, path: str, version: int) -> None:
        self.updates.append((path, version))


def test_a_peft_model_is_synced_as_its_adapter_alone(tmp_path: Path) -> None:
    model = get_peft_model(tiny_model(), LoraConfig(r=4, target_modules=["q_proj", "v_proj"]))
    client = Client(version=5)
    sync = WeightSync(client, tmp_path, keep=1)  # type: ignore[arg-type]  # a stand-in
    sync.on_train_begin(None, SimpleNamespace(global_step=0), None)
    for step in (1, 2):
        sync.on_step_end(
            None, SimpleNamespace(global_step=step, is_world_process_zero=True), None, model=model
        )
    assert [version for _, version in client.updates] == [6, 7]  # from the serving 5
    path = client.updates[-1][0]
    assert Path(path) == (tmp_path / "version-7").resolve() and is_adapter(path)
    # The adapter's tensors only: A and B of q_proj and v_proj in the one layer.
    tensors = check_adapter(path, max_rank=4)
    assert len(tensors) == 4 and all("lora_" in name for name in tensors)
    assert [p.name for p in tmp_path.iterdir()] == ["version-7"]  # keep=1


def test_whole_weights_are_saved_with_the_tokenizer_a_sweep_can_serve(tmp_path: Path) -> None:
    """A full checkpoint is a model directory on its own: its weights and config, and the
    trainer's tokenizer (evaluating it is a sweep whose engine YAML names the directory)."""
    client = Client(version=0)
    sync = WeightSync(client, tmp_path)  # type: ignore[arg-type]  # a stand-in
    sync.on_train_begin(None, SimpleNamespace(global_step=0), None)
    step = SimpleNamespace(global_step=1, is_world_process_zero=True)
    sync.on_step_end(None, step, None, model=tiny_model(), processing_class=tokenizer())
    [(path, version)] = client.updates
    assert version == 1 and not is_adapter(path)
    reloaded = AutoTokenizer.from_pretrained(path)
    assert reloaded("w3 w4")["input_ids"] == tokenizer()("w3 w4")["input_ids"] == [3, 4]
    assert AutoConfig.from_pretrained(path).vocab_size == tiny_model().config.vocab_size
