"""The builder's model source and chat template: `default` is the prepared directory with
the shipped template, anything else passes as is."""

from __future__ import annotations

from pathlib import Path

from harbor_ray.engine.config import EngineConfig
from harbor_ray.engine.serve import (
    DEFAULT_CHAT_TEMPLATE,
    resolve_chat_template,
    resolve_model_source,
)


def test_default_source_is_the_prepared_dir(prepared_model_dir: Path) -> None:
    config = EngineConfig(cache_dir=prepared_model_dir.parent)
    assert resolve_model_source(config) == str(prepared_model_dir)


def test_other_sources_are_handed_to_vllm_as_is(tmp_path: Path) -> None:
    config = EngineConfig(model_source="Qwen/Qwen2.5-7B-Instruct", cache_dir=tmp_path)
    assert resolve_model_source(config) == "Qwen/Qwen2.5-7B-Instruct"
    assert list(tmp_path.iterdir()) == []


def test_the_default_model_gets_the_shipped_template(tmp_path: Path) -> None:
    assert resolve_chat_template(EngineConfig()) == DEFAULT_CHAT_TEMPLATE
    assert DEFAULT_CHAT_TEMPLATE.is_file()


def test_other_models_keep_their_own_unless_one_is_named(tmp_path: Path) -> None:
    assert resolve_chat_template(EngineConfig(model_source="Qwen/Qwen2.5-7B-Instruct")) is None
    named = tmp_path / "t.jinja"
    assert resolve_chat_template(EngineConfig(chat_template=named)) == named
