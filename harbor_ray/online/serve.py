"""The Ray Serve application builders behind `serve_configs/online_*.yaml`.

Three applications: the engine (`build_engine_app`), the capture proxy (`build_capture`:
the sweep's `CaptureProxy` deployment) and the controller (`build_controller`: the HTTP
API in front of the detached `Controller` actor). Each builder validates the YAML's
`args:` as a closed model, and the capture and controller apps take the engine's args
through a YAML alias. Lifetimes (the actor outlives a replaced replica, goes with the
application): docs/architecture.md, "The service as one `serve run`".
"""

from __future__ import annotations

# Serve imports this module in fresh processes (its build task, every replica), before
# Harbor and LiteLLM, which reach for the network at import unless switched off.
from harbor_ray.switches import set_switches

set_switches()

import asyncio  # noqa: E402
import contextlib  # noqa: E402
import dataclasses  # noqa: E402
import logging  # noqa: E402
from collections.abc import Mapping  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import TYPE_CHECKING, Any, get_type_hints  # noqa: E402

import ray  # noqa: E402
from pydantic import (  # noqa: E402
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    create_model,
    model_validator,
)
from ray import serve  # noqa: E402
from ray.serve import Application  # noqa: E402
from ray.serve.schema import ServeApplicationSchema  # noqa: E402

from harbor_ray.capture.proxy.engine_adapter import EngineChoice  # noqa: E402
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S  # noqa: E402
from harbor_ray.cluster.fleet import FleetSettings, fleet_help  # noqa: E402
from harbor_ray.cluster.host import ProxyTarget  # noqa: E402
from harbor_ray.cluster.owner import NAMESPACE  # noqa: E402
from harbor_ray.cluster.policy_version import policy_actor_name  # noqa: E402
from harbor_ray.cluster.proxy_deployment import (  # noqa: E402
    CAPTURE_ROUTE_PREFIX,
    MAX_ONGOING_REQUESTS,
    CaptureProxy,
)
from harbor_ray.cluster.replica_registry import CAPTURE_APP_NAME  # noqa: E402
from harbor_ray.engine.config import EngineConfig  # noqa: E402
from harbor_ray.engine.lifecycle import ENGINE_APP_NAME  # noqa: E402
from harbor_ray.engine.replicas import serve_weight_updater  # noqa: E402
from harbor_ray.engine.serve import (  # noqa: E402
    build_engine_app,
    resolve_chat_template,
    resolve_model_source,
)
from harbor_ray.errors import ServiceConfigError  # noqa: E402
from harbor_ray.host_names import LOOPBACK_NAMES  # noqa: E402
from harbor_ray.online.app import ActorController, build_controller_app  # noqa: E402
from harbor_ray.online.controller import ControllerConfig  # noqa: E402
from harbor_ray.online.controller_actor import start_controller  # noqa: E402
from harbor_ray.online.controller_key import load_or_create_key  # noqa: E402
from harbor_ray.online.wire import StalePolicy  # noqa: E402
from harbor_ray.serve_http import app_going_away, serve_details, serve_http_base  # noqa: E402
from harbor_ray.trials.backends import LOCAL  # noqa: E402

__all__ = ["CaptureArgs", "ControllerArgs", "build_capture", "build_controller", "own_engine"]

_log = logging.getLogger("ray.serve")

_CACHE = Path("~/.cache/harbor_ray/online")
OWN_ENGINE = f"{build_engine_app.__module__}:{build_engine_app.__name__}"


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    engine: dict[str, Any] = Field(description="The engine app's `args:` (a YAML alias).")

    def engine_config(self) -> EngineConfig:
        return EngineConfig.model_validate(self.engine)


class CaptureArgs(_Args):
    """`args:` of the capture app (`build_capture`)."""

    engine_url: str | None = Field(
        None,
        description="The engine's OpenAI base URL; None: Serve's own address with "
        "the engine app at route prefix / (`http://HOST:PORT/v1`).",
    )
    replicas: int = Field(2, ge=1)
    num_cpus: float = Field(0.1, ge=0)
    max_ongoing_requests: int = Field(MAX_ONGOING_REQUESTS, ge=1)
    engine_timeout_s: float = Field(DEFAULT_ENGINE_TIMEOUT_S, gt=0)
    stitch: bool = True
    allowed_hosts: list[str] = Field(
        default_factory=lambda: list(LOOPBACK_NAMES),
        description="The Host names the "
        "proxy answers besides any IP address (any port); '*': any. Others get 421.",
    )
    engine_kind: EngineChoice = Field(
        "auto",
        description="Which engine engine_url is: vllm, sglang (through the "
        "proxy's SGLang adapter; no stitched prompts), or auto (each replica asks the "
        "engine as it starts). Without engine_url the engine is the engine app's: vllm.",
    )

    @model_validator(mode="after")
    def _engine_kind(self) -> CaptureArgs:
        if self.engine_url is None and self.engine_kind == "sglang":
            raise ValueError(
                "engine_kind sglang needs engine_url: the engine app this YAML starts is vLLM"
            )
        return self


_FLEET_FIELDS = [f.name for f in dataclasses.fields(FleetSettings)]


def _fleet_args() -> type[_Args]:
    """`_Args` with the fleet settings as fields: each one's YAML key is its name, its
    default the controller's and its description the type's. Checked as a whole by
    `FleetSettings` (ControllerArgs._fleet), which names a field it refuses."""
    hints = get_type_hints(ControllerConfig)
    defaults = {f.name: f for f in dataclasses.fields(ControllerConfig)}

    def of(name: str) -> Any:
        default = defaults[name]
        if default.default_factory is not dataclasses.MISSING:
            return Field(default_factory=default.default_factory, description=fleet_help(name))
        return Field(default.default, description=fleet_help(name))

    fields: dict[str, Any] = {name: (hints[name], of(name)) for name in _FLEET_FIELDS}
    return create_model("_FleetArgs", __base__=_Args, **fields)


# mypy sees the plain base; ControllerArgs reads the fleet's fields by name (`fleet`).
if TYPE_CHECKING:
    _FleetArgs = _Args
else:
    _FleetArgs = _fleet_args()


class ControllerArgs(_FleetArgs):
    """`args:` of the controller app (`build_controller`): the service's own fields, and
    the fleet settings (cluster/fleet.py) under their own names."""

    key_file: Path = _CACHE / "controller.key"
    engine_app: str = ENGINE_APP_NAME
    capture_app: str = CAPTURE_APP_NAME
    work_dir: Path = _CACHE / "work"
    out: Path | None = None
    dataset: str = Field("samples", min_length=1)
    datasets: list[str] = Field(
        default_factory=list,
        description="The other dataset specs a submit may name, "
        "spelled exactly so; no other path or registry is read.",
    )
    agents: list[str] = Field(
        default_factory=list,
        description="Import paths (module:Class) a submit may name "
        "as its agent, besides the Harbor agents `harbor-ray info` lists.",
    )
    allowed_hosts: list[str] = Field(
        default_factory=lambda: list(LOOPBACK_NAMES),
        min_length=1,
        description="The Host names the API answers (any port); '*': any. Others get 421.",
    )
    sandbox: str = Field(
        LOCAL,
        min_length=1,
        description="A submit's default sandbox: "
        "`local` (the host's userland) or `container` (the task's image).",
    )
    host_userland: bool = Field(
        False,
        description="Run a task that needs its own image on the host's userland "
        "when the sandbox cannot build it (as --host-userland); its rows say "
        "environment=host_override. False: such a rollout is an environment_unsupported "
        "row, with no reward.",
    )
    capacity: int = Field(256, ge=1)
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="Policy versions a group's oldest token may be behind the "
        "version it finished at; a submit may set its own. None: no bound.",
    )
    stale_policy: StalePolicy = Field(
        "drop",
        description="A group past max_staleness: drop it whole, deliver it as "
        "it is, or mask: deliver it with loss_mask 0 on the tokens past the bound.",
    )
    drop_no_signal: bool = Field(
        False,
        description="A submit's default: drop a finished group of 2 or more "
        "whose rewards are all equal (no GRPO signal) and run a replacement group of the "
        "request's tasks in its place; a submit may set its own.",
    )
    max_extra_groups: int | None = Field(
        None,
        ge=0,
        description="A submit's default bound on its replacement groups; past "
        "it a group without signal is delivered flagged no_signal. None: as many as the "
        "request's groups.",
    )
    clear_cache_on_update: bool = Field(
        False,
        description="Drop the engine's KV and prefix cache at each weight update, "
        "so requests in flight recompute their context under the new weights. False: "
        "they keep their KV (new requests are salted by version and reuse no prefix of "
        "other weights).",
    )
    weights_timeout_s: float = Field(900.0, gt=0)
    retry_after_s: int = Field(5, ge=1)
    retain_s: float = Field(
        600.0,
        ge=0,
        description="How long a closed group (acknowledged, "
        "dropped, cancelled) stays known to a late ack or cancel.",
    )
    retain_groups: int = Field(10_000, ge=0, description="Closed groups kept at most.")
    request_ids: int = Field(
        10_000,
        ge=0,
        description="Closed requests whose request_id "
        "is kept at most: a request retried after that many newer "
        "ones is taken as new.",
    )

    @model_validator(mode="after")
    def _fleet(self) -> ControllerArgs:
        FleetSettings(**self.fleet())  # its StartError, a ValueError, names the field
        return self

    def fleet(self) -> dict[str, Any]:
        """The fleet settings, as ControllerConfig takes them."""
        return {name: getattr(self, name) for name in _FLEET_FIELDS}

    def controller_config(
        self, engine_files: tuple[str, Path | None] | None = None
    ) -> ControllerConfig:
        """The controller's config; `engine_files`: what vLLM loads, when the engine is
        this YAML's own (`own_engine`), for the rows' provenance."""
        served_model = self.engine_config().model_id
        proxy = ProxyTarget(
            url=serve_http_base(CAPTURE_ROUTE_PREFIX),
            served_model=served_model,
            ingress="direct",
            app=self.capture_app,
        )
        return ControllerConfig(
            work_dir=self.work_dir.expanduser(),
            dataset=self.dataset,
            datasets=tuple(self.datasets),
            agents=tuple(self.agents),
            sandbox=self.sandbox,
            capacity=self.capacity,
            max_staleness=self.max_staleness,
            stale_policy=self.stale_policy,
            drop_no_signal=self.drop_no_signal,
            max_extra_groups=self.max_extra_groups,
            proxy=proxy,
            weights_timeout_s=self.weights_timeout_s,
            retry_after_s=self.retry_after_s,
            retain_s=self.retain_s,
            retain_groups=self.retain_groups,
            request_ids=self.request_ids,
            out=None if self.out is None else self.out.expanduser(),
            host_userland=self.host_userland,
            engine_files=engine_files,
            **self.fleet(),
        )


def own_engine(deployed: Mapping[str, ServeApplicationSchema | None], args: ControllerArgs) -> bool:
    """Whether the agents' calls reach the engine `args.engine` describes, so that its
    files are what the rows were made with: Serve deployed the engine app from the
    same YAML with harbor_ray's builder and these args, and the capture app calls it
    (no `engine_url`). `deployed`: each app's config as Serve was given it (None: an
    app deployed from code, not a YAML). Anything else (an engine at a URL, another
    builder) is not known here: the rows then carry the harness's half alone, as a
    sweep's on an engine it did not start (`--llm-url`)."""
    engine, capture = deployed.get(args.engine_app), deployed.get(args.capture_app)
    return (
        engine is not None
        and capture is not None
        and engine.import_path == OWN_ENGINE
        and engine.args == args.engine
        and capture.args.get("engine_url") is None
    )


def _validated[A: _Args](model: type[A], args: dict[str, Any]) -> A:
    """`args` as `model`, the engine's included; a bad field fails naming it."""
    where: tuple[str, ...] = ()
    try:
        parsed = model.model_validate(args)
        where = ("engine",)
        parsed.engine_config()
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in (*where, *first["loc"]))
        # A check of several fields at once (the fleet's) names its field in its message.
        raise ServiceConfigError(
            f"{model.__name__}{' ' + field if field else ''}: {first['msg']}"
        ) from exc
    return parsed


def build_capture(args: dict[str, Any]) -> Application:
    """The capture proxy application from its YAML `args:` (`CaptureArgs`)."""
    config = _validated(CaptureArgs, args)
    engine = config.engine_config()
    # serve.ingress's types hide the Deployment that serve.deployment makes of the class.
    return CaptureProxy.options(  # type: ignore[attr-defined, no-any-return]
        num_replicas=config.replicas,
        max_ongoing_requests=config.max_ongoing_requests,
        ray_actor_options={"num_cpus": config.num_cpus},
    ).bind(
        config.engine_url,
        engine.model_id,
        app_name=None,
        engine_timeout_s=config.engine_timeout_s,
        stitch=config.stitch,
        logprobs_mode=engine.recorded_logprobs_mode,
        allowed_hosts=tuple(config.allowed_hosts),
        engine_kind="vllm" if config.engine_url is None else config.engine_kind,
    )


@serve.deployment(ray_actor_options={"num_cpus": 0}, max_ongoing_requests=10_000)
@serve.ingress()
class OnlineController:
    """One HTTP replica of the controller: the API over the controller actor."""

    def __init__(self, config: ControllerArgs) -> None:
        self._app = serve.get_replica_context().app_name
        self._capture_app = config.capture_app
        self._allowed_hosts = tuple(config.allowed_hosts)
        key_file = config.key_file.expanduser()
        self._key, created = load_or_create_key(key_file)
        _log.info("controller key %s %s", "created in" if created else "read from", key_file)
        engine = config.engine_config()
        source = resolve_model_source(engine)
        updater = serve_weight_updater(
            config.engine_app, source, clear_cache=config.clear_cache_on_update
        )
        deployed = {
            name: app.deployed_app_config for name, app in serve_details().applications.items()
        }
        files = (source, resolve_chat_template(engine)) if own_engine(deployed, config) else None
        self._handle = start_controller(self._app, config.controller_config(files), updater)
        ray.get(self._handle.policy.remote())  # it answers before the replica does

    async def __serve_build_asgi_app__(self) -> Any:
        return build_controller_app(
            ActorController(self._handle), self._key, allowed_hosts=self._allowed_hosts
        )

    async def check_health(self) -> None:
        # A dead controller actor fails this replica's health check, so Serve replaces
        # the replica, and the new one starts a controller (empty) instead of answering
        # 500 for ever.
        await self._handle.policy.remote()

    async def __del__(self) -> None:
        if await asyncio.to_thread(app_going_away, self._app):
            await stop_controller(self._handle, self._capture_app)


async def stop_controller(handle: Any, capture_app: str) -> None:
    """End the controller actor: its rollouts, hosts and sandboxes, then the actor and
    the policy version it published to the capture app."""
    with contextlib.suppress(Exception):
        await handle.shutdown.remote()
    ray.kill(handle, no_restart=True)
    with contextlib.suppress(ValueError):
        ray.kill(ray.get_actor(policy_actor_name(capture_app), namespace=NAMESPACE))


def build_controller(args: dict[str, Any]) -> Application:
    """The controller application from its YAML `args:` (`ControllerArgs`)."""
    return OnlineController.bind(  # type: ignore[attr-defined, no-any-return]  # as above
        _validated(ControllerArgs, args)
    )
