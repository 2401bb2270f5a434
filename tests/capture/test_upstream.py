"""The real aiohttp engine client against the fake engine served over real HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
import uvicorn

from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.fake_engine import FakeEngine, fake_engine_app
from harbor_ray.capture.proxy.upstream import HttpEngine, api_root
from harbor_ray.errors import CertificationError, EngineError
from harbor_ray.listening import base_url, bind


async def served(fake: FakeEngine) -> AsyncIterator[str]:
    sock = bind("127.0.0.1", 0)
    server = uvicorn.Server(uvicorn.Config(fake_engine_app(fake), log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    while not server.started:
        await asyncio.sleep(0.01)
    try:
        yield base_url(sock)
    finally:
        server.should_exit = True
        await task


@pytest.fixture
async def fake_http() -> AsyncIterator[tuple[FakeEngine, str]]:
    fake = FakeEngine()
    async for url in served(fake):
        yield fake, url


def test_api_root_accepts_either_form() -> None:
    assert api_root("http://h:1/v1/") == api_root("http://h:1") == "http://h:1"


async def test_round_trip_and_certification(fake_http: tuple[FakeEngine, str]) -> None:
    fake, url = fake_http
    engine = HttpEngine(url + "/v1")
    try:
        cert = await certify(engine, engine.root)
        assert cert.served_model == "fake-model"
        fake.token_ids = False
        with pytest.raises(CertificationError, match="prompt_token_ids"):
            await certify(engine, engine.root)
    finally:
        await engine.aclose()


async def test_engine_errors_carry_the_status_the_agent_should_see(
    fake_http: tuple[FakeEngine, str],
) -> None:
    fake, url = fake_http
    engine = HttpEngine(url)
    body = {"messages": [{"role": "user", "content": "x"}]}
    try:
        fake.fail_with = 500
        with pytest.raises(EngineError) as err:
            await engine.request("POST", "/v1/chat/completions", body)
        assert err.value.status == 502 and err.value.retryable
        fake.fail_with = 400
        with pytest.raises(EngineError) as err:
            await engine.request("POST", "/v1/chat/completions", body)
        assert err.value.status == 400 and not err.value.retryable
    finally:
        await engine.aclose()


async def test_unreachable_engine_is_503() -> None:
    engine = HttpEngine("http://127.0.0.1:9")
    try:
        with pytest.raises(EngineError) as err:
            await engine.request("GET", "/v1/models")
        assert err.value.status == 503
    finally:
        await engine.aclose()


async def test_timeout_is_504(fake_http: tuple[FakeEngine, str]) -> None:
    fake, url = fake_http
    fake.delay_s = 2.0
    engine = HttpEngine(url, timeout_s=0.2)
    try:
        with pytest.raises(EngineError) as err:
            await engine.request("POST", "/v1/chat/completions", {"messages": []})
        assert err.value.status == 504
    finally:
        await engine.aclose()


async def test_a_sessions_call_names_its_session_in_serves_session_header(
    fake_http: tuple[FakeEngine, str],
) -> None:
    # A session-affine engine (harbor_ray/engine/routing.py) routes on this header.
    fake, url = fake_http
    engine = HttpEngine(url)
    sessions = ["sess-1", None, "sess-2"]
    try:
        for session in sessions:
            await engine.request("POST", "/v1/chat/completions", {"messages": []}, session=session)
        assert fake.sessions == sessions
    finally:
        await engine.aclose()
