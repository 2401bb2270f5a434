"""A listening socket bound in the caller's thread, and the URL it serves.

docs/lessons.md: a liveness probe that connected to whoever held the port, while the real
bind error died on a background thread, produced 401s and rollouts with zero model
calls. So every server harbor_ray runs (the capture proxy, the viewer) gets a socket
bound here, before it starts: a taken port fails loudly, at once.
"""

from __future__ import annotations

import socket

from harbor_ray.errors import ServeError

__all__ = ["base_url", "bind"]


def bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it. uvloop sets it on them anyway; the stdlib loop
    # does not for a socket made with protocol 0, and uvicorn writes a response's head
    # and body separately, so Nagle and delayed ACKs added ~40 ms to reused connections.
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise ServeError(f"cannot bind {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    sock.setblocking(False)
    return sock


def base_url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{port}"
