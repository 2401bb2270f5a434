"""Local sandboxes for Harbor trials on machines without a container engine.

`BwrapEnvironment` is a Harbor environment built on bubblewrap; plug it in with
`EnvironmentConfig(import_path="harbor_ray.trials.sandbox.bwrap:BwrapEnvironment")`.
`find_problems()` says what this machine lacks to run it.

The names below are imported on first use: a rollout host's guard runs
`python -m harbor_ray.trials.sandbox.leftovers`, which must not pay for Harbor's imports.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from harbor_ray.errors import ExecTimeoutError, SandboxError, SandboxUnavailableError
    from harbor_ray.trials.sandbox.bwrap import BwrapEnvironment, shares_host_network
    from harbor_ray.trials.sandbox.preflight import find_problems

__all__ = [
    "BwrapEnvironment",
    "ExecTimeoutError",
    "SandboxError",
    "SandboxUnavailableError",
    "find_problems",
    "shares_host_network",
]

_HOMES = {
    "BwrapEnvironment": "harbor_ray.trials.sandbox.bwrap",
    "shares_host_network": "harbor_ray.trials.sandbox.bwrap",
    "find_problems": "harbor_ray.trials.sandbox.preflight",
    "ExecTimeoutError": "harbor_ray.errors",
    "SandboxError": "harbor_ray.errors",
    "SandboxUnavailableError": "harbor_ray.errors",
}


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_HOMES[name]), name)
