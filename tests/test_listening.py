"""A listening socket bound in the caller's thread."""

from __future__ import annotations

import socket

from harbor_ray.listening import base_url, bind


def test_accepted_connections_do_not_wait_for_nagle() -> None:
    """Under the stdlib event loop nothing else sets TCP_NODELAY on an accepted
    connection, and uvicorn writes a response's head and body apart: each reused
    connection then waited ~40 ms for a delayed ACK."""
    listener = bind("127.0.0.1", 0)
    host, port = base_url(listener).removeprefix("http://").split(":")
    listener.setblocking(True)
    with socket.create_connection((host, int(port))):
        accepted, _ = listener.accept()
        with accepted:
            assert accepted.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
    listener.close()
