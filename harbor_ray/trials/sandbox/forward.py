"""Port forwards: a sandbox without network reaching chosen host TCP addresses.

Each forward is 127.0.0.1:PORT inside the sandbox (relay.py) -> a unix socket in a
host directory bound read-only -> the host half (`Forwarding`) in this process -> the
one host address configured for that socket: the sandbox picks a socket, never a
destination. Ports below 1024 cannot be forwarded. Why each piece: docs/sandbox.md,
"Port forwards".
"""

from __future__ import annotations

import asyncio
import functools
import logging
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import harbor_ray.trials.sandbox.relay as relay
from harbor_ray.errors import ExecTimeoutError, SandboxError, SandboxSetupError
from harbor_ray.trials.sandbox.layout import SANDBOX_PATH, Bind
from harbor_ray.trials.sandbox.runtime import Sandbox

__all__ = ["SOCKET_DIR", "Forward", "Forwarding", "parse_forwards"]

# Where the sandbox sees the sockets and the relay program.
SOCKET_DIR = PurePosixPath("/run/harbor-ray")
_RELAY_PROGRAM = "relay.py"
# Starting the sandbox's relay is one short Python start-up; this only bounds a hang.
_START_TIMEOUT_SEC = 30


@dataclass(frozen=True)
class Forward:
    """127.0.0.1:`port` inside the sandbox leads to `host`:`target_port` on the host."""

    port: int
    host: str
    target_port: int

    @property
    def socket_name(self) -> str:
        return f"{self.port}.sock"

    @property
    def sandbox_url(self) -> str:
        """The base URL at which commands in the sandbox reach the target."""
        return f"http://127.0.0.1:{self.port}"

    @property
    def target_url(self) -> str:
        """The target's own base URL, for a sandbox on the host's network."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.target_port}"


def _port(value: int | str, what: str) -> int:
    try:
        port = int(value)
    except ValueError:
        raise SandboxSetupError(f"{what} must be a port number (1-65535), got {value!r}") from None
    if not 0 < port < 65536:
        raise SandboxSetupError(f"{what} must be a port number (1-65535), got {value!r}")
    return port


def parse_forwards(spec: Mapping[int | str, str]) -> tuple[Forward, ...]:
    """Validate `{sandbox port: "host:port"}`; keys may be strings, as JSON makes them."""
    forwards = []
    for port, address in spec.items():
        host, separator, target = str(address).rpartition(":")
        if not separator or not host:
            raise SandboxSetupError(f"forward target must be 'host:port', got {address!r}")
        forwards.append(
            Forward(
                port=_port(port, "forwarded sandbox port"),
                host=host.removeprefix("[").removesuffix("]"),
                target_port=_port(target, f"port of forward target {address!r}"),
            )
        )
    return tuple(sorted(forwards, key=lambda forward: forward.port))


class Forwarding:
    """The forwards of one sandbox: the host half, and the start of the sandbox's half.

    Three phases, in the sandbox's own order: `open()` before the sandbox starts (its
    directory must exist for bwrap to bind it; see `binds`), `start_inside()` once it
    runs, `close()` after it stopped. With no forwards, every phase does nothing.
    """

    def __init__(self, forwards: Sequence[Forward], logger: logging.Logger) -> None:
        self._forwards = tuple(forwards)
        self._logger = logger
        self._directory: Path | None = None
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()

    @property
    def binds(self) -> tuple[Bind, ...]:
        """What the sandbox must bind to see the sockets; () until `open()`."""
        if self._directory is None:
            return ()
        return (Bind(source=self._directory, target=SOCKET_DIR, read_only=True),)

    async def open(self) -> None:
        """Create the socket directory and listen on one socket per forward."""
        if not self._forwards:
            return
        self._directory = Path(tempfile.mkdtemp(prefix="harbor-ray-forward-"))
        shutil.copyfile(relay.__file__, self._directory / _RELAY_PROGRAM)
        for forward in self._forwards:
            server = await asyncio.start_unix_server(
                functools.partial(self._serve, forward),
                path=self._directory / forward.socket_name,
            )
            self._servers.append(server)

    async def _serve(
        self, forward: Forward, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        # asyncio neither lists nor cancels a server's connections (before 3.13): close()
        # needs them to end the long ones (SSE streams, keep-alive).
        self._connections.add(task)
        connect = functools.partial(asyncio.open_connection, forward.host, forward.target_port)
        try:
            await relay.relay(reader, writer, connect)
        except OSError as exc:
            self._logger.warning(
                f"Forward from sandbox port {forward.port}: cannot connect to "
                f"{forward.host}:{forward.target_port}: {exc}"
            )
        finally:
            self._connections.discard(task)

    async def start_inside(self, sandbox: Sandbox) -> None:
        """Start the sandbox's relay; return once every forwarded port accepts connections.

        `SandboxError` with the relay's own words if it cannot (a port below 1024, no
        python3 in the sandbox).
        """
        if not self._forwards:
            return
        specs = [f"{forward.port}={SOCKET_DIR / forward.socket_name}" for forward in self._forwards]
        ports = ", ".join(str(forward.port) for forward in self._forwards)
        with tempfile.TemporaryFile() as output:
            try:
                code = await sandbox.run(
                    ["python3", "-I", str(SOCKET_DIR / _RELAY_PROGRAM), *specs],
                    cwd=PurePosixPath("/"),
                    env={"PATH": SANDBOX_PATH},
                    stdout=output,
                    stderr=output,
                    timeout_sec=_START_TIMEOUT_SEC,
                )
            except ExecTimeoutError:
                raise SandboxError(
                    f"the sandbox's relay for ports {ports} did not start within "
                    f"{_START_TIMEOUT_SEC} seconds"
                ) from None
            if code != 0:
                output.seek(0)
                said = output.read().decode(errors="replace").strip()
                raise SandboxError(
                    f"the sandbox's relay for ports {ports} did not start ({code}): {said}"
                )

    async def close(self) -> None:
        """Stop listening, end every relayed connection, remove the sockets. Idempotent."""
        servers, self._servers = self._servers, []
        for server in servers:
            server.close()
        connections = list(self._connections)
        for connection in connections:
            connection.cancel()
        await asyncio.gather(*connections, return_exceptions=True)
        for server in servers:
            await server.wait_closed()
        directory, self._directory = self._directory, None
        if directory is not None:
            shutil.rmtree(directory)
