"""The capture proxy as a stateless Ray Serve deployment (docs/architecture.md property 1).

Replicas hold no session: each key leads to the actor that owns it (`ActorSessionStore`),
so any replica serves any session, and a replica killed mid-call loses nothing the agent
was told (a turn is recorded on its owner before the reply leaves; the retry lands on
another replica). Serve's health checks and restarts, and the hosts' relays skipping
dead replicas, are all the failover there is. Two ingresses reach the same app: each
replica's own socket, over which the hosts' relays spread connections (direct_ingress.py,
replica_registry.py, balancer.py), and Serve's HTTP proxy under a route prefix
(`/capture/v1`), the costlier fallback (docs/performance.md, "Ingress").
"""

from __future__ import annotations

import asyncio
import dataclasses
from typing import Any

from ray import serve
from ray.serve.context import _get_global_client

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.upstream_profile import UpstreamName
from harbor_ray.capture.proxy.app import CaptureApp, build_capture_app
from harbor_ray.capture.proxy.engine_adapter import EngineChoice, adapt_engine
from harbor_ray.capture.proxy.hosted import UpstreamKey, build_upstream
from harbor_ray.capture.proxy.settings import CaptureSettings
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.cluster.actor_store import ActorSessionStore
from harbor_ray.cluster.direct_ingress import DirectIngress
from harbor_ray.cluster.nodes import this_node
from harbor_ray.cluster.owner import actor_holder
from harbor_ray.cluster.policy_version import PolicyClock
from harbor_ray.cluster.replica_registry import CAPTURE_APP_NAME, ensure_registry, remove_registry
from harbor_ray.serve_http import app_going_away, serve_http_base

CAPTURE_ROUTE_PREFIX = "/capture"
# A replica's calls mostly wait on the engine, so one replica holds many at once. Below
# the offered concurrency Serve queues without bound and throughput collapses
# (docs/performance.md), so replicas x this must cover every agent that may call at the same time.
MAX_ONGOING_REQUESTS = 2_000

# Where Serve names its replica actors.
SERVE_NAMESPACE = "serve"


@serve.deployment
@serve.ingress()
class CaptureProxy:
    """One replica: the capture app over the engine's HTTP client and owner actors.

    The engine is certified once by whoever deploys this (it passes `served_model` and
    the certified `engine_kind`); replicas do not certify, so a restarted replica serves
    at once (`auto`, from an online YAML, asks the engine which it is). `llm_url` None is
    an engine app at Serve's root route (a `serve run` of the online YAML); `app_name`
    None is this replica's own application's name (its policy clock and registry).
    `upstream` and `upstream_key`: the API behind it and its credential (hosted.py),
    which reaches the replica as an argument, never through its environment.
    """

    def __init__(
        self,
        llm_url: str | None,
        served_model: str,
        *,
        keepalive_s: float | None = None,
        max_body_bytes: int | None = None,
        app_name: str | None = CAPTURE_APP_NAME,
        engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S,
        stitch: bool = True,
        across_nodes: bool = False,
        logprobs_mode: str | None = None,
        allowed_hosts: tuple[str, ...] | None = None,
        engine_kind: EngineChoice = "vllm",
        capture: CaptureLevel = "tokens",
        upstream: UpstreamName = "openai-chat",
        upstream_key: UpstreamKey | None = None,
    ) -> None:
        overrides: dict[str, Any] = {
            "keepalive_s": keepalive_s,
            "max_body_bytes": max_body_bytes,
            "allowed_hosts": allowed_hosts,
        }
        self._settings = CaptureSettings(
            served_model=served_model,
            stitch=stitch,
            logprobs_mode=logprobs_mode,
            capture=capture,
            **{name: value for name, value in overrides.items() if value is not None},
        )
        self._engine = build_upstream(
            upstream,
            llm_url or f"{serve_http_base('/')}/v1",
            key=upstream_key,
            timeout_s=engine_timeout_s,
        )
        self._engine_kind = engine_kind
        self._app_name = app_name or serve.get_replica_context().app_name
        self._across_nodes = across_nodes
        self._direct: DirectIngress | None = None
        self._policy = PolicyClock(self._app_name)

    async def __serve_build_asgi_app__(self) -> CaptureApp:
        # Serve calls this after the constructor, inside the replica's event loop, and
        # runs the app's lifespan itself (so the direct socket runs without one).
        self._policy.start()
        adapted = await adapt_engine(self._engine, self._engine_kind)
        settings = dataclasses.replace(
            self._settings, stitch=self._settings.stitch and adapted.stitch
        )
        app = build_capture_app(
            ActorSessionStore(holder=actor_holder(SERVE_NAMESPACE)),
            adapted.engine,
            settings,
            policy_version=self._policy,
            on_shutdown=self._shutdown,
        )
        self._direct = await DirectIngress.start(
            app,
            ensure_registry(self._app_name),
            serve.get_replica_context().replica_id.to_full_id_str(),
            this_node(),
            across_nodes=self._across_nodes,
        )
        return app

    def check_health(self) -> None:
        if self._direct is not None:
            self._direct.check()

    async def _shutdown(self) -> None:
        # At the app's lifespan end, when Serve stops the replica: calls through Serve
        # are drained by then, direct ones are waited for here, then the engine closes.
        if self._direct is not None:
            await self._direct.stop()
        await self._policy.stop()
        await self._engine.aclose()
        # The registry outlives replicas (detached); it goes with the application (an
        # online YAML's has no driver to remove it, as deploy_capture_proxy's has).
        if await asyncio.to_thread(app_going_away, self._app_name):
            remove_registry(self._app_name)


def deploy_capture_proxy(
    llm_url: str,
    served_model: str,
    *,
    replicas: int = 2,
    max_ongoing_requests: int = MAX_ONGOING_REQUESTS,
    route_prefix: str = CAPTURE_ROUTE_PREFIX,
    app_name: str = CAPTURE_APP_NAME,
    num_cpus: float = 0.1,
    http_port: int | None = None,
    keepalive_s: float | None = None,
    max_body_bytes: int | None = None,
    engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S,
    stitch: bool = True,
    across_nodes: bool = False,
    logprobs_mode: str | None = None,
    allowed_hosts: tuple[str, ...] | None = None,
    engine_kind: EngineChoice = "vllm",
    capture: CaptureLevel = "tokens",
    upstream: UpstreamName = "openai-chat",
    upstream_key: UpstreamKey | None = None,
) -> str:
    """Deploy (or update) the proxy and wait until it runs; return the base URL of its
    Serve route, without `/v1` (e.g. `http://127.0.0.1:8000/capture`). Hosts reach the
    replicas directly through the app's registry (`ProxyTarget(ingress="direct", app=app_name)`).

    Serve is started on `http_port` (Serve's default when None) unless it already runs,
    in which case its own port is used. `num_cpus` is small so that replicas never wait
    for a core the rollouts' accounting holds. `keepalive_s` and `max_body_bytes`
    override `CaptureSettings`' defaults; `engine_timeout_s` bounds each engine call;
    `stitch`, `logprobs_mode` and `allowed_hosts` (None: the default) are
    `CaptureSettings`'; `engine_kind` is the certification's; `capture`, `upstream` and
    `upstream_key` are `CaptureProxy`'s. `across_nodes`: each replica's
    direct socket listens on its node's address instead of loopback, so that hosts on
    nodes without a replica reach it (session keys still required; a replica has no admin routes);
    without it, a replica adds that socket once a second node joins (direct_ingress.py).
    """
    ensure_serve(http_port, across_nodes=across_nodes)
    ensure_registry(app_name)
    # serve.ingress's types hide the Deployment that serve.deployment makes of the class.
    deployment = CaptureProxy.options(  # type: ignore[attr-defined]
        num_replicas=replicas,
        max_ongoing_requests=max_ongoing_requests,
        ray_actor_options={"num_cpus": num_cpus},
    )
    serve.run(
        deployment.bind(
            llm_url,
            served_model,
            keepalive_s=keepalive_s,
            max_body_bytes=max_body_bytes,
            app_name=app_name,
            engine_timeout_s=engine_timeout_s,
            stitch=stitch,
            across_nodes=across_nodes,
            logprobs_mode=logprobs_mode,
            allowed_hosts=allowed_hosts,
            engine_kind=engine_kind,
            capture=capture,
            upstream=upstream,
            upstream_key=upstream_key,
        ),
        name=app_name,
        route_prefix=route_prefix,
    )
    return serve_http_base(route_prefix)


def remove_capture_proxy(app_name: str = CAPTURE_APP_NAME) -> None:
    """Delete the proxy application (and wait for its replicas to stop) and its
    registry; Serve stays up."""
    if app_name in serve.status().applications:
        serve.delete(app_name)
    remove_registry(app_name)


def ensure_serve(http_port: int | None = None, *, across_nodes: bool = False) -> None:
    """Start Serve (on loopback; on every interface `across_nodes`, since Serve runs
    its HTTP proxies only on nodes with replicas and hosts elsewhere must reach one)
    unless it runs already.

    Serve's HTTP options are fixed when it first starts on a cluster, so a running
    instance (an engine's, another test's) keeps its own port: URLs come from what
    Serve reports (`serve_http_base`), never from `http_port`.
    """
    if _get_global_client(raise_if_no_controller_running=False) is None:
        options: dict[str, Any] = {"host": "0.0.0.0" if across_nodes else "127.0.0.1"}
        if http_port is not None:
            options["port"] = http_port
        serve.start(http_options=options)
