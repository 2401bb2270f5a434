"""The Host names an HTTP app answers: a guard against DNS rebinding.

A web page can make a browser send requests to a name its attacker controls that
resolves to 127.0.0.1, and read the answers: the browser's same-origin rule holds, since
the name is the page's own. What gives the trick away is the Host header, which names
the attacker's domain. So the viewer, the controller's app and the capture app answer
only requests whose Host is a name they are served at: the loopback names by default,
more where a config or flag lists them. The port is not compared (the app does not
always know the one its clients reach it at), and `*` in the list allows any name. The
capture app also answers any IP address, and a request without a Host (HTTP/1.0)
(`HostNames(any_address=True)`): its agents reach it by address, and a rebound page
always sends its own domain's name.

A refused request gets 421 Misdirected Request (as the MCP SDK answers a wrong Host),
before the app sees it.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable

import orjson
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = [
    "ANY_HOST",
    "LOOPBACK_NAMES",
    "HostGuard",
    "HostNames",
    "host_name",
    "is_loopback",
    "names_served",
]

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
ANY_HOST = "*"
_WILDCARD_BINDS = frozenset({"", "0.0.0.0", "::"})


def host_name(header: str) -> str:
    """The name in a Host header: no port, no IPv6 brackets, lower case, no final dot."""
    header = header.strip().lower()
    if header.startswith("["):  # [::1]:8000
        name = header[1 : header.find("]")] if "]" in header else header
    else:
        name = header.rsplit(":", 1)[0] if header.count(":") == 1 else header
    return name.rstrip(".")


def is_loopback(host: str) -> bool:
    """Whether `host` (a bind address or a URL's host) is this machine only:
    `localhost` or a loopback address; any other name is not ours to judge."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def names_served(allowed: Iterable[str], bind: str | None = None) -> tuple[str, ...]:
    """`allowed` (names), plus the address bound when it is one a client can name."""
    names = [host_name(n) if n != ANY_HOST else n for n in allowed]
    if bind is not None and bind not in _WILDCARD_BINDS:
        names.append(host_name(bind if ":" not in bind else f"[{bind}]"))
    return tuple(dict.fromkeys(names))


REFUSED_HOST = "this server does not answer that Host name: list it among the allowed host names"


class HostNames:
    """The Host names a server answers: `allowed` (`*`: any), and with `any_address` any
    IP address and no Host at all. Two Host headers are refused."""

    def __init__(
        self, allowed: Iterable[str] = LOOPBACK_NAMES, *, any_address: bool = False
    ) -> None:
        self.allowed = frozenset(names_served(allowed))
        self.any_address = any_address
        assert self.allowed or any_address, "no Host name allowed: list at least one (or '*')"

    def admits(self, scope: Scope) -> bool:
        if ANY_HOST in self.allowed:
            return True
        hosts = [v for k, v in scope.get("headers", ()) if k == b"host"]
        if len(hosts) != 1:
            return self.any_address and not hosts
        name = host_name(hosts[0].decode("latin-1"))
        return name in self.allowed or (self.any_address and _is_ip(name))


def _is_ip(name: str) -> bool:
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


class HostGuard:
    """`app` behind a Host check: only requests naming one of `allowed` reach it."""

    def __init__(self, app: ASGIApp, allowed: Iterable[str] = LOOPBACK_NAMES) -> None:
        self.app = app
        self.names = HostNames(allowed)

    def __getattr__(self, name: str) -> object:
        # The wrapped app's own attributes (`state`, Starlette's `add_exception_handler`,
        # which Ray Serve calls on an ingress app) stay reachable through the guard.
        return getattr(self.app, name)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket") or self.names.admits(scope):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        body = orjson.dumps({"error": REFUSED_HOST, "field": "host"})
        await send(
            {
                "type": "http.response.start",
                "status": 421,
                "headers": [
                    (b"content-type", b"application/json"),
                    (b"content-length", str(len(body)).encode()),
                ],
            }
        )
        await send({"type": "http.response.body", "body": body})
