"""Starting and stopping the engine application from a Serve YAML, for the CLI and tests.

`engine_up` does what `serve run CONFIG` does with one application, on the Ray cluster
this process is connected to (starting a local one if none), but returns once the
engine answers, with its base URL, instead of blocking. It builds the application in
this process, so preparing the default model reports progress to the caller. A cold
start takes minutes (vLLM compiles the model), so it reports progress while it waits
and removes a half-started application when it gives up.

Serve's HTTP options are fixed when Serve first starts on a cluster: if it already
runs, the YAML's (and `port`) are not applied, and the returned URL is where Serve
actually listens.

A local cluster started here lives as long as this process: a CLI that wants the engine
to outlive the command must keep running, or connect to a cluster made by `ray start`.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import ray
import yaml
from pydantic import ValidationError
from ray import serve
from ray.serve import Application, RunTarget
from ray.serve.schema import ApplicationStatus, ServeApplicationSchema, ServeDeploySchema

from harbor_ray.data.result import Provenance
from harbor_ray.engine.config import EngineConfig
from harbor_ray.engine.model import Progress, prepare_model
from harbor_ray.engine.provenance import served_provenance
from harbor_ray.engine.serve import (
    build_engine_app,
    resolve_chat_template,
    resolve_model_source,
)
from harbor_ray.errors import EngineStartError
from harbor_ray.serve_http import serve_http_base

ENGINE_APP_NAME = "engine"

# What engine_up applies from a Serve YAML; anything else is refused rather than
# silently ignored, with `serve run` named as the way to get it.
_DEPLOY_FIELDS = frozenset({"applications", "http_options", "proxy_location"})
_APP_FIELDS = frozenset({"name", "route_prefix", "import_path", "args", "logging_config"})
_FAILED = frozenset({ApplicationStatus.DEPLOY_FAILED, ApplicationStatus.UNHEALTHY})
_HEARTBEAT_S = 30.0


@dataclass(frozen=True)
class EngineHandle:
    """A running engine: where to send OpenAI requests and what to call the model."""

    url: str
    """The OpenAI base URL, ending in `/v1`."""
    model_id: str
    app_name: str
    startup_s: float
    provenance: Provenance | None = None
    """What it serves (weights, tokenizer, chat template), when harbor_ray's builder made
    it; None: another builder's application, whose files are not known here."""


def engine_up(
    config_path: Path,
    *,
    ray_address: str | None = None,
    cache_dir: Path | None = None,
    port: int | None = None,
    progress: Progress | None = None,
    timeout_s: float = 900.0,
    poll_s: float = 2.0,
) -> EngineHandle:
    """Start the one application in `config_path` and wait until it serves a model.

    `cache_dir` overrides where the default model is prepared (harbor_ray's builder
    only); `port` overrides the YAML's HTTP port. Raises `EngineStartError` if the
    application fails or `timeout_s` passes.
    """
    say = progress or _silent
    started = time.monotonic()
    try:
        deploy, app = _load(config_path)
        builder, args = _prepare(app, cache_dir, say)
    except ValidationError as error:
        raise EngineStartError(f"{config_path}: {error}") from error
    # Before building: Ray Serve LLM's builder reads the runtime context, which would
    # otherwise start a local cluster of its own, dashboard included.
    if not ray.is_initialized():
        say("starting a local Ray cluster" if ray_address is None else f"joining {ray_address}")
        ray.init(address=ray_address, include_dashboard=False)
    application = builder(args)
    if not isinstance(application, Application):
        raise EngineStartError(f"{app.import_path} returned {type(application).__name__}")
    http_options = deploy.http_options.model_dump()
    if port is not None:
        http_options["port"] = port
    serve.start(http_options=http_options, proxy_location=deploy.proxy_location)
    url = f"{serve_http_base(app.route_prefix)}/v1"
    serve.run_many(
        [
            RunTarget(
                target=application,
                name=app.name,
                route_prefix=app.route_prefix,
                logging_config=app.logging_config,
            )
        ],
        wait_for_ingress_deployment_creation=False,
        wait_for_applications_running=False,
    )
    try:
        model_id = _wait_until_serving(app.name, url, started + timeout_s, poll_s, say)
    except BaseException:
        serve.delete(app.name)
        raise
    elapsed = time.monotonic() - started
    say(f"engine ready at {url} serving {model_id!r} after {elapsed:.0f}s")
    return EngineHandle(
        url=url,
        model_id=model_id,
        app_name=app.name,
        startup_s=elapsed,
        provenance=_provenance(builder, args),
    )


def _provenance(
    builder: Callable[[dict[str, Any]], Any], args: dict[str, Any]
) -> Provenance | None:
    """What harbor_ray's builder handed vLLM, hashed once (engine/provenance.py); the
    default model is prepared by now, so resolving it only finds its directory."""
    if builder is not build_engine_app:
        return None
    config = EngineConfig.model_validate(args)
    return served_provenance(resolve_model_source(config), resolve_chat_template(config))


def engine_down(app_name: str = ENGINE_APP_NAME, *, ray_address: str | None = None) -> None:
    """Delete the engine application; stop Serve too when nothing else runs on it.

    Connects to `ray_address` (default: the local cluster) when this process is not
    connected yet. Ray itself is left running: whoever started it stops it.
    """
    if not ray.is_initialized():
        ray.init(address=ray_address or "auto")
    if app_name in serve.status().applications:
        serve.delete(app_name)
    if not serve.status().applications:
        serve.shutdown()


def _silent(_: str) -> None:
    pass


def _load(config_path: Path) -> tuple[ServeDeploySchema, ServeApplicationSchema]:
    deploy = ServeDeploySchema.model_validate(yaml.safe_load(config_path.read_text()))
    if len(deploy.applications) != 1:
        raise EngineStartError(
            f"{config_path}: expected one application, found {len(deploy.applications)}"
        )
    app = deploy.applications[0]
    ignored = sorted(
        (deploy.model_fields_set - _DEPLOY_FIELDS) | (app.model_fields_set - _APP_FIELDS)
    )
    if ignored:
        raise EngineStartError(
            f"{config_path}: engine_up does not apply {ignored}; "
            f"start it with `serve run {config_path}` instead"
        )
    return deploy, app


def _prepare(
    app: ServeApplicationSchema, cache_dir: Path | None, say: Progress
) -> tuple[Callable[[dict[str, Any]], Any], dict[str, Any]]:
    """The application's builder and its args, with the default model made ready."""
    builder = _import_attr(app.import_path)
    args: dict[str, Any] = dict(app.args)
    if builder is build_engine_app:
        if cache_dir is not None:
            args["cache_dir"] = str(cache_dir)
        config = EngineConfig.model_validate(args)
        if config.uses_default_model:
            # The builder would prepare it too, silently; doing it here first lets the
            # caller watch a conversion that can take a minute or more.
            prepare_model(config.cache_dir, progress=say)
    elif cache_dir is not None:
        raise EngineStartError(
            f"cache_dir applies only to {build_engine_app.__module__}:build_engine_app, "
            f"not {app.import_path}"
        )
    return builder, args


def _import_attr(import_path: str) -> Any:
    module, _, name = import_path.rpartition(":" if ":" in import_path else ".")
    return getattr(importlib.import_module(module), name)


def _wait_until_serving(
    app_name: str, url: str, deadline: float, poll_s: float, say: Progress
) -> str:
    """Poll Serve and then /v1/models until the engine lists a model; return its id."""
    reported: tuple[str, str] | None = None
    last_report = 0.0
    while True:
        status = serve.status().applications.get(app_name)
        state = status.status if status else ApplicationStatus.NOT_STARTED
        detail = _status_detail(status)
        if state in _FAILED:
            raise EngineStartError(f"engine application {app_name!r} is {state.value}: {detail}")
        if state == ApplicationStatus.RUNNING and (model_ids := _served_models(url)):
            return model_ids[0]
        now = time.monotonic()
        if (state, detail) != reported or now - last_report >= _HEARTBEAT_S:
            say(f"engine {state.value.lower()}" + (f": {detail}" if detail else ""))
            reported, last_report = (state, detail), now
        if now >= deadline:
            raise EngineStartError(
                f"engine application {app_name!r} not serving at {url} in time "
                f"(last state {state.value}: {detail})"
            )
        time.sleep(poll_s)


def _status_detail(status: Any) -> str:
    if status is None:
        return ""
    messages = [status.message] + [d.message for d in status.deployments.values()]
    return "; ".join(m for m in messages if m)


def _served_models(url: str) -> list[str]:
    try:
        response = httpx.get(f"{url}/models", timeout=5.0)
    except httpx.HTTPError:
        return []
    if response.status_code != 200:
        return []
    return [model["id"] for model in response.json().get("data", [])]
