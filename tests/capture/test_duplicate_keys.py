"""Two key headers of one kind are refused (401), whichever holds the right key: the
capture proxy decides as the controller does (issue 27), not by which one a server or
a proxy in between keeps."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.capture.test_disconnect import CALLS
from tests.fixtures.threaded import serve_in_thread


@pytest.mark.parametrize(
    ("header", "prefix"), [("authorization", "Bearer "), ("x-api-key", ""), ("x-goog-api-key", "")]
)
def test_two_key_headers_are_refused(header: str, prefix: str) -> None:
    store = InMemorySessionStore()
    session = asyncio.run(store.open_session())
    path, body = CALLS["chat"]
    right, wrong = f"{prefix}{session.key}", f"{prefix}hr-nope-nope"
    with serve_in_thread(
        build_capture_app(store, FakeEngine(), CaptureSettings(served_model="m"))
    ) as url:
        for pair in ((right, wrong), (wrong, right), (right, right)):
            reply = httpx.post(
                f"{url}{path}", json=body, headers=[(header, pair[0]), (header, pair[1])]
            )
            assert reply.status_code == 401, (pair, reply.status_code)
        alone = httpx.post(f"{url}{path}", json=body, headers={header: right})
        assert alone.status_code == 200, alone.text
