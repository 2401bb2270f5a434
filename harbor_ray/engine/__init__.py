"""The inference engine harbor_ray starts itself: the offline default model and vLLM
served by Ray Serve LLM (see serve_configs/engine_*.yaml).

Importing this package stays light; `lifecycle` and `serve` pull in Ray Serve LLM and
vLLM, so import them from their modules when needed.
"""

from harbor_ray.engine.model import (
    MODEL_NAME,
    Progress,
    default_cache_dir,
    default_model_dir,
    prepare_model,
)
from harbor_ray.errors import ModelUnavailableError

__all__ = [
    "MODEL_NAME",
    "ModelUnavailableError",
    "Progress",
    "default_cache_dir",
    "default_model_dir",
    "prepare_model",
]
