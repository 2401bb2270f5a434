"""Calls whose client left, and calls whose session ended while they ran: no turn that no
agent received, no budget spent on one, no 500.

Over real HTTP (the live server) for the triggers as users hit them; in process (the
ASGI client in asgi_client.py) where the moment of leaving must be exact.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.errors import SessionGone
from tests.capture.asgi_client import call
from tests.capture.live_server import CaptureServer
from tests.capture.test_session import turn

CHAT = "/v1/chat/completions"
HELLO = [{"role": "user", "content": "hi"}]
# One non-streamed and one streamed call per dialect: (path, body).
CALLS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": (CHAT, {"model": "m", "messages": HELLO}),
    "responses": ("/v1/responses", {"model": "m", "input": "hi"}),
    "anthropic": ("/v1/messages", {"model": "m", "max_tokens": 9, "messages": HELLO}),
    "google": (
        "/v1beta/models/m:generateContent",
        {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
    ),
}
STREAMS: dict[str, tuple[str, dict[str, Any]]] = {
    **{
        name: (path, {**body, "stream": True})
        for name, (path, body) in CALLS.items()
        if name != "google"
    },
    "google": ("/v1beta/models/m:streamGenerateContent?alt=sse", CALLS["google"][1]),
}


def error_message(dialect: str, body: dict[str, Any]) -> str:
    """The message of an error document in the dialect's own shape."""
    if dialect == "anthropic":
        assert body["type"] == "error"
    if dialect == "google":
        assert body["error"]["status"]
    else:
        assert body["error"]["type"]
    return body["error"]["message"]


def until(condition: Callable[[], bool], timeout_s: float = 5) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


# ---- the store -----------------------------------------------------------------------


async def test_a_deleted_sessions_record_and_release_raise_session_gone() -> None:
    store = InMemorySessionStore()
    s = await store.open_session()
    admission = await store.admit(s.session_id)
    await store.delete(s.session_id)
    with pytest.raises(SessionGone):
        await store.record(s.session_id, turn(admission.call_index))
    with pytest.raises(SessionGone):
        await store.release(s.session_id, admission.call_index)


async def test_releasing_a_recorded_call_withdraws_its_turn_and_budget() -> None:
    store = InMemorySessionStore()
    s = await store.open_session(budget=1)
    first = await store.admit(s.session_id)
    await store.record(s.session_id, turn(first.call_index))
    await store.release(s.session_id, first.call_index)  # its reply was never delivered
    await store.record(s.session_id, turn(first.call_index))  # a late duplicate
    assert (await store.export(s.session_id))["turns"] == []
    assert (await store.admit(s.session_id)).admitted
    assert not (await store.admit(s.session_id)).admitted


# ---- over real HTTP ------------------------------------------------------------------


def delete_once_the_engine_works(server: CaptureServer, sid: str) -> threading.Thread:
    def delete() -> None:
        until(lambda: len(server.engine.calls) == 1)
        assert server.admin.delete(f"/sessions/{sid}").status_code == 204

    deleting = threading.Thread(target=delete)
    deleting.start()
    return deleting


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("dialect", list(CALLS))
def test_a_session_deleted_while_its_call_runs_gets_401_in_the_dialect(
    server: CaptureServer, dialect: str, stream: bool
) -> None:
    """A 401 document, or for a stream (a 200 already) the dialect's error event; never a
    500 or a cut stream."""
    # Long enough for the deleting thread to act while the engine works, on a loaded CI
    # machine too (there, once, it had not within 0.3 s and the call was answered).
    server.engine.delay_s = 2.0
    sid, key = server.new_session()
    path, body = (STREAMS if stream else CALLS)[dialect]
    deleting = delete_once_the_engine_works(server, sid)
    with httpx.stream(
        "POST", server.url + path, json=body, timeout=10, headers={"authorization": f"Bearer {key}"}
    ) as reply:
        reply.read()  # raises if the stream is cut
    deleting.join()
    if stream:
        assert reply.status_code == 200 and "session has ended" in reply.text
    else:
        assert reply.status_code == 401, reply.text
        assert "session has ended" in error_message(dialect, reply.json())


@pytest.mark.parametrize("dialect", list(CALLS))
def test_a_non_streamed_call_whose_client_left_is_cancelled_and_not_recorded(
    server: CaptureServer, dialect: str
) -> None:
    server.engine.delay_s = 1.0
    sid, key = server.new_session(budget=1)
    path, body = CALLS[dialect]
    with pytest.raises(httpx.ReadTimeout):  # the client gives up and closes its socket
        httpx.post(
            server.url + path,
            json=body,
            headers={"authorization": f"Bearer {key}"},
            timeout=httpx.Timeout(10, read=0.2),
        )
    until(lambda: server.engine.cancelled == 1)
    doc = server.export(sid)
    assert doc["turns"] == [] and doc["counts"]["engine_errors"] == 0
    # Its slot was given back: the session's one call is still there.
    server.engine.delay_s = 0.0
    reply = httpx.post(server.url + path, json=body, headers={"authorization": f"Bearer {key}"})
    assert reply.status_code == 200 and "echo: hi" in reply.text
    assert len(server.export(sid)["turns"]) == 1


# ---- in process, leaving at exact moments --------------------------------------------


class SlowRecords(InMemorySessionStore):
    """Records take a while, as an owner actor's round trip does in the cluster."""

    def __init__(self, record_s: float) -> None:
        super().__init__()
        self.record_s = record_s
        self.recording = asyncio.Event()

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        self.recording.set()
        await asyncio.sleep(self.record_s)
        await super().record(session_id, turn)


def app_over(store: InMemorySessionStore, engine: FakeEngine | None = None):
    return build_capture_app(
        store, engine or FakeEngine(), CaptureSettings(served_model="fake-model", keepalive_s=0.05)
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_a_client_that_leaves_while_its_turn_is_recorded_has_it_withdrawn(
    stream: bool,
) -> None:
    """The reply was complete before the disconnect was noticed: nobody received it, so
    nothing stays recorded and the budget is whole."""
    store = SlowRecords(record_s=0.05)
    app = app_over(store)
    s = await store.open_session(budget=1)
    leave = asyncio.Event()

    async def leave_while_recording() -> None:
        await store.recording.wait()
        leave.set()

    _, got = await asyncio.gather(
        leave_while_recording(),
        call(app, CHAT, {"messages": HELLO, "stream": stream}, key=s.key, leave=leave),
    )
    assert not got.received
    assert (await store.export(s.session_id))["turns"] == []
    store.record_s = 0
    again = await call(app, CHAT, {"messages": HELLO}, key=s.key)
    assert again.received and again.json()["choices"][0]["message"]["content"] == "echo: hi"


async def test_a_reply_the_server_cannot_send_is_withdrawn() -> None:
    """The client left just as the reply went out: the server's send fails (OSError, as
    ASGI servers raise it), and the turn recorded just before is withdrawn."""
    store = InMemorySessionStore()
    app = app_over(store)
    s = await store.open_session(budget=1)
    leave = asyncio.Event()

    original = store.record

    async def record_then_leave(session_id: str, turn: TurnRecord) -> None:
        await original(session_id, turn)
        leave.set()  # no await between this and the reply's send

    store.record = record_then_leave  # type: ignore[method-assign]
    got = await call(app, CHAT, {"messages": HELLO}, key=s.key, leave=leave)
    assert not got.received
    assert (await store.export(s.session_id))["turns"] == []
    assert store.state(s.session_id).in_flight == {}


async def test_a_client_gone_mid_body_is_not_answered_and_nothing_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = InMemorySessionStore()
    engine = FakeEngine()
    s = await store.open_session()
    got = await call(
        app_over(store, engine), CHAT, {"messages": HELLO}, key=s.key, leave_mid_body=True
    )
    assert got.status is None and engine.calls == []
    assert not [r for r in caplog.records if r.exc_info]
