"""The last pass every playground answer goes through: no body holds the key, the
server's engine URL (its host included), or the credentials of any URL.

Two rules, because one cannot do both. A URL's credentials (`scheme://user:pw@host`)
are hidden wherever a URL is written, whatever their length, by the URL's shape: a
two-letter password is not a string that could be replaced everywhere without also
eating every "pw" of a task's files. The server's own engine URL, and the forms its
host takes in a connection error (`host:port`, `('host', port)`), are hidden as strings,
like the key; those are long enough to be the engine's and nothing else's.
"""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from harbor_ray.capture.proxy.http1 import DEFAULT_PORTS
from harbor_ray.capture.proxy.upstream import api_root

__all__ = ["HIDDEN", "Scrub", "hide_credentials"]

HIDDEN = b"[hidden]"
# A URL's userinfo: from `://` to the last `@` before the host ends (urlsplit reads it so:
# a password may hold an `@` of its own). Not across `/?#`, blanks or a JSON quote.
_USERINFO = re.compile(rb"://[^/?#\s\"]*@")
_SHORTEST = 4  # a shorter string is too common to hide everywhere


def hide_credentials(body: bytes) -> bytes:
    """`body` with the credentials of every URL in it replaced, whatever their length."""
    return _USERINFO.sub(b"://" + HIDDEN + b"@", body)


class Scrub:
    """Hides, in an answer's body, the key and the server's engine URL (`llm_url`, which
    may carry a credential), then every URL's credentials."""

    def __init__(self, *, key: str | None, llm_url: str | None) -> None:
        found = [key or "", *(_engine_forms(llm_url) if llm_url else [])]
        self._hidden = sorted(
            {s.encode() for s in found if len(s) >= _SHORTEST}, key=len, reverse=True
        )  # a URL before the host inside it

    def __call__(self, body: bytes) -> bytes:
        for secret in self._hidden:
            body = body.replace(secret, HIDDEN)
        return hide_credentials(body)


def _engine_forms(url: str) -> list[str]:
    """The ways the engine URL shows in what is said of it: as given, as its API root,
    its credentials alone, and its host as a connection error names it."""
    parts = urlsplit(url)
    host_port = parts.netloc.rpartition("@")[2]
    forms = [
        url,
        url.rstrip("/"),
        api_root(url),
        host_port,
        parts.username or "",
        parts.password or "",
    ]
    # A URL the engine client would not reach (not http(s), no host, a port that is not
    # one) is never named in a connection error.
    if parts.hostname and parts.scheme in DEFAULT_PORTS:
        try:
            port = parts.port or DEFAULT_PORTS[parts.scheme]
        except ValueError:
            return forms
        forms += [f"{parts.hostname}:{port}", f"('{parts.hostname}', {port})"]
    return forms
