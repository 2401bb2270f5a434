"""The lean HTTP/1.1 client against real servers on loopback: uvicorn where the server is
well behaved, raw asyncio servers where it must misbehave."""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import socket
import ssl
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import pytest
import uvicorn
import uvloop
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from harbor_ray.capture.proxy.http1 import Http1Pool
from harbor_ray.errors import EngineConnectError, EngineProtocolError, Http1Timeout
from harbor_ray.listening import base_url, bind

JSON = {"Content-Type": "application/json"}


@dataclass
class Tally:
    """Connections as the server saw them."""

    made: int = 0
    lost: int = 0
    peak: int = 0
    requests: int = 0
    lost_event: asyncio.Event = field(default_factory=asyncio.Event)

    def opened(self) -> None:
        self.made += 1
        self.peak = max(self.peak, self.made - self.lost)

    def closed(self) -> None:
        self.lost += 1
        self.lost_event.set()

    async def until_lost(self, count: int) -> None:
        async with asyncio.timeout(3):
            while self.lost < count:
                self.lost_event.clear()
                await self.lost_event.wait()


def pattern(size: int) -> bytes:
    return (bytes(range(251)) * (size // 251 + 1))[:size]


async def read_body(receive: Callable[[], Awaitable[dict[str, Any]]]) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            return b"".join(chunks)


async def respond(send: Callable[..., Awaitable[None]], status: int, body: bytes) -> None:
    headers = [(b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """/echo describes the request, /raw answers its body back, /status/N answers N,
    /chunked streams without a length, /big/N answers N bytes, /port names the
    client's port (so its connection), /slow sleeps 20 ms."""
    body = await read_body(receive)
    path = scope["path"]
    if path.endswith("/echo"):
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        described = {"method": scope["method"], "path": path, "headers": headers}
        await respond(send, 200, orjson.dumps({**described, "body": body.decode()}))
    elif path == "/raw":
        await respond(send, 200, body)
    elif path.startswith("/status/"):
        await respond(send, int(path.rsplit("/", 1)[1]), b'{"error": "nope"}')
    elif path == "/chunked":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        for i in range(5):
            await send({"type": "http.response.body", "body": b"part%d," % i, "more_body": True})
        await send({"type": "http.response.body", "body": b"end"})
    elif path.startswith("/big/"):
        size = int(path.rsplit("/", 1)[1])
        await respond(send, 200, pattern(size))
    elif path == "/port":
        await respond(send, 200, b"%d" % scope["client"][1])
    elif path == "/slow":
        await asyncio.sleep(0.02)
        await respond(send, 200, b"slow")
    else:
        await respond(send, 404, b"")


@asynccontextmanager
async def uvicorn_served(**config: Any) -> AsyncIterator[tuple[str, Tally]]:
    tally = Tally()

    class Counting(HttpToolsProtocol):
        def connection_made(self, transport: Any) -> None:
            tally.opened()
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            tally.closed()
            super().connection_lost(exc)

    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(
        uvicorn.Config(app, http=Counting, lifespan="off", log_level="warning", **config)
    )
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield base_url(sock), tally
    finally:
        server.should_exit = True
        await task


Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, Tally], Awaitable[None]]


@asynccontextmanager
async def raw_served(handler: Handler) -> AsyncIterator[tuple[str, Tally]]:
    """A server that speaks just enough HTTP to misbehave on purpose."""
    tally = Tally()
    writers: list[asyncio.StreamWriter] = []

    async def on_connection(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        tally.opened()
        writers.append(writer)
        try:
            await handler(reader, writer, tally)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()
            tally.closed()

    server = await asyncio.start_server(on_connection, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}", tally
    finally:
        server.close()
        for writer in writers:
            writer.close()
        await server.wait_closed()


async def read_request(reader: asyncio.StreamReader, tally: Tally) -> bytes:
    """One request's first line; its body is read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            await reader.readexactly(int(line.split(b":")[1]))
    tally.requests += 1
    return head.split(b"\r\n", 1)[0]


OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


async def test_json_post_round_trip_under_a_path_prefix() -> None:
    async with uvicorn_served() as (url, _):
        pool = Http1Pool(url + "/v1/", timeout_s=5)
        body = orjson.dumps({"messages": [{"role": "user", "content": "hé"}]})
        status, raw = await pool.request("POST", "/echo", body, JSON)
        await pool.aclose()
    echoed = orjson.loads(raw)
    assert status == 200
    assert echoed["method"] == "POST" and echoed["path"] == "/v1/echo"
    assert echoed["body"].encode() == body
    assert echoed["headers"]["host"] == url.removeprefix("http://")
    assert echoed["headers"]["content-type"] == "application/json"
    assert echoed["headers"]["content-length"] == str(len(body))


async def test_get_without_body_sends_no_length_or_type() -> None:
    async with uvicorn_served() as (url, _):
        pool = Http1Pool(url, timeout_s=5)
        status, raw = await pool.request("GET", "/echo")
        await pool.aclose()
    echoed = orjson.loads(raw)
    assert status == 200 and echoed["method"] == "GET" and echoed["body"] == ""
    assert "content-length" not in echoed["headers"]
    assert "content-type" not in echoed["headers"]


async def test_error_statuses_are_returned_not_raised() -> None:
    async with uvicorn_served() as (url, _):
        pool = Http1Pool(url, timeout_s=5)
        answers = [await pool.request("POST", f"/status/{s}", b"{}") for s in (400, 404, 503)]
        await pool.aclose()
    assert answers == [(s, b'{"error": "nope"}') for s in (400, 404, 503)]


async def test_chunked_response_is_decoded() -> None:
    async with uvicorn_served() as (url, _):
        reader, writer = await asyncio.open_connection(*url.removeprefix("http://").split(":"))
        writer.write(b"GET /chunked HTTP/1.1\r\nHost: x\r\n\r\n")
        assert b"\r\ntransfer-encoding: chunked\r\n" in await reader.readuntil(b"\r\n\r\n")
        writer.close()
        pool = Http1Pool(url, timeout_s=5)
        answer = await pool.request("GET", "/chunked")
        await pool.aclose()
    assert answer == (200, b"part0,part1,part2,part3,part4,end")


async def test_large_bodies_both_ways() -> None:
    size = 5 * 1024 * 1024
    sent = pattern(size)[::-1]
    async with uvicorn_served() as (url, _):
        pool = Http1Pool(url, timeout_s=5)
        assert await pool.request("POST", "/raw", sent) == (200, sent)
        status, got = await pool.request("GET", f"/big/{size}")
        await pool.aclose()
    assert status == 200 and got == pattern(size)


async def test_sequential_requests_reuse_one_connection() -> None:
    async with uvicorn_served() as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        for i in range(20):
            assert await pool.request("POST", "/raw", b"%d" % i) == (200, b"%d" % i)
        await pool.aclose()
        assert tally.made == 1


async def test_concurrency_is_bounded_by_max_connections() -> None:
    async with uvicorn_served() as (url, tally):
        # A request's timeout counts its wait for a slot: the last of the 200 waits for
        # the whole run (0.5 s idle; over 5 s beside CI's integration tests).
        pool = Http1Pool(url, max_connections=8, timeout_s=60)
        answers = await asyncio.gather(*(pool.request("GET", "/slow") for _ in range(200)))
        await pool.aclose()
        assert answers == [(200, b"slow")] * 200
        assert 2 <= tally.peak <= 8
        assert tally.made <= 8


async def test_connection_close_is_honoured() -> None:
    async def answer_and_ask_to_close(reader, writer, tally) -> None:
        await read_request(reader, tally)
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok")
        await reader.read()  # the client must close; a second request here gets no answer

    async with raw_served(answer_and_ask_to_close) as (url, tally):
        pool = Http1Pool(url, timeout_s=2)
        assert await pool.request("GET", "/a") == (200, b"ok")
        await tally.until_lost(1)
        assert await pool.request("GET", "/b") == (200, b"ok")
        await pool.aclose()
    assert tally.made == 2 and tally.requests == 2


async def test_the_newest_idle_connection_is_reused_first() -> None:
    async with uvicorn_served() as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        await asyncio.gather(pool.request("GET", "/slow"), pool.request("GET", "/slow"))
        ports = {(await pool.request("GET", "/port"))[1] for _ in range(6)}
        await pool.aclose()
        assert tally.made == 2 and len(ports) == 1


async def test_idle_connections_expire() -> None:
    async with uvicorn_served() as (url, tally):
        pool = Http1Pool(url, idle_s=0.05, timeout_s=5)
        await pool.request("GET", "/raw")
        await asyncio.sleep(0.1)
        await pool.request("GET", "/raw")
        await tally.until_lost(1)
        await pool.aclose()
        assert tally.made == 2


async def test_request_racing_the_servers_idle_close_is_retried_once() -> None:
    async def answer_once_then_close_on_the_next(reader, writer, tally) -> None:
        await read_request(reader, tally)
        writer.write(OK)
        await reader.readuntil(b"\r\n\r\n")  # the next request arrives as the server closes

    async with raw_served(answer_once_then_close_on_the_next) as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        assert await pool.request("POST", "/a", b"{}") == (200, b"ok")
        assert await pool.request("POST", "/b", b"{}") == (200, b"ok")
        await pool.aclose()
    assert tally.made == 2 and tally.requests == 2


async def test_connection_closed_while_idle_is_not_reused() -> None:
    async def answer_once_then_close(reader, writer, tally) -> None:
        await read_request(reader, tally)
        writer.write(OK)

    async with raw_served(answer_once_then_close) as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        assert await pool.request("GET", "/a") == (200, b"ok")
        await tally.until_lost(1)
        await asyncio.sleep(0.05)  # let the client see the close
        assert await pool.request("GET", "/b") == (200, b"ok")
        await pool.aclose()
    assert tally.made == 2 and tally.requests == 2


async def test_fresh_connection_closed_without_answer_is_not_retried() -> None:
    async def close_on_request(reader, writer, tally) -> None:
        await read_request(reader, tally)

    async with raw_served(close_on_request) as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        with pytest.raises(EngineProtocolError, match="before any response"):
            await pool.request("POST", "/a", b"{}")
        await pool.aclose()
    assert tally.made == 1 and tally.requests == 1


async def test_close_mid_response_is_a_protocol_error_and_not_retried() -> None:
    async def second_answer_cut_short(reader, writer, tally) -> None:
        await read_request(reader, tally)
        writer.write(OK)
        await read_request(reader, tally)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n" + b"x" * 50)
        await writer.drain()

    async with raw_served(second_answer_cut_short) as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        assert await pool.request("POST", "/a", b"{}") == (200, b"ok")
        with pytest.raises(EngineProtocolError, match="mid-response"):
            await pool.request("POST", "/b", b"{}")
        await pool.aclose()
    assert tally.made == 1 and tally.requests == 2


async def test_garbage_response_is_a_protocol_error() -> None:
    async def garbage(reader, writer, tally) -> None:
        await read_request(reader, tally)
        writer.write(b"SMTP ready, or something\r\n\r\n")
        await reader.read()

    async with raw_served(garbage) as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        with pytest.raises(EngineProtocolError, match="malformed"):
            await pool.request("GET", "/a")
        await tally.until_lost(1)  # the client dropped the connection
        await pool.aclose()


async def test_unsolicited_bytes_on_an_idle_connection_drop_it() -> None:
    async def answer_twice(reader, writer, tally) -> None:
        await read_request(reader, tally)
        writer.write(OK + OK)
        await reader.read()

    async with raw_served(answer_twice) as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        assert await pool.request("GET", "/a") == (200, b"ok")
        await tally.until_lost(1)
        assert await pool.request("GET", "/b") == (200, b"ok")
        await pool.aclose()
    assert tally.made == 2


async def test_refused_connection_is_a_connect_error() -> None:
    pool = Http1Pool(f"http://127.0.0.1:{unused_port()}")
    with pytest.raises(EngineConnectError):
        await pool.request("GET", "/v1/models")


async def test_unanswered_request_times_out_and_drops_the_connection() -> None:
    async def never_answer(reader, writer, tally) -> None:
        await read_request(reader, tally)
        await reader.read()

    async with raw_served(never_answer) as (url, tally):
        pool = Http1Pool(url, timeout_s=0.3)
        started = time.monotonic()
        with pytest.raises(Http1Timeout):
            await pool.request("POST", "/a", b"{}")
        assert time.monotonic() - started < 1.0
        await tally.until_lost(1)
        await pool.aclose()


async def test_cancelled_requests_close_their_connection_and_free_their_slot() -> None:
    async def answer_unless_hang(reader, writer, tally) -> None:
        while True:
            line = await read_request(reader, tally)
            if b"/hang" in line:
                await reader.read()
                return
            writer.write(OK)

    async with raw_served(answer_unless_hang) as (url, tally):
        pool = Http1Pool(url, max_connections=2, timeout_s=5)
        hung = [asyncio.create_task(pool.request("GET", "/hang")) for _ in range(2)]
        async with asyncio.timeout(5):
            while tally.requests < 2:
                await asyncio.sleep(0.01)
        for task in hung:
            task.cancel()
        await asyncio.gather(*hung, return_exceptions=True)
        await tally.until_lost(2)
        async with asyncio.timeout(3):
            answers = await asyncio.gather(*(pool.request("GET", "/ok") for _ in range(2)))
        await pool.aclose()
    assert answers == [(200, b"ok")] * 2
    assert all(task.cancelled() for task in hung)


async def test_aclose_closes_idle_connections() -> None:
    async with uvicorn_served() as (url, tally):
        pool = Http1Pool(url, timeout_s=5)
        await asyncio.gather(*(pool.request("GET", "/slow") for _ in range(3)))
        assert tally.made == 3 and tally.lost == 0
        await pool.aclose()
        await tally.until_lost(3)
        with pytest.raises(AssertionError, match="closed"):
            await pool.request("GET", "/slow")


def test_a_url_without_a_scheme_is_a_connect_error() -> None:
    """The engine URL a user typed: the engine client maps it to a 503 that names it."""
    with pytest.raises(EngineConnectError, match="with its scheme"):
        Http1Pool("127.0.0.1:8000")


async def test_head_is_refused_rather_than_hanging() -> None:
    with pytest.raises(AssertionError, match="HEAD"):
        await Http1Pool("http://127.0.0.1:9").request("HEAD", "/")


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


async def test_https_with_a_trusted_self_signed_cert(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    async with uvicorn_served(ssl_certfile=str(cert), ssl_keyfile=str(key)) as (url, tally):
        url = url.replace("http://", "https://")
        pool = Http1Pool(url, ssl_context=ssl.create_default_context(cafile=str(cert)), timeout_s=5)
        for _ in range(3):
            assert await pool.request("POST", "/raw", b'{"x": 1}', JSON) == (200, b'{"x": 1}')
        await pool.aclose()
        assert tally.made == 1
        untrusting = Http1Pool(url, timeout_s=5)
        with pytest.raises(EngineConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await untrusting.request("GET", "/raw")


def test_the_client_under_uvloop() -> None:
    """Production runs uvloop, whose transports report closes on their own schedule."""

    async def scenarios() -> None:
        await test_json_post_round_trip_under_a_path_prefix()
        await test_chunked_response_is_decoded()
        await test_sequential_requests_reuse_one_connection()
        await test_concurrency_is_bounded_by_max_connections()
        await test_request_racing_the_servers_idle_close_is_retried_once()
        await test_connection_closed_while_idle_is_not_reused()
        await test_connection_close_is_honoured()
        await test_unsolicited_bytes_on_an_idle_connection_drop_it()
        await test_close_mid_response_is_a_protocol_error_and_not_retried()
        await test_cancelled_requests_close_their_connection_and_free_their_slot()

    with ThreadPoolExecutor(1) as executor:
        executor.submit(uvloop.run, scenarios()).result()
