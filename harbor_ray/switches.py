"""The process-wide switches every harbor_ray entry point sets, defined once.

These are not configuration: they keep libraries from doing what this deployment must
never do, and they are set (only where unset) before Ray, Harbor or LiteLLM is imported:
- Harbor's telemetry and LiteLLM's model cost map reach for the network at import;
- under `uv run`, Ray starts every worker with `uv run` in an uploaded copy of the
  working dir, which re-resolves the environment without the engine extra; workers must
  use the driver's interpreter and venv. Ray reads that switch once, when it is first
  imported: a driver under `uv run` that imported Ray before calling `set_switches`
  would fail later, with "Failed to startup worker after retrying 5 times"; it is
  refused at once instead, naming the fix.

The entry points (the CLI, `harbor_ray.jobs`, jobs/sweep.py, the benchmarks, the tests,
the online service's builders) call `set_switches`; actors get `WORKER_ENV` through
their runtime env, since they are fresh processes.
"""

from __future__ import annotations

import os
import sys

from harbor_ray.errors import StartError

__all__ = ["WORKER_ENV", "set_switches"]

WORKER_ENV = {"HARBOR_TELEMETRY": "0", "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
_UV_HOOK = "RAY_ENABLE_UV_RUN_RUNTIME_ENV"
_DRIVER_ONLY = {_UV_HOOK: "0"}


def set_switches() -> None:
    """Set every switch this process has not set itself; raise a StartError when Ray was
    imported first under `uv run`, too late for its uv hook to be switched off."""
    for name, value in {**WORKER_ENV, **_DRIVER_ONLY}.items():
        os.environ.setdefault(name, value)
    constants = sys.modules.get("ray._private.ray_constants")
    if (
        constants is not None
        and os.environ[_UV_HOOK] == "0"
        and getattr(constants, _UV_HOOK, False)
        and under_uv_run()
    ):
        raise StartError(
            f"Ray was imported before harbor_ray could set {_UV_HOOK}=0, and under "
            "`uv run` its workers would be started through `uv run` in a copy of the "
            f"working dir, and fail. Run with {_UV_HOOK}=0 in the environment, import "
            "harbor_ray before ray, or run the venv's python (.venv/bin/python) directly."
        )


def under_uv_run() -> bool:
    """Whether an ancestor process is `uv run`, by Ray's own test for its uv hook (only
    asked once Ray is imported)."""
    from ray._private.runtime_env.uv_runtime_env_hook import _get_uv_run_cmdline

    return _get_uv_run_cmdline() is not None
