"""The app behind a path prefix, as Ray Serve mounts it, and without admin routes.

Serve hands a replica the full path with the route prefix as `root_path` (ASGI's
convention); httpx's ASGITransport with `root_path` builds exactly that scope.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import pytest

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine, render_prompt
from harbor_ray.capture.proxy.session import InMemorySessionStore

PREFIX = "/capture"
HELLO = [{"role": "user", "content": "hello"}]


def mounted(
    store: InMemorySessionStore, engine: FakeEngine, admin: InMemorySessionStore | None
) -> httpx.AsyncClient:
    app = build_capture_app(store, engine, CaptureSettings(served_model="fake-model"), admin=admin)
    transport = httpx.ASGITransport(app=app, root_path=PREFIX)
    return httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1")


@pytest.fixture
async def client() -> AsyncIterator[tuple[httpx.AsyncClient, InMemorySessionStore, FakeEngine]]:
    store, engine = InMemorySessionStore(), FakeEngine()
    async with mounted(store, engine, admin=store) as http:
        yield http, store, engine


async def test_the_sdk_works_through_a_route_prefix(client) -> None:
    http, store, engine = client
    session = await store.open_session()
    sdk = openai.AsyncOpenAI(
        base_url=f"http://127.0.0.1{PREFIX}/v1",
        api_key=session.key,
        http_client=http,
        max_retries=0,
    )
    reply = await sdk.chat.completions.create(model="m", messages=HELLO)
    assert reply.choices[0].message.content == "echo: hello"
    models = await sdk.models.list()
    assert [m.id for m in models.data] == ["fake-model"]
    (turn,) = (await store.export(session.session_id))["turns"]
    assert turn["prompt_ids"] == render_prompt(engine.calls[0]["messages"])


async def test_paths_in_the_url_are_read_below_the_prefix(client) -> None:
    http, store, _ = client
    session = await store.open_session()
    reply = await http.post(
        f"{PREFIX}/v1beta/models/gemini:generateContent",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
        headers={"x-goog-api-key": session.key},
    )
    assert reply.status_code == 200, reply.text
    assert reply.json()["candidates"][0]["content"]["parts"][0]["text"] == "echo: hi"
    unknown = await http.post(f"{PREFIX}/nowhere", json={})
    assert unknown.status_code == 404
    assert unknown.json()["error"]["message"] == "no route /nowhere"


async def test_without_admin_routes_sessions_cannot_be_minted_or_read() -> None:
    store, engine = InMemorySessionStore(), FakeEngine()
    session = await store.open_session()
    async with mounted(store, engine, admin=None) as http:
        for method, path in [
            ("POST", "/sessions"),
            ("GET", "/sessions"),
            ("GET", f"/sessions/{session.session_id}/export"),
        ]:
            reply = await http.request(method, PREFIX + path, json={})
            # The model-call route answers: an unknown path, in the chat dialect.
            assert reply.status_code == 404, (method, path)
            assert reply.json()["error"]["message"] == f"no route {path}"
        # DELETE matches no route's methods at all: Starlette's plain 405.
        deleted = await http.delete(f"{PREFIX}/sessions/{session.session_id}")
        assert deleted.status_code == 405
    assert store.session_ids() == [session.session_id]
