"""Where Ray Serve's HTTP proxy actually listens, for URLs handed to clients.

Serve's HTTP options are fixed when Serve first starts on a cluster; a later
`serve.start(http_options=...)` keeps the running ones. So the engine's and the capture
proxy's URLs are built from what Serve reports, never from the options asked for.
"""

from __future__ import annotations

import zlib
from urllib.parse import urlsplit

from ray.serve.context import _get_global_client
from ray.serve.schema import ApplicationStatus, HTTPOptionsSchema, ServeInstanceDetails

from harbor_ray.errors import StartError

# A wildcard bind accepts local connections; it is not an address to connect to.
_WILDCARD_HOSTS = frozenset({"", "0.0.0.0", "::"})


def serve_details() -> ServeInstanceDetails:
    """Serve's own description of itself: HTTP options, applications, replicas."""
    client = _get_global_client()  # raises RayServeException when Serve is not running
    assert client is not None
    return ServeInstanceDetails(**client.get_serve_details())


def _http_options(details: ServeInstanceDetails) -> HTTPOptionsSchema:
    if details.http_options is None:
        raise StartError(
            "Ray Serve reports no HTTP options: its HTTP proxy is off "
            "(serve.start(proxy_location=...) must not be Disabled)"
        )
    return details.http_options


def serve_http_base(route_prefix: str | None = None) -> str:
    """`http://host:port<prefix>` of the running Serve, without a trailing slash."""
    options = _http_options(serve_details())
    host = "127.0.0.1" if options.host in _WILDCARD_HOSTS else options.host
    return f"http://{host}:{options.port}{(route_prefix or '/').rstrip('/')}"


def serve_url_on(node_id: str, url: str) -> str:
    """`url` (Serve's route, from `serve_http_base`) as a client on node `node_id`
    reaches it: Serve runs its HTTP proxies only on nodes with replicas (and the head),
    so a node without one uses another node's, at that node's address; possible only
    when Serve listens on every interface (a deployment across nodes starts it so)."""
    details = serve_details()
    if _http_options(details).host not in _WILDCARD_HOSTS:
        return url
    proxies = sorted(
        (nid, proxy.node_ip) for nid, proxy in details.proxies.items() if proxy.status == "HEALTHY"
    )
    if not proxies or node_id in {nid for nid, _ in proxies}:
        return url
    # Spread the nodes without a proxy over the proxies, the same one for each node.
    _, ip = proxies[zlib.crc32(node_id.encode()) % len(proxies)]
    parts = urlsplit(url)
    return parts._replace(netloc=f"{ip}:{parts.port}").geturl()


def app_going_away(app: str) -> bool:
    """Whether Serve is deleting application `app` (or is gone itself), as opposed to
    replacing one of its replicas: what a replica's shutdown hook asks before removing
    what the whole application shares. Blocking (it asks Serve's controller)."""
    try:
        details = serve_details().applications.get(app)
    except Exception:  # Serve's controller is gone, and every application with it
        return True
    return details is None or details.status == ApplicationStatus.DELETING
