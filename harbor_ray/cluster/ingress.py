"""What a sweep sets up, and takes down, so that its agents reach the capture proxy.

One place decides what each ingress needs: `direct` and `serve` reach the proxy's
replicas, which are deployed for the sweep and removed after it; `host` needs none (each
rollout host serves the proxy for its own sessions and calls the engine itself).
Whether the replicas' direct sockets must be reachable from other nodes is decided here
too, from the cluster's nodes when the proxy is deployed.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.upstream_profile import UpstreamName
from harbor_ray.capture.proxy.engine_adapter import EngineKind
from harbor_ray.capture.proxy.hosted import UpstreamKey
from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.cluster.host import Ingress, ProxyTarget
from harbor_ray.cluster.nodes import alive_nodes
from harbor_ray.cluster.proxy_deployment import deploy_capture_proxy, remove_capture_proxy
from harbor_ray.cluster.remote_entry import start_entry_relays, stop_entry_relays
from harbor_ray.errors import StartError
from harbor_ray.host_names import LOOPBACK_NAMES


def start_capture_proxy(
    llm_url: str,
    served_model: str,
    *,
    ingress: Ingress,
    replicas: int,
    engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S,
    stitch: bool = True,
    remote_url: str | None = None,
    remote_bind: str | None = None,
    logprobs_mode: str | None = None,
    engine_kind: EngineKind = "vllm",
    capture: CaptureLevel = "tokens",
    upstream: UpstreamName = "openai-chat",
    upstream_key: UpstreamKey | None = None,
) -> ProxyTarget:
    """Deploy the replicas the ingress needs (none for `host`); where agents reach them.
    `remote_url`/`remote_bind`: `remote_endpoint`; `engine_kind`: the certified one;
    `capture`: what each call records; `upstream`, `upstream_key`: the API at `llm_url`
    and its credential, handed to whichever proxies call it (the hosts or the replicas)."""
    remote = remote_endpoint(ingress, remote_url, remote_bind)
    if ingress == "host":
        return ProxyTarget(
            url=llm_url,
            served_model=served_model,
            ingress="host",
            engine_timeout_s=engine_timeout_s,
            stitch=stitch,
            logprobs_mode=logprobs_mode,
            engine_kind=engine_kind,
            capture=capture,
            upstream=upstream,
            upstream_key=upstream_key,
        )
    # On a cluster of several nodes the replicas' direct sockets listen on their node's
    # address, so that a host on a node without a replica relays to another node's.
    across_nodes = len(alive_nodes()) > 1
    url = deploy_capture_proxy(
        llm_url,
        served_model,
        replicas=replicas,
        engine_timeout_s=engine_timeout_s,
        stitch=stitch,
        across_nodes=across_nodes,
        logprobs_mode=logprobs_mode,
        allowed_hosts=capture_hosts(remote_url if remote else None),
        engine_kind=engine_kind,
        capture=capture,
        upstream=upstream,
        upstream_key=upstream_key,
    )
    # The replicas hold the key: the hosts, which only relay to them, get none.
    target = ProxyTarget(
        url=url,
        served_model=served_model,
        ingress=ingress,
        engine_timeout_s=engine_timeout_s,
        stitch=stitch,
        remote_url=remote_url if remote else None,
        logprobs_mode=logprobs_mode,
        engine_kind=engine_kind,
        capture=capture,
        upstream=upstream,
    )
    if remote is not None:
        try:
            start_entry_relays(target.app, remote)
        except BaseException:  # the caller gets no target to stop: leave nothing behind
            remove_capture_proxy()
            raise
    return target


def capture_hosts(remote_url: str | None) -> tuple[str, ...]:
    """The Host names the replicas answer besides IP addresses: the loopback names, and
    the name in the URL sandboxes use, since the entry relays pass their requests on as
    sent."""
    name = urlsplit(remote_url).hostname if remote_url else None
    return (*LOOPBACK_NAMES, *([name] if name else []))


def remote_endpoint(ingress: Ingress, url: str | None, bind: str | None) -> tuple[str, int] | None:
    """Where each node's entry relay listens for agents in sandboxes off their host's node
    (remote_entry.py): `bind` (HOST:PORT), by default every interface on `url`'s port;
    None without `url`. Only relays can serve any session on one shared address (a
    `host`-ingress host knows its own sessions only; Serve's HTTP options are not ours to
    change), so it needs `direct`.
    """
    if url is None:
        if bind is not None:
            raise StartError("--proxy-bind needs --proxy-url (the address sandboxes use)")
        return None
    if ingress != "direct":
        raise StartError(
            f"--proxy-url needs --ingress direct, not {ingress} (the default "
            f"is host): only direct's relays serve any session on one address"
        )
    parts = urlsplit(url)
    if parts.scheme != "http" or parts.port is None:
        raise StartError(f"--proxy-url must be http://HOST:PORT[/...], not {url!r}")
    if bind is None:
        return ("0.0.0.0", parts.port)
    host, _, port = bind.rpartition(":")
    if not host or not port.isdigit():
        raise StartError(f"--proxy-bind must be HOST:PORT, not {bind!r}")
    return (host.strip("[]"), int(port))


def stop_capture_proxy(proxy: ProxyTarget) -> None:
    """Remove what `start_capture_proxy` deployed."""
    if proxy.ingress != "host":
        stop_entry_relays(proxy.app)  # none unless started with a remote URL
        remove_capture_proxy()
