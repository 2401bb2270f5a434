"""engine_up refuses what it cannot honour before touching Ray (no cluster needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from harbor_ray.engine.lifecycle import engine_up
from harbor_ray.errors import EngineStartError

APP = {
    "name": "engine",
    "route_prefix": "/",
    "import_path": "harbor_ray.engine.serve:build_engine_app",
    "args": {"model_source": "/nonexistent/model"},
}


def _write(tmp_path: Path, config: dict) -> Path:
    path = tmp_path / "engine.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (
            {"applications": [APP, {**APP, "name": "other", "route_prefix": "/other"}]},
            "expected one application",
        ),
        ({"applications": [{**APP, "args": {"modle_id": "x"}}]}, "modle_id"),
        ({"applications": [{**APP, "import_path": ""}]}, "import_path"),
        (
            {"applications": [{**APP, "runtime_env": {"pip": ["x"]}}]},
            r"does not apply \['runtime_env'\].*serve run",
        ),
        ({"applications": [APP], "grpc_options": {"port": 9000}}, "grpc_options"),
    ],
)
def test_refuses_what_it_would_ignore(tmp_path: Path, config: dict, message: str) -> None:
    with pytest.raises(EngineStartError, match=message):
        engine_up(_write(tmp_path, config))


def test_cache_dir_only_applies_to_harbor_rays_builder(tmp_path: Path) -> None:
    app = {**APP, "import_path": "ray.serve.llm:build_openai_app", "args": {}}
    with pytest.raises(EngineStartError, match="cache_dir applies only"):
        engine_up(_write(tmp_path, {"applications": [app]}), cache_dir=tmp_path)
