"""Bad input, admin routes, streaming edges: over real HTTP, nothing recorded by mistake."""

from __future__ import annotations

import json
import time

import httpx
import pytest

from tests.capture.live_server import CaptureServer

CHAT = "/v1/chat/completions"
MESSAGES = "/v1/messages"
GOOGLE = "/v1beta/models/g:generateContent"
GOOD = {
    CHAT: {"model": "m", "messages": [{"role": "user", "content": "x"}]},
    MESSAGES: {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]},
    GOOGLE: {"contents": [{"role": "user", "parts": [{"text": "x"}]}]},
}


def post(server: CaptureServer, path: str, key: str, **kwargs) -> httpx.Response:
    headers = {"authorization": f"Bearer {key}", **kwargs.pop("headers", {})}
    return httpx.post(server.url + path, headers=headers, timeout=10, **kwargs)


def assert_dialect_error(path: str, reply: httpx.Response, status: int) -> str:
    assert reply.status_code == status
    body = reply.json()
    if path == MESSAGES:
        assert body["type"] == "error"
        return body["error"]["message"]
    if path == GOOGLE:
        assert body["error"]["code"] == status
        return body["error"]["message"]
    return body["error"]["message"]


@pytest.mark.parametrize("path", [CHAT, MESSAGES, GOOGLE])
@pytest.mark.parametrize(
    ("content", "headers", "status", "says"),
    [
        (b"{not json", {}, 400, "not valid JSON"),
        (b"[1, 2]", {}, 400, "JSON object"),
        # With max_tokens, which Anthropic's checks ask for first: the messages' own check.
        (b'{"max_tokens": 5, "messages": 5, "contents": 5}', {}, 400, "must be a JSON array"),
        (b"{}", {}, 400, ""),
        (b'{"a": 1}', {"content-type": "text/plain"}, 415, "application/json"),
        (b'{"pad": "' + b"x" * 300_000 + b'"}', {}, 413, "exceeds"),
    ],
)
def test_bad_input_gets_4xx_in_the_dialect_and_is_not_recorded(
    server: CaptureServer,
    path: str,
    content: bytes,
    headers: dict,
    status: int,
    says: str,
) -> None:
    sid, key = server.new_session()
    headers = {"content-type": "application/json", **headers}
    reply = post(server, path, key, content=content, headers=headers)
    assert says in assert_dialect_error(path, reply, status)
    assert server.engine.calls == []
    assert server.export(sid)["turns"] == []


def test_oversized_body_without_content_length_is_refused(server: CaptureServer) -> None:
    sid, key = server.new_session()

    def chunks():
        yield b'{"pad": "'
        for _ in range(40):
            yield b"x" * 10_000
        yield b'"}'

    reply = post(server, CHAT, key, content=chunks(), headers={"content-type": "application/json"})
    assert reply.status_code == 413
    assert server.export(sid)["turns"] == []


def test_the_engine_never_sees_empty_tools_or_n(server: CaptureServer) -> None:
    sid, key = server.new_session()
    body = {**GOOD[CHAT], "tools": [], "tool_choice": "auto"}
    assert post(server, CHAT, key, json=body).status_code == 200
    assert "tools" not in server.engine.calls[0] and "tool_choice" not in server.engine.calls[0]
    reply = post(server, CHAT, key, json={**GOOD[CHAT], "n": 3})
    assert "n=3" in assert_dialect_error(CHAT, reply, 400)
    assert len(server.export(sid)["turns"]) == 1


def test_unknown_route_is_404(server: CaptureServer) -> None:
    _, key = server.new_session()
    assert post(server, "/v1/embeddings", key, json={}).status_code == 404


def test_models_route_lists_the_served_model(server: CaptureServer) -> None:
    reply = httpx.get(server.url + "/v1/models")
    assert [m["id"] for m in reply.json()["data"]] == ["fake-model"]


def test_admin_routes_require_the_admin_key(server: CaptureServer) -> None:
    sid, key = server.new_session()
    for method, path in [
        ("POST", "/sessions"),
        ("GET", "/sessions"),
        ("GET", f"/sessions/{sid}/export"),
        ("DELETE", f"/sessions/{sid}"),
    ]:
        assert httpx.request(method, server.url + path).status_code == 401
        # A session key is not an admin key.
        reply = httpx.request(method, server.url + path, headers={"authorization": f"Bearer {key}"})
        assert reply.status_code == 401
    assert server.admin.get("/sessions").json()["sessions"].count(sid) == 1


def test_delete_ends_the_session(server: CaptureServer) -> None:
    sid, key = server.new_session()
    assert server.admin.delete(f"/sessions/{sid}").status_code == 204
    assert post(server, CHAT, key, json=GOOD[CHAT]).status_code == 401
    assert server.admin.get(f"/sessions/{sid}/export").status_code == 404
    assert server.admin.delete(f"/sessions/{sid}").status_code == 404


def test_bad_budget_refused(server: CaptureServer) -> None:
    assert server.admin.post("/sessions", json={"budget": -1}).status_code == 400
    assert server.admin.post("/sessions", json={"budget": "5"}).status_code == 400


def sse_lines(reply: httpx.Response) -> list[str]:
    return [line for line in reply.iter_lines() if line]


def test_keepalives_while_the_engine_works(server: CaptureServer) -> None:
    server.engine.delay_s = 0.3  # the live server sends keepalives every 0.05 s
    sid, key = server.new_session()
    with httpx.stream(
        "POST",
        server.url + CHAT,
        json={**GOOD[CHAT], "stream": True},
        headers={"authorization": f"Bearer {key}"},
    ) as reply:
        assert reply.headers["content-type"].startswith("text/event-stream")
        lines = sse_lines(reply)
    keepalives = [line for line in lines if line.startswith(":")]
    data = [line for line in lines if line.startswith("data:")]
    assert len(keepalives) >= 2
    assert data[-1] == "data: [DONE]"
    assert len(server.export(sid)["turns"]) == 1


def test_a_gemini_stream_carries_no_sse_comment_while_the_engine_works(
    server: CaptureServer,
) -> None:
    """Gemini's API sends none, and antigravity-sdk's Go harness failed its stream on the
    first one ("invalid stream chunk: : keepalive") once a real engine took longer than a
    keep-alive's interval."""
    server.engine.delay_s = 0.3  # six keep-alive intervals
    sid, key = server.new_session()
    with httpx.stream(
        "POST",
        server.url + "/v1beta/models/g:streamGenerateContent?alt=sse",
        json=GOOD[GOOGLE],
        headers={"x-goog-api-key": key},
    ) as reply:
        assert reply.status_code == 200
        lines = sse_lines(reply)
    assert lines and all(line.startswith("data:") for line in lines), lines
    assert len(server.export(sid)["turns"]) == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {**GOOD[CHAT], "stream": True}),
        (MESSAGES, {**GOOD[MESSAGES], "stream": True}),
        ("/v1beta/models/g:streamGenerateContent?alt=sse", GOOD[GOOGLE]),
    ],
)
def test_engine_error_after_headers_becomes_the_dialects_error_event(
    server: CaptureServer,
    path: str,
    body: dict,
) -> None:
    server.engine.fail_with = 503
    # Headers and a keep-alive go out before the failure: twenty intervals, since a loaded
    # CI machine (the unit run beside the integration run) once sent none in two (0.12 s).
    server.engine.delay_s = 1.0
    sid, key = server.new_session()
    with httpx.stream(
        "POST", server.url + path, json=body, headers={"authorization": f"Bearer {key}"}
    ) as reply:
        assert reply.status_code == 200
        lines = sse_lines(reply)
    assert lines[0].startswith(":") != ("v1beta" in path)  # Gemini's stream has no comments
    payload = json.loads(next(line for line in lines if line.startswith("data:"))[5:])
    assert "fake engine failure" in json.dumps(payload)
    if path == MESSAGES:
        assert "event: error" in lines
    doc = server.export(sid)
    assert doc["turns"] == [] and doc["counts"]["engine_errors"] == 1


@pytest.mark.parametrize(
    ("path", "body"),
    [
        (CHAT, {**GOOD[CHAT], "stream": True}),
        (MESSAGES, {**GOOD[MESSAGES], "stream": True}),
        ("/v1beta/models/g:streamGenerateContent?alt=sse", GOOD[GOOGLE]),
    ],
)
def test_engine_refusal_before_the_first_keepalive_is_a_4xx_not_a_stream(
    server: CaptureServer,
    path: str,
    body: dict,
) -> None:
    """An engine that refuses a streamed call at once (a prompt past the context, a
    parameter it does not take) is answered with its status, as the API answers a bad
    request before its stream: mistral-vibe took the error event of a 200 stream for a
    cut stream and sent the same request again until its deadline."""
    server.engine.fail_with = 400
    sid, key = server.new_session()
    reply = post(server, path, key, json=body)
    assert "fake engine failure" in assert_dialect_error(
        MESSAGES if path == MESSAGES else GOOGLE if "v1beta" in path else CHAT, reply, 400
    )
    doc = server.export(sid)
    assert doc["turns"] == [] and doc["counts"]["engine_errors"] == 1


def test_client_disconnect_cancels_the_upstream_call(server: CaptureServer) -> None:
    server.engine.delay_s = 5.0
    sid, key = server.new_session()
    with httpx.stream(
        "POST",
        server.url + CHAT,
        json={**GOOD[CHAT], "stream": True},
        headers={"authorization": f"Bearer {key}"},
    ) as reply:
        next(reply.iter_lines())  # the first keepalive: the engine call is under way
    deadline = time.monotonic() + 3
    while server.engine.cancelled == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert server.engine.cancelled == 1
    # The call was released, not recorded: the session can still use its budget.
    assert server.export(sid)["turns"] == []


def test_session_sampling_is_imposed_on_every_call(server: CaptureServer) -> None:
    reply = server.admin.post("/sessions", json={"sampling": {"temperature": 1.0, "max_tokens": 7}})
    assert reply.status_code == 201
    assert reply.json()["sampling"] == {"temperature": 1.0, "max_tokens": 7}
    key = reply.json()["key"]
    post(server, CHAT, key, json={**GOOD[CHAT], "temperature": 0.0, "max_tokens": 100})
    sent = server.engine.calls[0]
    assert sent["temperature"] == 1.0 and sent["max_tokens"] == 7
    assert server.admin.post("/sessions", json={"sampling": {"temp": 1}}).status_code == 400
