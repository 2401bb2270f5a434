"""A byte relay between two stream connections, and the sandbox's half of a port forward.

    python3 -I relay.py PORT=SOCKET [PORT=SOCKET ...]

listens on 127.0.0.1:PORT inside the sandbox and relays each connection to the unix
socket SOCKET (the host half, forward.py, which imports `relay` from here). It binds
every port, forks a server and exits 0 once every port accepts connections (else the
reason on stderr). Standard library only, Python 3.8 and later: the sandbox runs it with
the host's python3. How a relay half-closes: docs/sandbox.md, "The sandbox's relay".
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import socket
import sys
from collections.abc import Awaitable, Callable

_CHUNK = 64 * 1024


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """Pass bytes on until EOF, then pass the EOF on."""
    while True:
        data = await reader.read(_CHUNK)
        if not data:
            break
        writer.write(data)
        await writer.drain()
    writer.write_eof()


async def _splice(
    near: tuple[asyncio.StreamReader, asyncio.StreamWriter],
    far: tuple[asyncio.StreamReader, asyncio.StreamWriter],
) -> None:
    copies = [
        asyncio.ensure_future(_copy(near[0], far[1])),
        asyncio.ensure_future(_copy(far[0], near[1])),
    ]
    try:
        await asyncio.wait(copies, return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for copy in copies:
            copy.cancel()
        near[1].close()
        far[1].close()
        results = await asyncio.gather(*copies, return_exceptions=True)
    # A side that resets or vanishes is how connections end; anything else is a bug.
    for result in results:
        if isinstance(result, Exception) and not isinstance(result, OSError):
            raise result


async def relay(
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    connect: Callable[[], Awaitable[tuple[asyncio.StreamReader, asyncio.StreamWriter]]],
) -> None:
    """Relay an accepted connection to a new one opened by `connect()`, until both end.

    The accepted connection is closed in every case; an `OSError` from `connect()` is
    raised (after closing it) so that the caller can say why the far side is missing.
    """
    try:
        far = await connect()
    except BaseException:
        writer.close()
        raise
    await _splice((reader, writer), far)


async def _relay_to_socket(
    path: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    # Nowhere to report a missing host half: the client sees its connection closed.
    with contextlib.suppress(OSError):
        await relay(reader, writer, functools.partial(asyncio.open_unix_connection, path))


def _listen(spec: str) -> tuple[socket.socket, str]:
    port, separator, path = spec.partition("=")
    if not separator or not port.isdigit() or not path:
        raise ValueError(f"expected PORT=SOCKET, got {spec!r}")
    try:
        return socket.create_server(("127.0.0.1", int(port))), path
    except OSError as exc:
        raise OSError(f"cannot listen on 127.0.0.1:{port} in the sandbox: {exc}") from exc


async def _serve(listeners: list[tuple[socket.socket, str]], ready: int) -> None:
    servers = [
        await asyncio.start_server(functools.partial(_relay_to_socket, path), sock=sock)
        for sock, path in listeners
    ]
    # Let go of the starting command's output files before saying so, so that what it
    # returns is complete.
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    os.write(ready, b"1")
    os.close(ready)
    await asyncio.gather(*(server.serve_forever() for server in servers))


def main(specs: list[str]) -> int:
    """Bind every port, fork the server, and return once it serves (see the docstring)."""
    if not specs:
        print("relay: nothing to forward; usage: relay.py PORT=SOCKET ...", file=sys.stderr)
        return 2
    try:
        listeners = [_listen(spec) for spec in specs]
    except (ValueError, OSError) as exc:
        print(f"relay: {exc}", file=sys.stderr)
        return 1
    ready_read, ready_write = os.pipe()
    if os.fork() != 0:
        os.close(ready_write)
        # EOF before the byte: the server died starting (its traceback is on stderr).
        return 0 if os.read(ready_read, 1) == b"1" else 1
    os.close(ready_read)
    # Out of the starting command's session, so nothing that ends that command ends it.
    os.setsid()
    asyncio.run(_serve(listeners, ready_write))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
