"""Hostile and unlucky input over real HTTP (the live server): what a fuzzing pass found.
Each case is answered with a 4xx in the caller's dialect (or served, where the input is
legal), never a 500 or a cut stream, and nothing is recorded by mistake."""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from starlette.types import Message, Receive, Scope, Send

from harbor_ray.capture.proxy.app import CaptureApp, CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.server import server_config
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.capture.asgi_client import call
from tests.capture.live_server import CaptureServer
from tests.capture.test_disconnect import CALLS, STREAMS, error_message
from tests.fixtures.threaded import serve_in_thread

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hi"}]


def post(server: CaptureServer, path: str, key: str, **kwargs: Any) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
    return httpx.post(server.url + path, headers=headers, timeout=10, **kwargs)


def deep_list(levels: int) -> bytes:
    return b"[" * levels + b"]" * levels


def deep_schema(levels: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def with_deep_tool(dialect: str, body: dict[str, Any], levels: int = 300) -> dict[str, Any]:
    schema = deep_schema(levels)
    tools = {
        "chat": [{"type": "function", "function": {"name": "f", "parameters": schema}}],
        "responses": [{"type": "function", "name": "f", "parameters": schema}],
        "anthropic": [{"name": "f", "input_schema": schema}],
        "google": [{"functionDeclarations": [{"name": "f", "parameters": schema}]}],
    }[dialect]
    return {**body, "tools": tools}


def assert_refused(
    server: CaptureServer, sid: str, dialect: str, reply: httpx.Response, status: int = 400
) -> str:
    assert reply.status_code == status, reply.text
    message = error_message(dialect, reply.json())
    assert server.engine.calls == []
    assert server.export(sid)["turns"] == []
    return message


# ---- 1. nesting past the engine client's encoder -------------------------------------


def test_a_field_nested_254_deep_is_refused(server: CaptureServer) -> None:
    sid, key = server.new_session()
    body = b'{"messages":[{"role":"user","content":"hi"}],"zzz":' + deep_list(254) + b"}"
    reply = post(server, CHAT, key, content=body, headers={"content-type": "application/json"})
    assert "nested too deeply" in assert_refused(server, sid, "chat", reply)


def test_a_streamed_call_nested_254_deep_is_refused_before_its_stream(
    server: CaptureServer,
) -> None:
    sid, key = server.new_session()
    body = (
        b'{"stream":true,"messages":[{"role":"user","content":"hi"}],"zzz":' + deep_list(254) + b"}"
    )
    reply = post(server, CHAT, key, content=body, headers={"content-type": "application/json"})
    assert_refused(server, sid, "chat", reply)


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", list(CALLS))
def test_a_300_level_tool_schema_is_refused(
    server: CaptureServer, dialect: str, stream: bool
) -> None:
    sid, key = server.new_session()
    path, body = (STREAMS if stream else CALLS)[dialect]
    reply = post(server, path, key, json=with_deep_tool(dialect, body))
    assert_refused(server, sid, dialect, reply)


def test_an_integer_past_64_bits_in_a_call_is_refused(server: CaptureServer) -> None:
    _, key = server.new_session()
    body = {
        "messages": [{"role": "user", "content": "hi", "zzz": 2**64 - 1}],
        "seed": 5,
        "zzz": [-(2**63)] * 2,
    }
    assert post(server, CHAT, key, json=body).status_code == 200  # 64 bits: fine
    body = b'{"messages":[{"role":"user","content":"hi"}],"seed":18446744073709551616}'
    reply = post(
        server,
        "/v1/chat/completions",
        key,
        content=body,
        headers={"content-type": "application/json"},
    )
    assert reply.status_code == 400 and "seed" in error_message("chat", reply.json())


# ---- 3. request heads: refused while they are read, before authentication ------------


def address(server: CaptureServer) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def raw_exchange(
    server: CaptureServer, head_start: bytes, filler: bytes, *, up_to: int = 8 * 1024 * 1024
) -> tuple[bytes, int]:
    """Send `head_start`, then `filler` until the server answers or closes (or `up_to`
    bytes went out, then end the head); return what it answered and the bytes sent."""
    sent = 0
    with socket.create_connection(address(server)) as sock:
        sock.sendall(head_start)
        sock.settimeout(0.001)
        try:
            while sent < up_to:
                sock.sendall(filler)
                sent += len(filler)
                try:
                    if sock.recv(1, socket.MSG_PEEK):
                        break
                except TimeoutError:
                    pass
            else:
                sock.sendall(b"\r\nhost: x\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass
        sock.settimeout(10)
        answer = b""
        try:
            while chunk := sock.recv(65536):
                answer += chunk
        except (ConnectionResetError, TimeoutError):
            pass
    return answer, sent


def test_a_huge_header_gets_431_before_the_rest_is_read(server: CaptureServer) -> None:
    answer, sent = raw_exchange(server, b"GET /v1/models HTTP/1.1\r\nx-big: ", b"a" * 65536)
    assert answer.startswith(b"HTTP/1.1 431"), answer[:200]
    assert sent <= 1024 * 1024  # refused after a few chunks, not after all of it
    assert httpx.get(server.url + "/health").status_code == 200


def test_a_huge_url_gets_414_before_the_rest_is_read(server: CaptureServer) -> None:
    answer, sent = raw_exchange(server, b"GET /v1/models?pad=", b"a" * 65536)
    assert answer.startswith(b"HTTP/1.1 414"), answer[:200]
    assert sent <= 1024 * 1024


def test_many_headers_summing_past_the_limit_get_431(server: CaptureServer) -> None:
    _, key = server.new_session()
    headers = {f"x-h{i}": "v" * 1000 for i in range(80)}  # each small, 80 KB in all
    reply = post(server, CHAT, key, json={"messages": HELLO}, headers=headers)
    assert reply.status_code == 431
    assert server.engine.calls == []


async def test_the_app_checks_the_head_where_its_server_did_not() -> None:
    """Serve's HTTP proxy runs the app behind its own server: the app refuses too."""
    store = InMemorySessionStore()
    app = build_capture_app(store, FakeEngine(), CaptureSettings(served_model="m"))
    s = await store.open_session()
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as client:
        reply = await client.post(
            "/v1/messages", json={}, headers={"x-api-key": s.key, "x-big": "a" * 70_000}
        )
        assert reply.status_code == 431 and reply.json()["type"] == "error"
        reply = await client.get("/v1beta/models/m:generateContent?pad=" + "a" * 20_000)
        assert reply.status_code == 414 and reply.json()["error"]["code"] == 414


# ---- 4. POST /sessions: never create what cannot be returned -------------------------


@pytest.mark.parametrize(
    "body",
    [
        b'{"budget": 18446744073709551616}',
        b'{"budget": 9223372036854775808}',
        b'{"sampling": {"seed": 18446744073709551616}}',
        b'{"sampling": {"max_tokens": 99999999999999999999}}',
        b'{"sampling": {"top_k": -18446744073709551616}}',
    ],
)
def test_session_values_out_of_range_are_refused_and_nothing_created(
    server: CaptureServer, body: bytes
) -> None:
    before = server.admin.get("/sessions").json()["sessions"]
    reply = server.admin.post(
        "/sessions", content=body, headers={"content-type": "application/json"}
    )
    assert reply.status_code == 400, reply.text
    assert server.admin.get("/sessions").json()["sessions"] == before


# ---- 6. the body cap on every route --------------------------------------------------


def test_post_sessions_refuses_a_body_past_the_cap(server: CaptureServer) -> None:
    before = server.admin.get("/sessions").json()["sessions"]
    padded = b'{"budget": 1, "pad": "' + b"x" * 300_000 + b'"}'
    assert server.admin.post("/sessions", content=padded).status_code == 413

    def chunks():
        yield b'{"budget": 1, "pad": "'
        for _ in range(40):
            yield b"x" * 10_000
        yield b'"}'

    assert server.admin.post("/sessions", content=chunks()).status_code == 413
    assert server.admin.get("/sessions").json()["sessions"] == before


# ---- 7. the smaller ones -------------------------------------------------------------


@pytest.mark.parametrize(
    "field",
    [
        {"temperature": "hot"},
        {"max_tokens": -5},
        {"tools": "x"},
        {"top_p": True},
        {"messages": [{"role": "user", "content": {"a": 1}}]},
        {"seed": 1.5},
        {"stop": [1]},
        {"tools": [{"type": "function", "function": {"name": 3}}]},
        {"tool_choice": "sometimes"},
        {"max_completion_tokens": 0},
    ],
)
def test_chat_refuses_values_of_the_wrong_type(server: CaptureServer, field: dict) -> None:
    sid, key = server.new_session()
    reply = post(server, CHAT, key, json={"model": "m", "messages": HELLO, **field})
    (name,) = field
    # Refused by that field's own check, which names it: not by one before it.
    assert name in assert_refused(server, sid, "chat", reply)


@pytest.mark.parametrize("path", [CHAT, "/v1/responses"])
def test_stream_null_means_not_streamed(server: CaptureServer, path: str) -> None:
    _, key = server.new_session()
    body = {"model": "m", "messages": HELLO, "input": "hi", "stream": None}
    if path == CHAT:
        del body["input"]
    else:
        del body["messages"]
    reply = post(server, path, key, json=body)
    assert reply.status_code == 200 and "echo: hi" in reply.text


async def test_an_empty_bearer_does_not_hide_an_api_key_header() -> None:
    # In process: httpx will not send a header value that ends in a space; servers do
    # take it (and strip it to `Bearer`, which must not hide the key either).
    store = InMemorySessionStore()
    app = build_capture_app(store, FakeEngine(), CaptureSettings(served_model="m"))
    s = await store.open_session()
    for empty in ("Bearer ", "Bearer"):
        got = await call(
            app,
            "/v1/messages",
            CALLS["anthropic"][1],
            headers={"authorization": empty, "x-api-key": s.key},
        )
        assert got.status == 200, got.body
    assert len((await store.export(s.session_id))["turns"]) == 2


@pytest.mark.parametrize("dialect", list(CALLS))
def test_an_engine_429_stays_retryable_in_the_dialect(server: CaptureServer, dialect: str) -> None:
    server.engine.fail_with = 429
    sid, key = server.new_session(budget=1)
    path, body = CALLS[dialect]
    reply = post(server, path, key, json=body)
    assert reply.status_code == 429
    error_message(dialect, reply.json())
    kind = reply.json()["error"].get("type") or reply.json()["error"]["status"]
    assert kind in ("rate_limit_error", "RESOURCE_EXHAUSTED")
    doc = server.export(sid)
    assert doc["turns"] == [] and doc["counts"]["engine_errors"] == 1
    server.engine.fail_with = None
    assert post(server, path, key, json=body).status_code == 200  # the slot came back


def test_an_unknown_google_method_gets_googles_404(server: CaptureServer) -> None:
    _, key = server.new_session()
    reply = httpx.post(
        server.url + "/v1beta/models/m:embedContent", json={}, headers={"x-goog-api-key": key}
    )
    assert reply.status_code == 404
    assert reply.json()["error"]["status"] == "NOT_FOUND"


@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        (CHAT, "chat"),
        ("/v1/messages", "anthropic"),
        ("/v1beta/models/m:generateContent", "google"),
        ("/v1/responses", "responses"),
    ],
)
def test_other_methods_get_405_in_the_dialect(
    server: CaptureServer, path: str, dialect: str
) -> None:
    reply = httpx.put(server.url + path, json={})
    assert reply.status_code == 405
    error_message(dialect, reply.json())


@dataclass
class Watched:
    """The capture app, which says when each request's handling ended, what it raised
    and the statuses it answered: an event to wait on instead of a guess at how long it
    takes, and proof of which path the request took."""

    app: CaptureApp
    ended: threading.Event = field(default_factory=threading.Event)
    raised: list[BaseException] = field(default_factory=list)
    statuses: list[int] = field(default_factory=list)

    @property
    def settings(self) -> CaptureSettings:  # what server_config reads
        return self.app.settings

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                self.statuses.append(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, sending)
        except BaseException as exc:
            self.raised.append(exc)
            raise
        finally:
            self.ended.set()


def test_a_client_gone_mid_body_logs_no_traceback(caplog: pytest.LogCaptureFixture) -> None:
    store, engine = InMemorySessionStore(), FakeEngine()
    key = asyncio.run(store.open_session()).key
    watched = Watched(build_capture_app(store, engine, CaptureSettings(served_model="m")))
    uvicorn_log = logging.getLogger("uvicorn.error")
    uvicorn_log.addHandler(caplog.handler)
    try:
        with serve_in_thread(watched, config=server_config(watched)) as url:
            host, port = url.removeprefix("http://").rsplit(":", 1)
            with socket.create_connection((host, int(port))) as s:
                # A host the app serves: any other is refused (421) before the body.
                s.sendall(
                    b"POST /v1/chat/completions HTTP/1.1\r\nhost: "
                    + f"{host}:{port}".encode()
                    + b"\r\n"
                    b"content-type: application/json\r\ncontent-length: 1000\r\n"
                    b"authorization: Bearer " + key.encode() + b'\r\n\r\n{"messa'
                )
            assert watched.ended.wait(30), "the app never finished the request"
    finally:
        uvicorn_log.removeHandler(caplog.handler)
    assert watched.raised == []
    # The body's read met the disconnect: no answer at all, where a refusal of the
    # request's head (host, key, content type) would have answered with its status.
    assert watched.statuses == []
    assert not [r for r in caplog.records if r.exc_info], [r.getMessage() for r in caplog.records]
    assert engine.calls == []
