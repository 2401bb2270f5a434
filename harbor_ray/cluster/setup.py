"""What runs around a sweep's rollouts, as one context manager: Ray, the engine, its
certification and the capture proxy, taken down in reverse order on the way out.

`harbor-ray sweep` and `jobs/sweep.py` are thin shells over it (flags in, a summary
out); the online service is meant to reuse it. Nothing here prints: progress goes to
the caller's callback, and failures are raised (`EngineSetupError`,
`CertificationError`, `ServeError`) for the caller to report.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import ray

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.upstream_profile import PROFILES, UpstreamName
from harbor_ray.capture.proxy.certify import Certification, certify_url, reachable_url
from harbor_ray.capture.proxy.engine_adapter import EngineChoice
from harbor_ray.capture.proxy.hosted import UpstreamKey
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.cluster.host import Ingress, ProxyTarget
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.nodes import alive_nodes, on_each
from harbor_ray.cluster.runner import first_line
from harbor_ray.data.result import Provenance
from harbor_ray.errors import CertificationError, ServeError, StartError

__all__ = ["ClusterSpec", "RunningCluster", "running_cluster"]


@dataclass(frozen=True)
class ClusterSpec:
    """Where rollouts run and how their agents reach a model."""

    ray_address: str | None = None  # None: a local Ray started for the run, then stopped
    llm_url: str | None = None  # an engine already running, or:
    engine_config: Path | None = None  # a Serve YAML started on the cluster for the run
    model: str | None = None  # the served model id; None: the first the engine lists
    ingress: Ingress = "host"
    proxy_replicas: int = 2
    engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S
    stitch: bool = True  # CaptureSettings.stitch
    engine_kind: EngineChoice = "auto"  # which engine the URL is (engine_adapter.py)
    capture: CaptureLevel = "tokens"  # below `tokens`: an evaluation (capture_level.py)
    upstream: UpstreamName = "openai-chat"  # the API behind the proxy (upstream_profile.py)
    # Its credential: to the certification and to the proxies (hosts or replicas) only.
    upstream_key: UpstreamKey | None = None
    # Agents in sandboxes off their host's node reach the proxy at `proxy_url`; the hosts'
    # relays listen on `proxy_bind` (HOST:PORT; default every interface on the URL's
    # port) for them. None: nothing listens off loopback.
    proxy_url: str | None = None
    proxy_bind: str | None = None
    wants_model: bool = True  # False: no engine, no proxy (agents such as oracle)
    # Where a local Ray's own logs (raylet, Serve, replicas, hosts) are copied before its
    # temp dir is removed; None: not kept. A joined cluster keeps its logs itself.
    logs_dir: Path | None = None


@dataclass(frozen=True)
class RunningCluster:
    proxy: ProxyTarget | None  # where agents call the model; None when none does
    certification: Certification | None
    # What the engine serves, for every row's provenance (data/result.py): the files of
    # the engine started from engine_config, or a hosted API's model; None otherwise.
    provenance: Provenance | None = None


@contextlib.contextmanager
def running_cluster(
    spec: ClusterSpec, *, progress: Callable[[str], None] = lambda _: None
) -> Iterator[RunningCluster]:
    """Join or start Ray; start or certify the engine; deploy the proxy; yield them."""
    with contextlib.ExitStack() as stack:
        stack.enter_context(_ray(spec.ray_address, spec.logs_dir, progress))
        certification = None
        proxy = None
        served: Provenance | None = None
        if spec.wants_model:
            url = spec.llm_url or PROFILES[spec.upstream].default_url
            if spec.engine_config is not None:
                from harbor_ray.engine.lifecycle import engine_down, engine_up

                handle = engine_up(
                    spec.engine_config, ray_address=spec.ray_address or "auto", progress=progress
                )
                stack.callback(engine_down, handle.app_name)
                url, served = handle.url, handle.provenance
            if url is None:
                raise StartError(
                    "an agent that calls a model needs llm_url or engine_config: "
                    "give the URL of a running engine, or the engine to start"
                )
            certification = asyncio.run(
                certify_url(
                    url,
                    spec.model,
                    spec.engine_kind,
                    capture=spec.capture,
                    upstream=spec.upstream,
                    key=spec.upstream_key,
                )
            )
            served = Provenance.served(spec.upstream, certification.served_model, served)
            progress("certifying the engine from every node")
            certify_from_every_node(
                url, certification.served_model, upstream=spec.upstream, key=spec.upstream_key
            )
            progress(f"setting up the capture proxy ({spec.ingress} ingress)")
            try:
                proxy = start_capture_proxy(
                    url,
                    certification.served_model,
                    ingress=spec.ingress,
                    replicas=spec.proxy_replicas,
                    engine_timeout_s=spec.engine_timeout_s,
                    stitch=spec.stitch,
                    remote_url=spec.proxy_url,
                    remote_bind=spec.proxy_bind,
                    logprobs_mode=certification.logprobs_mode,
                    engine_kind=certification.engine_kind,
                    capture=spec.capture,
                    upstream=spec.upstream,
                    upstream_key=spec.upstream_key,
                )
            except RuntimeError as exc:  # Serve's own word for a deployment that failed
                raise ServeError(
                    f"the capture proxy's deployment did not start: {exc} "
                    "(the Ray logs of its replicas say why)"
                ) from exc
            stack.callback(stop_capture_proxy, proxy)
        yield RunningCluster(proxy, certification, served)


def certify_from_every_node(
    url: str,
    served_model: str,
    *,
    upstream: UpstreamName = "openai-chat",
    key: UpstreamKey | None = None,
) -> None:
    """Check from each node, where hosts and replicas call it, that the engine certified
    from the driver answers there and serves `served_model`: the driver reaching it says
    nothing of a node behind another network. Raises `CertificationError` naming every
    node that cannot, before any rollout starts. `upstream`, `key`: the API and its
    credential (a task argument, as the proxies get it)."""
    failed = [
        f"{node.ip} (node {node.node_id[:12]}): {first_line(result)}"
        for node, result in on_each(
            _reachable_here, alive_nodes(), url, served_model, upstream, key
        )
        if isinstance(result, BaseException)
    ]
    if failed:
        raise CertificationError(
            f"the engine at {url} cannot be used from every node "
            "that runs rollouts: " + "; ".join(failed)
        )


@ray.remote
def _reachable_here(
    url: str, served_model: str, upstream: UpstreamName, key: UpstreamKey | None
) -> None:
    asyncio.run(reachable_url(url, served_model, upstream=upstream, key=key))


@contextlib.contextmanager
def _ray(
    address: str | None, logs_dir: Path | None, progress: Callable[[str], None]
) -> Iterator[None]:
    """Join `address`; or start a local Ray for the run and remove it after (keeping
    its logs in `logs_dir`: they are how a failed replica or host explains itself)."""
    if address is not None:
        progress(f"joining the Ray cluster at {address}")
        ray.init(address=address, log_to_driver=False)
        yield
        return
    progress("starting a local Ray cluster")
    # Ray's unix sockets live under its temp dir: keep the path short.
    temp_dir = tempfile.mkdtemp(prefix="hr-", dir="/tmp")
    ray.init(_temp_dir=temp_dir, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()
        if logs_dir is not None:
            with contextlib.suppress(OSError):  # logs missing or unreadable: not fatal
                shutil.copytree(
                    Path(temp_dir) / "session_latest" / "logs",
                    logs_dir / "ray",
                    dirs_exist_ok=True,
                    ignore_dangling_symlinks=True,
                    ignore=shutil.ignore_patterns("*.sock"),
                )
        shutil.rmtree(temp_dir, ignore_errors=True)
