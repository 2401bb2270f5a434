"""harbor_ray: Harbor tasks as trainable RL environments, with exact token capture.

What a user imports, by job (each name is imported on first use: `import harbor_ray`
alone does not import Ray, vLLM or Harbor):

- run a sweep on Ray into a Parquet dataset: `SweepRequest`, `run_sweep`;
- run rollouts in this process into results.jsonl: `RolloutRequest`, `run_rollouts`;
- qualify agent CLIs: `QualifyRequest`, `run_qualify`;
- read a dataset: `read_rollouts`, `read_sequences`, `read_turns` (Ray Datasets);
- drive the online service from a trainer: `Client`, `AsyncClient`;
- catch what harbor_ray refuses: `HarborRayError` and its branches (the tree is drawn
  in `harbor_ray.errors`), and `Interrupted`, which `run_sweep` and `run_rollouts` raise
  when SIGINT or SIGTERM stops them.

    import harbor_ray
    stats = harbor_ray.run_sweep(harbor_ray.SweepRequest(agent="oracle", out=Path("out")))
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# name -> the module that defines it (type checkers read the imports below instead)
_WHERE = {
    "SweepRequest": "harbor_ray.jobs.sweep",
    "run_sweep": "harbor_ray.jobs.sweep",
    "RolloutRequest": "harbor_ray.jobs.rollouts",
    "run_rollouts": "harbor_ray.jobs.rollouts",
    "QualifyRequest": "harbor_ray.jobs.qualification",
    "run_qualify": "harbor_ray.jobs.qualification",
    "read_rollouts": "harbor_ray.data.readers",
    "read_sequences": "harbor_ray.data.readers",
    "read_turns": "harbor_ray.data.readers",
    "Client": "harbor_ray.client",
    "AsyncClient": "harbor_ray.client",
    **dict.fromkeys(
        [
            "HarborRayError",
            "StartError",
            "CaptureError",
            "TrialError",
            "DataError",
            "ReportError",
            "EngineSetupError",
            "OnlineError",
            "ClientError",
            "Interrupted",
        ],
        "harbor_ray.errors",
    ),
}

__all__ = [
    "AsyncClient",
    "CaptureError",
    "Client",
    "ClientError",
    "DataError",
    "EngineSetupError",
    "HarborRayError",
    "Interrupted",
    "OnlineError",
    "QualifyRequest",
    "ReportError",
    "RolloutRequest",
    "StartError",
    "SweepRequest",
    "TrialError",
    "__version__",
    "read_rollouts",
    "read_sequences",
    "read_turns",
    "run_qualify",
    "run_rollouts",
    "run_sweep",
]

if TYPE_CHECKING:
    __version__: str
    from harbor_ray.client import AsyncClient, Client
    from harbor_ray.data.readers import read_rollouts, read_sequences, read_turns
    from harbor_ray.errors import (
        CaptureError,
        ClientError,
        DataError,
        EngineSetupError,
        HarborRayError,
        Interrupted,
        OnlineError,
        ReportError,
        StartError,
        TrialError,
    )
    from harbor_ray.jobs.qualification import QualifyRequest, run_qualify
    from harbor_ray.jobs.rollouts import RolloutRequest, run_rollouts
    from harbor_ray.jobs.sweep import SweepRequest, run_sweep


def __getattr__(name: str) -> Any:
    if name == "__version__":  # the installed distribution's; reading it costs ~0.5 s
        value: Any = importlib.import_module("importlib.metadata").version("harbor-ray")
    elif name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
    else:
        raise AttributeError(f"module 'harbor_ray' has no attribute {name!r}")
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
