"""A real capture server over real HTTP (uvicorn on a loopback port, its own thread),
in front of the in-process fake engine. One per test session; tests swap the script."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine, echo_script
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.fixtures.threaded import serve_in_thread

ADMIN_KEY = "test-admin-key"


@dataclass
class CaptureServer:
    url: str
    engine: FakeEngine
    admin: httpx.Client
    store: InMemorySessionStore

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
    engine, store = FakeEngine(), InMemorySessionStore()
    app = build_capture_app(
        store,
        engine,
        CaptureSettings(
            served_model="fake-model",
            admin_key=ADMIN_KEY,
            max_body_bytes=256 * 1024,
            keepalive_s=0.05,
        ),
        admin=store,
    )
    with serve_in_thread(app) as url:
        admin = httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN_KEY}"})
        try:
            yield CaptureServer(url, engine, admin, store)
        finally:
            admin.close()


@pytest.fixture
def server(capture_server: CaptureServer) -> Iterator[CaptureServer]:
    """The shared server with the fake engine reset to its defaults for this test."""
    engine = capture_server.engine
    engine.script, engine.delay_s, engine.fail_with = echo_script, 0.0, None
    engine.tokenize = True
    engine.cancelled = 0
    engine.calls.clear()
    yield capture_server
