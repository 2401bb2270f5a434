"""A hosted API's rate limit (429 with Retry-After) slows the proxy's calls instead of
failing them: the proxy sends the call again after the delay asked, a bounded number of
times, and the turn says how many. Against a stand-in of Anthropic's API
(tests/fixtures/providers.py)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.hosted import build_upstream
from harbor_ray.capture.proxy.pipeline import MAX_RATE_LIMIT_RETRIES, MAX_RETRY_AFTER_S
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.fixtures.providers import MODEL, StandIn, provider_app
from tests.fixtures.threaded import serve_in_thread

SECRET = "sk-ant-rate-SECRET-0b7d41"
ADMIN = "rate-admin-key"


@dataclass
class Proxy:
    stand_in: StandIn
    admin: httpx.Client
    url: str

    def call(self) -> tuple[httpx.Response, dict]:
        """One chat call in a new session, and the session's export after it."""
        session = self.admin.post("/sessions", json={}).raise_for_status().json()
        reply = httpx.post(f"{self.url}/v1/chat/completions", timeout=30, headers={
            "authorization": f"Bearer {session['key']}"}, json={
            "model": MODEL, "messages": [{"role": "user", "content": "hello"}]})
        export = self.admin.get(f"/sessions/{session['session_id']}/export")
        return reply, export.raise_for_status().json()

    def generations(self) -> int:
        return sum(1 for path, _, body in self.stand_in.requests
                   if body is not None and path == "/v1/messages")


@pytest.fixture(scope="module")
def proxy() -> Iterator[Proxy]:
    stand_in = StandIn("anthropic", SECRET)
    with serve_in_thread(provider_app(stand_in)) as url:
        upstream = build_upstream("anthropic", url, key=SECRET)
        asyncio.run(certify(upstream, upstream.root, capture="text"))
        store = InMemorySessionStore()
        app = build_capture_app(store, upstream, CaptureSettings(
            served_model=MODEL, admin_key=ADMIN, stitch=False, capture="text",
            keepalive_s=0.05), admin=store)
        with serve_in_thread(app) as proxy_url, httpx.Client(
                base_url=proxy_url, headers={"authorization": f"Bearer {ADMIN}"}) as admin:
            yield Proxy(stand_in, admin, proxy_url)


@pytest.fixture
def stand_in(proxy: Proxy) -> Iterator[StandIn]:
    proxy.stand_in.requests.clear()
    yield proxy.stand_in
    proxy.stand_in.rate_limited, proxy.stand_in.retry_after = 0, "0"


def test_a_rate_limited_call_is_sent_again_and_counted(proxy: Proxy, stand_in: StandIn
                                                        ) -> None:
    stand_in.rate_limited, stand_in.retry_after = 2, "0.05"
    reply, export = proxy.call()
    assert reply.status_code == 200, reply.text
    assert proxy.generations() == 3  # refused twice, then answered
    (turn,) = export["turns"]
    assert turn["upstream_retries"] == 2
    assert export["counts"]["retried_calls"] == 1
    assert export["counts"]["engine_errors"] == 0
    # Every try carried the key, in the API's own header.
    assert all(headers["x-api-key"] == SECRET for path, headers, body in stand_in.requests
               if body is not None)


def test_retries_are_bounded_then_the_429_reaches_the_agent(proxy: Proxy, stand_in: StandIn
                                                            ) -> None:
    stand_in.rate_limited, stand_in.retry_after = MAX_RATE_LIMIT_RETRIES + 1, "0"
    reply, export = proxy.call()
    assert reply.status_code == 429
    assert proxy.generations() == 1 + MAX_RATE_LIMIT_RETRIES
    assert export["turns"] == [] and export["counts"]["engine_errors"] == 1


@pytest.mark.parametrize("retry_after", [None, str(MAX_RETRY_AFTER_S * 2), "soon"],
                         ids=["absent", "too-long", "not-seconds"])
def test_a_429_without_a_usable_retry_after_is_not_retried(
        proxy: Proxy, stand_in: StandIn, retry_after: str | None) -> None:
    stand_in.rate_limited, stand_in.retry_after = 1, retry_after
    reply, export = proxy.call()
    assert reply.status_code == 429
    assert proxy.generations() == 1
    assert export["counts"]["retried_calls"] == 0 and export["counts"]["engine_errors"] == 1
