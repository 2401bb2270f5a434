"""The builder's model source: `default` is the prepared directory, anything else passes."""

from __future__ import annotations

from pathlib import Path

from harbor_ray.engine.config import EngineConfig
from harbor_ray.engine.serve import resolve_model_source


def test_default_source_is_the_prepared_dir(prepared_model_dir: Path) -> None:
    config = EngineConfig(cache_dir=prepared_model_dir.parent)
    assert resolve_model_source(config) == str(prepared_model_dir)


def test_other_sources_are_handed_to_vllm_as_is(tmp_path: Path) -> None:
    config = EngineConfig(model_source="Qwen/Qwen2.5-7B-Instruct", cache_dir=tmp_path)
    assert resolve_model_source(config) == "Qwen/Qwen2.5-7B-Instruct"
    assert list(tmp_path.iterdir()) == []
