"""Port forwards into the bubblewrap sandbox, with real bwrap, real sockets, real HTTP.

The upstream is a plain HTTP server on the host's loopback, standing in for the capture
proxy; clients inside run the sandbox's own python3 with urllib, as an agent's SDK would.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shlex
import threading
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from harbor.environments.base import ExecResult
from harbor.models.trial.config import EnvironmentConfig as TrialEnvironmentConfig

from harbor_ray.errors import SandboxError, SandboxSetupError
from harbor_ray.trials.sandbox import BwrapEnvironment
from harbor_ray.trials.sandbox.forward import Forward, parse_forwards
from harbor_ray.trials.sandbox.processes import pid_namespace
from tests.trials.test_bwrap_sandbox import live_cmdlines, make_environment, pid_namespace_of
from tests.waiting import eventually

SANDBOX_PORT = 8765
CONCURRENT = 20
STREAM_EVENTS = 200


def stream_event(index: int) -> bytes:
    # Large enough (about 2 MB in all) that the relays must apply backpressure.
    return f"data: {index} {'x' * 10_000}\n\n".encode()


@dataclass
class Upstream:
    """What the host server saw."""

    port: int
    paths: list[str] = field(default_factory=list)
    together: threading.Barrier = field(default_factory=lambda: threading.Barrier(CONCURRENT))
    waiting: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive and chunked streams, as a proxy speaks
    upstream: Upstream

    def log_message(self, format: str, *args: object) -> None:
        pass

    def do_GET(self) -> None:
        self.upstream.paths.append(self.path)
        if self.path == "/v1/stream":
            self.stream(stream_event(i) for i in range(STREAM_EVENTS))
        elif self.path == "/v1/silent":
            # A model that has not answered yet: nothing comes back until released.
            self.upstream.waiting.set()
            self.upstream.release.wait(timeout=60)
        elif self.path == "/v1/together":
            # Answers only once all requests are open at the same time.
            self.upstream.together.wait(timeout=30)
            self.reply({"together": True})
        else:
            self.reply({"path": self.path, "from": "host"})

    def reply(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def stream(self, events: Iterator[bytes]) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for event in events:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            self.wfile.flush()
            time.sleep(0.001)
        self.wfile.write(b"0\r\n\r\n")


@pytest.fixture
def upstream() -> Iterator[Upstream]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    seen = Upstream(port=server.server_address[1])
    Handler.upstream = seen
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield seen
    seen.release.set()
    server.shutdown()
    server.server_close()


def forward_kwargs(upstream_port: int) -> dict[str, object]:
    """The kwargs as they reach the environment from a JSON or YAML job config."""
    config = {"forward": {SANDBOX_PORT: f"127.0.0.1:{upstream_port}"}}
    return TrialEnvironmentConfig(kwargs=json.loads(json.dumps(config))).kwargs


@pytest.fixture
async def forwarded(tmp_path: Path, upstream: Upstream) -> AsyncIterator[BwrapEnvironment]:
    environment = make_environment(tmp_path, **forward_kwargs(upstream.port))
    await environment.start(force_build=False)
    yield environment
    await environment.stop(delete=True)


async def python_inside(environment: BwrapEnvironment, script: str) -> ExecResult:
    return await environment.exec(f"python3 -c {shlex.quote(script)}", timeout_sec=60)


def fetch_script(url: str) -> str:
    return (
        f"import urllib.request; print(urllib.request.urlopen({url!r}, timeout=20).read().decode())"
    )


def unix_listeners() -> set[str]:
    """Paths of the unix sockets this process holds, read from /proc."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    paths = set()
    for line in Path("/proc/net/unix").read_text().splitlines()[1:]:
        fields = line.split()
        if len(fields) == 8 and fields[6] in inodes:
            paths.add(fields[7])
    return paths


def forward_sockets() -> set[str]:
    return {path for path in unix_listeners() if path.endswith(f"/{SANDBOX_PORT}.sock")}


async def test_sandbox_reaches_the_forwarded_address(
    forwarded: BwrapEnvironment, upstream: Upstream
) -> None:
    url = forwarded.forward_url(SANDBOX_PORT)
    assert url == f"http://127.0.0.1:{SANDBOX_PORT}"
    result = await python_inside(forwarded, fetch_script(f"{url}/v1/models?x=1"))
    assert result.return_code == 0, result.stderr
    assert json.loads(result.stdout or "") == {"path": "/v1/models?x=1", "from": "host"}
    assert upstream.paths == ["/v1/models?x=1"]


async def test_streamed_response_arrives_intact(forwarded: BwrapEnvironment) -> None:
    url = forwarded.forward_url(SANDBOX_PORT)
    script = (
        "import hashlib, urllib.request\n"
        f"response = urllib.request.urlopen('{url}/v1/stream', timeout=30)\n"
        "assert response.headers['Transfer-Encoding'] == 'chunked'\n"
        "body = response.read()\n"
        "print(len(body), hashlib.sha256(body).hexdigest())\n"
    )
    result = await python_inside(forwarded, script)
    assert result.return_code == 0, result.stderr
    expected = b"".join(stream_event(i) for i in range(STREAM_EVENTS))
    assert result.stdout == f"{len(expected)} {hashlib.sha256(expected).hexdigest()}\n"


async def test_concurrent_requests_are_relayed_at_once(
    forwarded: BwrapEnvironment, upstream: Upstream
) -> None:
    url = forwarded.forward_url(SANDBOX_PORT)
    script = (
        "import json, urllib.request\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "def fetch(_):\n"
        f"    return json.load(urllib.request.urlopen('{url}/v1/together', timeout=30))\n"
        f"with ThreadPoolExecutor({CONCURRENT}) as pool:\n"
        f"    print(json.dumps(list(pool.map(fetch, range({CONCURRENT})))))\n"
    )
    result = await python_inside(forwarded, script)
    assert result.return_code == 0, result.stderr
    assert json.loads(result.stdout or "") == [{"together": True}] * CONCURRENT
    assert not upstream.together.broken


async def test_half_close_passes_through_both_relays(tmp_path: Path) -> None:
    async def reverse_after_eof(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write((await reader.read())[::-1])
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(reverse_after_eof, "127.0.0.1", 0)
    environment = make_environment(
        tmp_path, forward={SANDBOX_PORT: f"127.0.0.1:{server.sockets[0].getsockname()[1]}"}
    )
    await environment.start(force_build=False)
    script = (
        "import socket\n"
        f"client = socket.create_connection(('127.0.0.1', {SANDBOX_PORT}), timeout=20)\n"
        "client.sendall(b'half-closed')\n"
        "client.shutdown(socket.SHUT_WR)\n"
        "reply = b''\n"
        "while chunk := client.recv(4096):\n"
        "    reply += chunk\n"
        "print(reply)\n"
    )
    try:
        result = await python_inside(environment, script)
    finally:
        await environment.stop(delete=True)
        server.close()
        await server.wait_closed()
    assert result.return_code == 0, result.stderr
    assert result.stdout == "b'desolc-flah'\n"


async def test_without_the_forward_the_request_fails(tmp_path: Path, upstream: Upstream) -> None:
    environment = make_environment(tmp_path)
    await environment.start(force_build=False)
    try:
        result = await python_inside(environment, fetch_script(f"http://127.0.0.1:{SANDBOX_PORT}"))
        assert not (await environment.exec("ls /run")).stdout
    finally:
        await environment.stop(delete=True)
    assert result.return_code != 0
    assert "Connection refused" in (result.stderr or "")
    assert upstream.paths == []
    with pytest.raises(SandboxSetupError, match="not forwarded"):
        environment.forward_url(SANDBOX_PORT)


async def test_other_host_ports_stay_unreachable(
    forwarded: BwrapEnvironment, upstream: Upstream
) -> None:
    accepted: list[bool] = []

    async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        accepted.append(True)
        writer.close()

    other = await asyncio.start_server(accept, "127.0.0.1", 0)
    try:
        # The forward's own target too: only the forwarded port leads there.
        for port in (other.sockets[0].getsockname()[1], upstream.port):
            result = await forwarded.exec(
                f"exec 3<>/dev/tcp/127.0.0.1/{port} && echo connected", timeout_sec=10
            )
            assert result.stdout is None and result.return_code != 0
    finally:
        other.close()
        await other.wait_closed()
    assert accepted == []
    assert upstream.paths == []


async def test_stop_leaves_no_relay_listener_or_socket(tmp_path: Path, upstream: Upstream) -> None:
    tasks_before = asyncio.all_tasks()
    sockets_before = forward_sockets()
    environment = make_environment(tmp_path, **forward_kwargs(upstream.port))
    await environment.start(force_build=False)
    namespace = await pid_namespace_of(environment)
    # A request still waiting for the model when the trial is cut off: the host relay
    # gets an EOF from the sandbox's side, but nothing ever comes back from upstream.
    url = environment.forward_url(SANDBOX_PORT)
    await environment.exec(f"python3 -c {shlex.quote(fetch_script(f'{url}/v1/silent'))} &")
    await eventually(upstream.waiting.is_set)
    (socket_path,) = forward_sockets() - sockets_before
    relays = [
        pid
        for pid, cmdline in live_cmdlines().items()
        if "/run/harbor-ray/relay.py" in cmdline and pid_namespace(pid) == namespace
    ]
    assert len(relays) == 1

    async with asyncio.timeout(20):
        await environment.stop(delete=True)
    assert not Path(f"/proc/{relays[0]}").exists()
    assert forward_sockets() == sockets_before
    assert not Path(socket_path).parent.exists()
    assert asyncio.all_tasks() - tasks_before == set()
    assert list((tmp_path / "sandboxes").iterdir()) == []


async def test_start_fails_clearly_when_the_sandbox_cannot_listen(
    tmp_path: Path, upstream: Upstream
) -> None:
    sockets_before = forward_sockets()
    # Commands inside hold no capabilities, so no port below 1024.
    environment = make_environment(tmp_path, forward={80: f"127.0.0.1:{upstream.port}"})
    with pytest.raises(SandboxError, match=r"relay for ports 80 .*Permission denied"):
        await environment.start(force_build=False)
    assert environment.sandbox_dir is None
    assert forward_sockets() == sockets_before
    assert list((tmp_path / "sandboxes").iterdir()) == []


async def test_on_the_host_network_the_target_is_used_directly(
    tmp_path: Path, upstream: Upstream
) -> None:
    environment = make_environment(tmp_path, share_network=True, **forward_kwargs(upstream.port))
    await environment.start(force_build=False)
    try:
        url = environment.forward_url(SANDBOX_PORT)
        result = await python_inside(environment, fetch_script(f"{url}/direct"))
        relays = await environment.exec("ps -eo args | grep -c [r]elay.py")
    finally:
        await environment.stop(delete=True)
    assert url == f"http://127.0.0.1:{upstream.port}"
    assert result.return_code == 0, result.stderr
    assert upstream.paths == ["/direct"]
    assert relays.stdout == "0\n"


def test_forward_config() -> None:
    forwards = parse_forwards({"9001": "[::1]:80", 9000: "127.0.0.1:8765"})
    assert forwards == (
        Forward(port=9000, host="127.0.0.1", target_port=8765),
        Forward(port=9001, host="::1", target_port=80),
    )
    assert [forward.target_url for forward in forwards] == [
        "http://127.0.0.1:8765",
        "http://[::1]:80",
    ]
    for bad in ({"x": "127.0.0.1:1"}, {0: "127.0.0.1:1"}, {1: "127.0.0.1"}, {1: "h:70000"}):
        with pytest.raises(SandboxSetupError, match="port"):
            parse_forwards(bad)
