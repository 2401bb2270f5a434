"""A host's relay to the capture proxy's replicas: balancing and failover per connection.

Each connection agents open to the relay's loopback URL is spliced, byte for byte, to
one live replica's own socket (round-robin), skipping Serve's shared HTTP proxy. No HTTP
is parsed: a keep-alive connection stays on its replica, a replica that dies takes its
connections with it, and a refusing replica is dropped on the spot and reported dead.
Replicas come from `fetch` (replica_registry.py), checked against each URL's `/health`
instance id and fetched again when none is left or the list is older than `refresh_s`.
The splice passes EOFs on (half-close) and pauses a side whose peer's buffer is full.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import urlsplit

import httpx

from harbor_ray.cluster.replica_registry import ReplicaEntry

_log = logging.getLogger(__name__)

Fetch = Callable[[], Awaitable[Sequence[ReplicaEntry]]]
Forget = Callable[[ReplicaEntry], Awaitable[None]]


class Rotation:
    """Round-robin over the replicas believed live; a replica found dead leaves it."""

    def __init__(self) -> None:
        self._entries: list[ReplicaEntry] = []
        self._next = 0

    def __len__(self) -> int:
        return len(self._entries)

    def replace(self, entries: Sequence[ReplicaEntry]) -> None:
        self._entries = list(entries)

    def next(self) -> ReplicaEntry | None:
        if not self._entries:
            return None
        self._next %= len(self._entries)
        entry = self._entries[self._next]
        self._next += 1
        return entry

    def down(self, entry: ReplicaEntry) -> None:
        with contextlib.suppress(ValueError):
            self._entries.remove(entry)


async def still_there(
    entries: Sequence[ReplicaEntry], timeout_s: float = 2.0
) -> tuple[list[ReplicaEntry], list[ReplicaEntry]]:
    """(live, dead): live entries answer /health with their own instance id; dead ones
    refuse connections or are answered by another server (a port reused). Entries that
    only time out are neither: a busy replica is not a dead one."""

    async def check(client: httpx.AsyncClient, entry: ReplicaEntry) -> bool | None:
        try:
            reply = await client.get(f"{entry.url}/health")
            instance: object = reply.json().get("instance")
            return instance == entry.instance
        except (httpx.ConnectError, ValueError, AttributeError):
            return False
        except httpx.HTTPError:
            return None

    async with httpx.AsyncClient(timeout=timeout_s) as client:
        verdicts = await asyncio.gather(*(check(client, e) for e in entries))
    live = [e for e, ok in zip(entries, verdicts, strict=True) if ok]
    dead = [e for e, ok in zip(entries, verdicts, strict=True) if ok is False]
    return live, dead


class _Pipe(asyncio.Protocol):
    """One side of a spliced connection: what it reads goes to its peer's transport."""

    def __init__(
        self,
        on_made: Callable[[_Pipe], None] | None = None,
        on_lost: Callable[[_Pipe], None] | None = None,
    ) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _Pipe | None = None
        self.eof = False
        self._early: list[bytes] = []
        self._on_made, self._on_lost = on_made, on_lost

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Under uvloop (Ray's actors run on it) a TCP transport is not an
        # asyncio.Transport subclass, but has the same methods.
        self.transport = transport  # type: ignore[assignment]
        if self._on_made is not None:
            self._on_made(self)

    def pair(self, peer: _Pipe) -> None:
        """Start passing bytes to `peer`, beginning with what arrived before it."""
        self.peer = peer
        assert peer.transport is not None
        for data in self._early:
            peer.transport.write(data)
        self._early.clear()
        if self.eof:
            self._pass_eof()

    def data_received(self, data: bytes) -> None:
        if self.peer is None:
            self._early.append(data)
        else:
            self.peer.transport.write(data)  # type: ignore[union-attr]

    def eof_received(self) -> bool:
        self.eof = True
        if self.peer is not None:
            self._pass_eof()
        return True  # keep our sending side open: the peer may still answer

    def _pass_eof(self) -> None:
        peer = self.peer
        assert peer is not None and peer.transport is not None
        if peer.eof:
            self.close()
            peer.close()
        elif peer.transport.can_write_eof():
            peer.transport.write_eof()

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.transport.pause_reading()  # type: ignore[union-attr]

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.transport.resume_reading()  # type: ignore[union-attr]

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()
        if self._on_lost is not None:
            self._on_lost(self)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()


class Relay:
    """Listens on loopback; each accepted connection is spliced to a live replica."""

    def __init__(
        self,
        fetch: Fetch,
        forget: Forget | None = None,
        *,
        refresh_s: float = 5.0,
        connect_timeout_s: float = 2.0,
        attempts: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch, self._forget = fetch, forget
        self._refresh_s, self._connect_timeout_s = refresh_s, connect_timeout_s
        self._attempts = attempts
        self._clock = clock
        self.rotation = Rotation()
        self._fetched_at = float("-inf")
        self._refreshing: asyncio.Task[None] | None = None
        self._servers: list[asyncio.Server] = []
        self._pipes: set[_Pipe] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen; return the relay's base URL (`http://127.0.0.1:PORT`)."""
        server = await asyncio.get_running_loop().create_server(
            self._accepted, host, port, backlog=2048
        )
        self._servers.append(server)
        bound_host, bound_port = server.sockets[0].getsockname()[:2]
        self.url = f"http://{bound_host}:{bound_port}"
        return self.url

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for pipe in list(self._pipes):
            pipe.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    # ---- choosing a replica ------------------------------------------------------

    async def refresh(self) -> None:
        """Fetch and check the replicas now (one fetch at a time; callers share it)."""
        if self._refreshing is None or self._refreshing.done():
            self._refreshing = asyncio.ensure_future(self._refresh())
        await asyncio.shield(self._refreshing)

    async def _refresh(self) -> None:
        try:
            live, dead = await still_there(await self._fetch())
        except Exception:
            _log.exception("cannot list the proxy's replicas")
            return
        for entry in dead:
            self._report(entry)
        self.rotation.replace(live)
        self._fetched_at = self._clock()

    def _report(self, entry: ReplicaEntry) -> None:
        """Drop a replica found dead, and tell the registry behind the caller's back."""
        self.rotation.down(entry)
        if self._forget is not None:
            self._spawn(self._forget(entry))

    async def connect(self, protocol: Callable[[], _Pipe]) -> _Pipe | None:
        """A connection to a live replica, trying each in turn; None if none accepts."""
        if self._clock() - self._fetched_at > self._refresh_s:
            if len(self.rotation):
                self._spawn(self.refresh())  # stale but usable: refresh behind the call
            else:
                await self.refresh()
        loop = asyncio.get_running_loop()
        for attempt in range(self._attempts):
            if attempt:
                await asyncio.sleep(0.1 * attempt)
                await self.refresh()
            while (entry := self.rotation.next()) is not None:
                address = urlsplit(entry.url)
                try:
                    async with asyncio.timeout(self._connect_timeout_s):
                        host, port = address.hostname, address.port
                        assert host and port, f"a replica registered as {entry.url}"
                        _, pipe = await loop.create_connection(protocol, host, port)
                    return pipe
                except ConnectionRefusedError:
                    self._report(entry)
                except (OSError, TimeoutError) as exc:
                    _log.warning("replica %s not reached: %s", entry.replica_id, exc)
                    self.rotation.down(entry)
        return None

    # ---- splicing ----------------------------------------------------------------

    def _accepted(self) -> _Pipe:
        return _Pipe(on_made=self._made, on_lost=self._pipes.discard)

    def _made(self, near: _Pipe) -> None:
        self._pipes.add(near)
        near.transport.pause_reading()  # type: ignore[union-attr]
        self._spawn(self._attach(near))

    async def _attach(self, near: _Pipe) -> None:
        far = await self.connect(
            lambda: _Pipe(on_made=self._pipes.add, on_lost=self._pipes.discard)
        )
        if far is None or near.transport.is_closing():  # type: ignore[union-attr]
            if far is None:
                _log.warning("no replica of the capture proxy accepts connections")
            near.close()
            if far is not None:
                far.close()
            return
        near.pair(far)
        far.pair(near)
        near.transport.resume_reading()  # type: ignore[union-attr]

    def _spawn(self, coro: Awaitable[None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("relay task failed", exc_info=task.exception())
