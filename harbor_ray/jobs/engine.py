"""The engine a job starts for itself (`--engine YAML`): started, waited for and
certified, or an `EngineSetupError` naming why not; stopped when the job ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from harbor_ray.capture.proxy.certify import Certification, certify_url
from harbor_ray.errors import EngineStartError
from harbor_ray.jobs.runs import Progress, silent

if TYPE_CHECKING:
    from harbor_ray.engine.lifecycle import EngineHandle

__all__ = ["start_engine", "started_engine"]


def start_engine(
    config: Path,
    *,
    ray_address: str | None = None,
    cache_dir: Path | None = None,
    model: str | None = None,
    progress: Progress = silent,
) -> tuple[EngineHandle, Certification]:
    """Start the engine of the Serve YAML `config`, wait until it answers and certify it.
    It keeps running: `engine_down(handle.app_name)` stops it."""
    # Imported here, when an engine is started: Ray Serve LLM and vLLM take seconds to
    # import, and a job against --llm-url must not pay for them.
    from harbor_ray.engine.lifecycle import engine_down, engine_up

    progress("starting the engine (a cold start takes minutes)")
    try:
        handle = engine_up(config, ray_address=ray_address, cache_dir=cache_dir, progress=progress)
    except OSError as exc:  # the YAML, the model cache or a port: the fix is the user's
        raise EngineStartError(f"the engine did not start: {exc}") from exc
    try:
        progress("certifying the engine")
        cert = asyncio.run(certify_url(handle.url, model))
    except BaseException:
        engine_down(handle.app_name)
        raise
    progress(
        f"engine ready in {handle.startup_s:.0f} s: {cert.served_model} at "
        f"{handle.url} (tool calling: "
        f"{'yes' if cert.tool_calling else cert.tool_calling_fix})"
    )
    return handle, cert


@contextlib.contextmanager
def started_engine(
    config: Path | None, model: str | None, progress: Progress
) -> Iterator[EngineHandle | None]:
    """The engine started from `config`, for the duration (None: no config, nothing
    started): its URL, and what it serves (`provenance`)."""
    if config is None:
        yield None
        return
    from harbor_ray.engine.lifecycle import engine_down  # as in start_engine

    handle, _ = start_engine(config, model=model, progress=progress)
    try:
        yield handle
    finally:
        engine_down(handle.app_name)
