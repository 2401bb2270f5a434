"""A visitor's own engine URL: where the playground connects for a visitor, for how long,
and what it says when the engine cannot be used.

A visitor's URL makes the server connect where the visitor says. So:

- it is an `http://` or `https://` URL naming a host (a 400 naming `llm_url` otherwise);
- every address its host resolves to is public, unless the operator started the
  playground with `--allow-private-engines`: otherwise the form reaches this machine's
  and its network's services on the visitor's behalf (the Ray dashboard, a cloud's
  metadata address). The server's own `--llm-url` is the operator's: never checked;
- resolving and certifying end within `CERTIFY_TIMEOUT_S`, whatever the other end does
  (one that accepts and never answers included);
- a failure is said in fixed words that quote nothing the other end said: its answer
  may hold another service's secrets, and words that differ would tell a closed port
  from a service that answers.

The host is resolved again when the engine is reached, so a name whose DNS answer
changes in between (DNS rebinding) is not caught here: keep the key to people you would
let reach the network the server is on.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from harbor_ray.capture.proxy.certify import Certification, certify_url
from harbor_ray.capture.proxy.http1 import DEFAULT_PORTS
from harbor_ray.errors import CertificationError, EngineCallError, PlaygroundRefusal

__all__ = ["CERTIFY_TIMEOUT_S", "VisitorEngines"]

CERTIFY_TIMEOUT_S = 15.0  # resolving and certifying a visitor's engine, all told
_NOT_A_URL = "llm_url: an http:// or https:// URL naming the engine's host (and port)"
_PRIVATE = (
    "llm_url: a visitor's engine must be at a public address; this playground "
    "reaches loopback and private ones only for its own --llm-url (its operator "
    "can allow them with --allow-private-engines)"
)
_FAILED = (
    "llm_url: that engine cannot be used: it did not certify as an engine the "
    "playground can run on (what it answered is not shown here; `harbor-ray info "
    "--llm-url URL` says why, where you run it)"
)

Certify = Callable[[str], Awaitable[Certification]]


@dataclass(frozen=True)
class VisitorEngines:
    """How visitors' engines are checked: `allow_private` lets them be on loopback or a
    private network; `certify` is the certification (`certify_url`, or a stand-in)."""

    allow_private: bool = False
    timeout_s: float = CERTIFY_TIMEOUT_S
    certify: Certify = certify_url

    async def certified(self, url: str) -> Certification:
        """`url`'s certification, or a `PlaygroundRefusal` (400) in fixed words."""
        host, port = _host_port(url)
        try:
            async with asyncio.timeout(self.timeout_s):
                if not self.allow_private:
                    await _refuse_private(host, port)
                return await self.certify(url)
        except TimeoutError as exc:
            raise PlaygroundRefusal(
                f"llm_url: that engine did not answer within {self.timeout_s:g} s", status=400
            ) from exc
        except (CertificationError, EngineCallError, OSError, ValueError) as exc:
            raise PlaygroundRefusal(_FAILED, status=400) from exc


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    try:
        port = parts.port
    except ValueError:  # not a number, or past 65535
        port = -1
    if parts.scheme not in DEFAULT_PORTS or not parts.hostname or port == -1:
        raise PlaygroundRefusal(_NOT_A_URL, status=400)
    return parts.hostname, port or DEFAULT_PORTS[parts.scheme]


async def _refuse_private(host: str, port: int) -> None:
    """Refuse `host` unless every address it resolves to is public. Resolved as the
    connection will be (so `2130706433` and `127.1` are 127.0.0.1); a name that does not
    resolve is an engine that cannot be used, said as any other."""
    found = await asyncio.get_running_loop().getaddrinfo(host, port, type=socket.SOCK_STREAM)
    if not all(_public(str(sockaddr[0])) for *_, sockaddr in found):
        raise PlaygroundRefusal(_PRIVATE, status=400)


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped  # ::ffff:127.0.0.1 is 127.0.0.1
    return ip.is_global and not ip.is_multicast
