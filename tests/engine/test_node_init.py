"""Ray Serve LLM's per-node download step is skipped for a model already on disk only."""

from __future__ import annotations

from pathlib import Path

from harbor_ray.engine.config import EngineConfig, to_llm_config
from harbor_ray.engine.node_init import SkipNodeInitForLocalModel


async def _runs_node_init(model_source: str) -> bool:
    llm = to_llm_config(EngineConfig(), model_source)
    assert llm.callback_config.callback_class is SkipNodeInitForLocalModel
    callback = SkipNodeInitForLocalModel(llm_config=llm)
    await callback.run_callback("on_before_node_init")
    return callback.ctx.run_init_node


async def test_a_local_model_directory_skips_the_download_step(tmp_path: Path) -> None:
    assert not await _runs_node_init(str(tmp_path))


async def test_a_hub_id_or_a_missing_path_keeps_it(tmp_path: Path) -> None:
    assert await _runs_node_init("Qwen/Qwen2.5-7B-Instruct")
    assert await _runs_node_init(str(tmp_path / "absent"))
