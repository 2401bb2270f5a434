"""What an engine started from a Serve YAML serves, as the hashes every row carries:
the default model's files and the shipped template, a checkpoint saved from it, and a
hub id (not read here). Each hash is recomputed here from the files, by the recipe
SCHEMA.md documents, not by the code under test."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from harbor_ray.engine.lifecycle import _provenance
from harbor_ray.engine.provenance import served_provenance
from harbor_ray.engine.serve import build_engine_app

SHIPPED = Path(__file__).resolve().parents[2] / "harbor_ray/engine/smollm2_chat.jinja"


def _sha(*parts: bytes) -> str:
    return hashlib.sha256(b"".join(parts)).hexdigest()


def _tokenizer_sha(directory: Path) -> str:
    """tokenizer.json, then tokenizer_config.json without its template, each as sorted
    JSON (the two files the prepared model holds, in the documented order)."""
    tokenizer = json.loads((directory / "tokenizer.json").read_text())
    config = json.loads((directory / "tokenizer_config.json").read_text())
    config.pop("chat_template", None)
    return _sha(
        b"tokenizer.json\0",
        json.dumps(tokenizer, sort_keys=True).encode(),
        b"tokenizer_config.json\0",
        json.dumps(config, sort_keys=True).encode(),
    )


def test_the_default_engine_says_what_it_serves(prepared_model_dir: Path) -> None:
    served = _provenance(build_engine_app, {"cache_dir": str(prepared_model_dir.parent)})
    assert served is not None
    assert served.model_source == str(prepared_model_dir.resolve())
    assert served.chat_template_sha256 == _sha(SHIPPED.read_bytes())  # not the model's own
    weights = prepared_model_dir / "model.safetensors"
    assert served.weights_sha256 == _sha(b"model.safetensors\0", weights.read_bytes(), b"\0")
    assert served.tokenizer_sha256 == _tokenizer_sha(prepared_model_dir)
    assert served.harness_version is None  # the harness's half is the run's


def test_a_checkpoint_differs_in_its_weights_only_when_served_alike(
    prepared_model_dir: Path, tmp_path: Path
) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(prepared_model_dir)
    with torch.no_grad():
        model.model.norm.weight.add_(1e-3)  # one step's worth of change
    model.save_pretrained(tmp_path / "step-1")
    AutoTokenizer.from_pretrained(prepared_model_dir).save_pretrained(tmp_path / "step-1")
    base = served_provenance(str(prepared_model_dir), SHIPPED)
    step = served_provenance(str(tmp_path / "step-1"), SHIPPED)
    assert step.model_source == str((tmp_path / "step-1").resolve())
    assert step.weights_sha256 != base.weights_sha256
    assert (step.tokenizer_sha256, step.chat_template_sha256) == (
        base.tokenizer_sha256,
        base.chat_template_sha256,
    )
    # Served without the shipped template, the checkpoint renders with its own (which
    # ignores tools): a difference the rows must show.
    own = served_provenance(str(tmp_path / "step-1"), None)
    assert own.chat_template_sha256 == _sha(
        (tmp_path / "step-1" / "chat_template.jinja").read_bytes()
    )
    assert own.chat_template_sha256 != base.chat_template_sha256


def test_a_template_in_the_tokenizer_config_is_the_template_only(tmp_path: Path) -> None:
    def directory(name: str, template: str) -> Path:
        path = tmp_path / name
        path.mkdir()
        (path / "tokenizer_config.json").write_text(
            json.dumps({"chat_template": template, "eos_token": "</s>"})
        )
        (path / "tokenizer.json").write_text('{"model": {}}')
        return path

    one = served_provenance(str(directory("one", "{{ messages }}")), None)
    two = served_provenance(str(directory("two", "{{ messages }}!")), None)
    assert one.chat_template_sha256 == _sha(b"{{ messages }}")
    assert one.chat_template_sha256 != two.chat_template_sha256
    assert one.tokenizer_sha256 == two.tokenizer_sha256
    assert one.weights_sha256 is None  # no weight files: unknown, not a hash of nothing


@pytest.mark.parametrize("template", [None, SHIPPED])
def test_a_hub_id_is_named_not_read(template: Path | None) -> None:
    served = served_provenance("HuggingFaceTB/SmolLM2-135M-Instruct", template)
    assert served.model_source == "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert (served.weights_sha256, served.tokenizer_sha256) == (None, None)
    assert served.chat_template_sha256 == (None if template is None else _sha(SHIPPED.read_bytes()))
