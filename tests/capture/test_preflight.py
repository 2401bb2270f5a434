"""Websocket upgrades and connectivity probes, on the ASGI app itself: the paths a
server other than uvicorn takes (no websocket extension, an upgrade passed on as HTTP)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harbor_ray.capture.proxy.app import CaptureApp, CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.capture.asgi_client import call


def app() -> tuple[CaptureApp, FakeEngine]:
    engine = FakeEngine()
    return build_capture_app(
        InMemorySessionStore(), engine, CaptureSettings(served_model="fake-model")
    ), engine


async def websocket(app: CaptureApp, path: str, extensions: dict[str, Any]) -> list[dict[str, Any]]:
    """What the app sends for a websocket handshake on `path`."""
    scope = {
        "type": "websocket",
        "asgi": {"version": "3.0"},
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [(b"upgrade", b"websocket")],
        "extensions": extensions,
    }
    sent: list[dict[str, Any]] = []
    messages = [{"type": "websocket.connect"}]

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "websocket.disconnect", "code": 1000}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def test_websocket_refused_with_426_in_the_dialect_of_the_route() -> None:
    proxy, engine = app()
    start, body = await websocket(proxy, "/v1/messages", {"websocket.http.response": {}})
    assert (start["type"], start["status"]) == ("websocket.http.response.start", 426)
    assert orjson.loads(body["body"])["type"] == "error"  # Anthropic's error shape
    assert engine.calls == []


async def test_websocket_closed_where_the_server_cannot_send_a_response() -> None:
    proxy, _ = app()
    assert await websocket(proxy, "/v1/responses", {}) == [
        {"type": "websocket.close", "code": 1008}
    ]


async def test_an_upgrade_passed_on_as_plain_http_gets_426() -> None:
    proxy, engine = app()
    reply = await call(
        proxy,
        "/v1/responses",
        b"",
        method="GET",
        headers={"connection": "Upgrade", "upgrade": "websocket"},
    )
    assert reply.status == 426
    assert "websocket" in reply.json()["error"]["message"]
    assert engine.calls == []


@pytest.mark.parametrize(
    ("method", "path"), [("HEAD", "/"), ("HEAD", "/v1/messages"), ("GET", "/")]
)
async def test_probes_get_200_without_a_key(method: str, path: str) -> None:
    proxy, engine = app()
    reply = await call(proxy, path, b"", method=method)
    assert reply.status == 200
    assert engine.calls == []
