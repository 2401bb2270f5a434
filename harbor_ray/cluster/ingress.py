"""What a sweep sets up, and takes down, so that its agents reach the capture proxy.

One place decides what each ingress needs: `direct` and `serve` reach the proxy's
replicas, which are deployed for the sweep and removed after it; `host` needs none (each
rollout host serves the proxy for its own sessions and calls the engine itself).
Whether the replicas' direct sockets must be reachable from other nodes is decided here
too, from the cluster's nodes when the proxy is deployed.
"""

from __future__ import annotations

from harbor_ray.capture.proxy.upstream import DEFAULT_ENGINE_TIMEOUT_S
from harbor_ray.cluster.host import Ingress, ProxyTarget
from harbor_ray.cluster.nodes import alive_nodes
from harbor_ray.cluster.proxy_deployment import deploy_capture_proxy, remove_capture_proxy


def start_capture_proxy(llm_url: str, served_model: str, *, ingress: Ingress,
                        replicas: int, engine_timeout_s: float = DEFAULT_ENGINE_TIMEOUT_S,
                        stitch: bool = True) -> ProxyTarget:
    """Deploy the replicas the ingress needs (none for `host`); where agents reach them."""
    if ingress == "host":
        return ProxyTarget(url=llm_url, served_model=served_model, ingress="host",
                           engine_timeout_s=engine_timeout_s, stitch=stitch)
    # On a cluster of several nodes the replicas' direct sockets listen on their node's
    # address, so that a host on a node without a replica relays to another node's.
    across_nodes = len(alive_nodes()) > 1
    url = deploy_capture_proxy(llm_url, served_model, replicas=replicas,
                               engine_timeout_s=engine_timeout_s, stitch=stitch,
                               across_nodes=across_nodes)
    return ProxyTarget(url=url, served_model=served_model, ingress=ingress,
                       engine_timeout_s=engine_timeout_s, stitch=stitch)


def stop_capture_proxy(proxy: ProxyTarget) -> None:
    """Remove what `start_capture_proxy` deployed."""
    if proxy.ingress != "host":
        remove_capture_proxy()
