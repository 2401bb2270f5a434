"""The process-wide switches every harbor_ray entry point sets, defined once.

These are not configuration: they keep libraries from doing what this deployment must
never do, and they are set (only where unset) before Ray, Harbor or LiteLLM is imported:
- Harbor's telemetry and LiteLLM's model cost map reach for the network at import;
- under `uv run`, Ray starts every worker with `uv run` in an uploaded copy of the
  working dir, which re-resolves the environment without the engine extra; workers must
  use the driver's interpreter and venv.

The entry points (the CLI, jobs/sweep.py, the benchmarks, the tests) call `set_switches`;
actors get `WORKER_ENV` through their runtime env, since they are fresh processes.
"""

from __future__ import annotations

import os

__all__ = ["WORKER_ENV", "set_switches"]

WORKER_ENV = {"HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
_DRIVER_ONLY = {"RAY_ENABLE_UV_RUN_RUNTIME_ENV": "0"}


def set_switches() -> None:
    """Set every switch this process has not set itself."""
    for name, value in {**WORKER_ENV, **_DRIVER_ONLY}.items():
        os.environ.setdefault(name, value)
