"""What real agent CLIs send, replayed against the proxy over real HTTP.

Every request here was recorded from the CLI itself (tests/agent_bodies/README.md says
how); a test posts it as it was sent, the session key swapped in, and checks what the
engine was asked and what the agent got back.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from harbor_ray.capture.proxy.fake_engine import FakeReply
from tests.capture.live_server import CaptureServer
from tests.capture.test_disconnect import error_message

BODIES = Path(__file__).resolve().parent.parent / "agent_bodies"
CODEX = "codex-0.171.0"
CLAUDE = "claude-code-2.1.197"
GEMINI = "gemini-cli-0.61.0"
QWEN = "qwen-code-0.15.10"
ANTIGRAVITY = "antigravity-sdk-0.1.22"
# Set by httpx for the body it sends, or naming the recording's own server.
_TRANSPORT_HEADERS = frozenset({"host", "content-length", "accept-encoding"})


def recorded(cli: str, what: str) -> dict[str, Any]:
    return json.loads((BODIES / cli / f"{what}.json").read_text())


def replay(
    server: CaptureServer, request: dict[str, Any], key: str, body: dict[str, Any] | None = None
) -> httpx.Response:
    """The recorded request, as the CLI sent it, with this session's key."""
    headers = [
        (name, value.replace("<session key>", key))
        for name, value in request["headers"]
        if name.lower() not in _TRANSPORT_HEADERS
    ]
    payload = request.get("body") if body is None else body
    content = None if payload is None else json.dumps(payload).encode()
    return httpx.request(
        request["method"],
        server.url + request["target"],
        headers=headers,
        content=content,
        timeout=30,
    )


def sse_data(reply: httpx.Response) -> list[dict[str, Any]]:
    return [
        json.loads(line[len("data: ") :])
        for line in reply.text.splitlines()
        if line.startswith("data: ") and line != "data: [DONE]"
    ]


def only_turn(server: CaptureServer, sid: str) -> tuple[dict[str, Any], list[str]]:
    """The session's one turn, and its findings as 'code: message'."""
    doc = server.export(sid)
    assert len(doc["turns"]) == 1
    return doc["turns"][0], [f"{f['code']}: {f['message']}" for f in doc["findings"]]


# ---- codex: Responses ---------------------------------------------------------------


def test_codex_first_turn_reaches_the_engine_with_every_function_tool(
    server: CaptureServer,
) -> None:
    sid, key = server.new_session()
    request = recorded(CODEX, "responses-first-turn")
    reply = replay(server, request, key)
    assert reply.status_code == 200, reply.text
    assert sse_data(reply)[-1]["type"] == "response.completed"

    declared = request["body"]["tools"]
    namespace = next(t for t in declared if t["type"] == "namespace")
    expected = [t["name"] for t in declared if t["type"] == "function"]
    expected[4:4] = [t["name"] for t in namespace["tools"]]  # in declaration order
    (sent,) = server.engine.calls
    assert [t["function"]["name"] for t in sent["tools"]] == expected
    assert "close_agent" in expected and "exec_command" in expected

    turn, findings = only_turn(server, sid)
    assert turn["not_forwarded"] == ["tools[8] (web_search)"]
    assert (
        "not_forwarded: turn 0: left out of the engine request: tools[8] (web_search)" in findings
    )


def test_codex_call_of_a_namespaced_tool_goes_back_with_its_namespace(
    server: CaptureServer,
) -> None:
    # The recorded request carries codex's earlier call of close_agent (in the
    # multi_agent_v1 namespace) with its namespace, as codex sent it back.
    request = recorded(CODEX, "responses-namespace-call")
    history = [item for item in request["body"]["input"] if item.get("type") == "function_call"]
    assert history[-1]["namespace"] == "multi_agent_v1"
    server.engine.script = lambda messages: FakeReply(
        tool_calls=(("close_agent", {"target": "agent-1"}),)
    )
    sid, key = server.new_session()
    reply = replay(server, request, key)
    assert reply.status_code == 200, reply.text

    (sent,) = server.engine.calls
    calls = [call["function"]["name"] for m in sent["messages"] for call in m.get("tool_calls", [])]
    assert calls == ["exec_command", "close_agent"]
    done = sse_data(reply)[-1]
    assert done["type"] == "response.completed"
    (item,) = [i for i in done["response"]["output"] if i["type"] == "function_call"]
    assert (item["name"], item["namespace"]) == ("close_agent", "multi_agent_v1")
    only_turn(server, sid)


def test_codex_websocket_upgrade_is_refused_with_426_at_once(server: CaptureServer) -> None:
    # Codex falls back to HTTP after one 426; a 403 (what the server says when the app
    # just closes the socket) costs it seven attempts and seconds.
    sid, key = server.new_session()
    reply = replay(server, recorded(CODEX, "websocket-upgrade"), key)
    assert reply.status_code == 426
    assert "websocket" in error_message("responses", reply.json())
    assert server.engine.calls == []
    assert server.export(sid)["turns"] == []


# ---- claude-code: Anthropic Messages ------------------------------------------------


def test_claude_code_probe_is_answered(server: CaptureServer) -> None:
    request = recorded(CLAUDE, "head-probe")
    assert (request["method"], request["target"]) == ("HEAD", "/")
    assert replay(server, request, "no key needed").status_code == 200
    assert httpx.get(server.url + "/").status_code == 200
    assert server.engine.calls == []


def _texts(content: Any) -> str:
    return content if isinstance(content, str) else "\n".join(b["text"] for b in content)


def test_claude_code_first_turn_folds_its_system_message_into_the_user_text(
    server: CaptureServer,
) -> None:
    sid, key = server.new_session()
    request = recorded(CLAUDE, "messages-first-turn")
    assert request["target"] == "/v1/messages?beta=true"
    assert any(name == "anthropic-beta" for name, _ in request["headers"])
    body = request["body"]
    assert [m["role"] for m in body["messages"]] == ["user", "system"]
    reply = replay(server, request, key)
    assert reply.status_code == 200, reply.text
    assert sse_data(reply)[-1]["type"] == "message_stop"

    (sent,) = server.engine.calls
    user, system = body["messages"]
    assert sent["messages"] == [
        {"role": "system", "content": _texts(body["system"])},
        {"role": "user", "content": _texts(user["content"]) + "\n" + _texts(system["content"])},
    ]
    assert len(sent["tools"]) == len(body["tools"])
    turn, _ = only_turn(server, sid)
    assert turn["not_forwarded"] == []


def test_claude_code_tool_loop_keeps_the_folded_system_text_in_place(server: CaptureServer) -> None:
    sid, key = server.new_session()
    reply = replay(server, recorded(CLAUDE, "messages-tool-results"), key)
    assert reply.status_code == 200, reply.text
    (sent,) = server.engine.calls
    assert [m["role"] for m in sent["messages"]] == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
    ]
    # The first turn's prompt, unchanged, so that prefix linking can hold.
    first = recorded(CLAUDE, "messages-first-turn")["body"]["messages"]
    assert sent["messages"][1]["content"].endswith(_texts(first[1]["content"]))
    only_turn(server, sid)


def test_claude_code_thinking_and_an_image_tool_result(server: CaptureServer) -> None:
    sid, key = server.new_session()
    request = recorded(CLAUDE, "messages-thinking-image-result")
    assistant, result = request["body"]["messages"][2:4]
    assert assistant["content"][0]["type"] == "thinking"
    assert result["content"][0]["content"][0]["type"] == "image"
    reply = replay(server, request, key)
    assert reply.status_code == 200, reply.text

    (sent,) = server.engine.calls
    tool_use = assistant["content"][1]
    assert sent["messages"][-2:] == [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": tool_use["id"],
                    "type": "function",
                    "function": {
                        "name": "Read",
                        "arguments": json.dumps(tool_use["input"], separators=(",", ":")),
                    },
                }
            ],
        },
        {"role": "tool", "tool_call_id": tool_use["id"], "content": ""},
    ]
    turn, findings = only_turn(server, sid)
    assert turn["not_forwarded"] == ["messages[3].content[0].content[0] (image)"]
    assert any(f.startswith("not_forwarded: turn 0:") for f in findings)


# ---- antigravity-sdk: Google, function responses under the model role -----------------


def test_antigravity_sdk_s_function_response_under_the_model_role_is_a_tool_result(
    server: CaptureServer,
) -> None:
    sid, key = server.new_session()
    request = recorded(ANTIGRAVITY, "stream-generate-content-tool-result")
    contents = request["body"]["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "model"]
    (call,) = contents[1]["parts"]
    (response,) = contents[2]["parts"]
    reply = replay(server, request, key)
    assert reply.status_code == 200, reply.text
    (sent,) = server.engine.calls
    assert [m["role"] for m in sent["messages"]] == ["system", "user", "assistant", "tool"]
    assert sent["messages"][2]["tool_calls"][0]["id"] == call["functionCall"]["id"]
    assert sent["messages"][3]["tool_call_id"] == response["functionResponse"]["id"]
    only_turn(server, sid)


# ---- every dialect -------------------------------------------------------------------


def _add_unknown_fields(dialect: str, body: dict[str, Any]) -> dict[str, Any]:
    """The body with fields no API defines, at the top and inside its first item."""
    body = copy.deepcopy(body)
    body["x_future_field"] = {"nested": [1, 2]}
    first = {
        "responses": lambda b: b["input"][0],
        "anthropic": lambda b: b["messages"][0],
        "google": lambda b: b["contents"][0],
        "chat": lambda b: b["messages"][0],
    }[dialect]
    first(body)["x_future_field"] = True
    return body


RECORDED = [
    ("responses", CODEX, "responses-first-turn"),
    ("anthropic", CLAUDE, "messages-first-turn"),
    ("google", GEMINI, "stream-generate-content"),
    ("chat", QWEN, "chat-completions"),
    ("google", ANTIGRAVITY, "stream-generate-content"),
]


@pytest.mark.parametrize(("dialect", "cli", "what"), RECORDED)
def test_unknown_fields_are_ignored(
    server: CaptureServer, dialect: str, cli: str, what: str
) -> None:
    request = recorded(cli, what)
    sid, key = server.new_session()
    assert replay(server, request, key).status_code == 200
    plain = server.engine.calls.pop()
    reply = replay(server, request, key, _add_unknown_fields(dialect, request["body"]))
    assert reply.status_code == 200, reply.text
    extended = server.engine.calls.pop()
    if dialect != "chat":  # chat passes fields through: the engine itself ignores them
        assert extended == plain
    assert len(server.export(sid)["turns"]) == 2


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(body: dict[str, Any]) -> None:
        target = body
        for step in path[:-1]:
            target = target[step]
        target[path[-1]] = value

    return mutate


@pytest.mark.parametrize(
    ("dialect", "cli", "what", "mutate", "named"),
    [
        (
            "responses",
            CODEX,
            "responses-first-turn",
            _set(("tools", 4, "tools"), "x"),
            "tools[4].tools",
        ),
        (
            "responses",
            CODEX,
            "responses-first-turn",
            _set(("tools", 4, "tools", 0, "name"), 7),
            "tools[4].tools[0].name",
        ),
        (
            "responses",
            CODEX,
            "responses-first-turn",
            _set(("input", 0, "role"), "robot"),
            "input[0].role",
        ),
        (
            "anthropic",
            CLAUDE,
            "messages-first-turn",
            _set(("messages", 1, "content"), 5),
            "messages[1].content",
        ),
        (
            "anthropic",
            CLAUDE,
            "messages-first-turn",
            _set(("messages", 1, "role"), "robot"),
            "messages[1].role",
        ),
        (
            "anthropic",
            CLAUDE,
            "messages-tool-results",
            _set(("messages", 3, "content", 0, "tool_use_id"), None),
            "messages[3].content[0]",
        ),
        (
            "google",
            GEMINI,
            "stream-generate-content",
            _set(("contents", 0, "role"), "robot"),
            "contents[0].role",
        ),
        (
            "chat",
            QWEN,
            "chat-completions",
            _set(("messages", 0, "role"), "robot"),
            "messages[0].role",
        ),
    ],
)
def test_malformed_recorded_bodies_get_a_4xx_in_their_dialect_naming_the_field(
    server: CaptureServer,
    dialect: str,
    cli: str,
    what: str,
    mutate: Callable[[dict[str, Any]], None],
    named: str,
) -> None:
    request = recorded(cli, what)
    body = copy.deepcopy(request["body"])
    mutate(body)
    sid, key = server.new_session()
    reply = replay(server, request, key, body)
    assert reply.status_code == 400, reply.text
    assert named in error_message(dialect, reply.json())
    assert server.engine.calls == []
    assert server.export(sid)["turns"] == []
