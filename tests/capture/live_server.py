"""A real capture server over real HTTP (uvicorn on a loopback port, its own thread),
in front of the in-process fake engine. One per test session; tests swap the script."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from harbor_ray.capture.app import CaptureSettings, build_capture_app
from harbor_ray.capture.fake_engine import FakeEngine, echo_script
from harbor_ray.capture.server import bind, serve
from harbor_ray.capture.session import InMemorySessionStore

ADMIN_KEY = "test-admin-key"


@dataclass
class CaptureServer:
    url: str
    engine: FakeEngine
    admin: httpx.Client

    def new_session(self, budget: int | None = None) -> tuple[str, str]:
        reply = self.admin.post("/sessions", json={"budget": budget})
        reply.raise_for_status()
        body = reply.json()
        return body["session_id"], body["key"]

    def export(self, session_id: str) -> dict:
        reply = self.admin.get(f"/sessions/{session_id}/export")
        reply.raise_for_status()
        return reply.json()


@pytest.fixture(scope="session")
def capture_server() -> Iterator[CaptureServer]:
    engine = FakeEngine()
    app = build_capture_app(
        InMemorySessionStore(), engine,
        CaptureSettings(served_model="fake-model", admin_key=ADMIN_KEY,
                        max_body_bytes=256 * 1024, keepalive_s=0.05),
    )
    sock = bind("127.0.0.1", 0)
    ready = threading.Event()
    urls: list[str] = []
    loop = asyncio.new_event_loop()

    def on_ready(url: str) -> None:
        urls.append(url)
        ready.set()

    stop = asyncio.Event()

    def run() -> None:
        asyncio.set_event_loop(loop)
        loop.run_until_complete(serve(app, sock, on_ready=on_ready, stop=stop))

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert ready.wait(30), "capture server did not start"
    admin = httpx.Client(base_url=urls[0], headers={"authorization": f"Bearer {ADMIN_KEY}"})
    try:
        yield CaptureServer(urls[0], engine, admin)
    finally:
        admin.close()
        loop.call_soon_threadsafe(stop.set)
        thread.join(15)


@pytest.fixture
def server(capture_server: CaptureServer) -> Iterator[CaptureServer]:
    """The shared server with the fake engine reset to its defaults for this test."""
    engine = capture_server.engine
    engine.script, engine.delay_s, engine.fail_with = echo_script, 0.0, None
    engine.cancelled = 0
    engine.calls.clear()
    yield capture_server
