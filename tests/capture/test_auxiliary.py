"""Side calls marked auxiliary: by the model they ask for against the session's main
model, or by the agent's own rule, on bodies recorded from the real CLIs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harbor_ray.capture.core.auxiliary import MainLoop, is_auxiliary
from harbor_ray.capture.core.detect import detect
from harbor_ray.capture.core.dialects import DIALECTS
from tests.capture.live_server import CaptureServer

BODIES = Path(__file__).parents[1] / "agent_bodies"
# side-*.json: a request a CLI sent (path, query, headers, body), the session it ran in
# (main_model, agent) and whether it is a side call (auxiliary).
RECORDED = sorted(BODIES.glob("*/side-*.json"))


def chat(system: str | None = None, user: str = "hi") -> dict:
    messages = [{"role": "user", "content": user}]
    if system is not None:
        messages.insert(0, {"role": "system", "content": system})
    return {"messages": messages}


@pytest.mark.parametrize(
    ("main", "model", "expected"),
    [
        (None, "other", False),  # a session that names no main loop marks nothing
        (MainLoop(model="m"), "m", False),
        (MainLoop(model="m"), "harbor-aux", True),
        (MainLoop(model="m"), "gemini-2.5-flash-lite", True),  # a CLI's hard-coded side model
        (MainLoop(model="org/m"), "m", False),  # prefixes a client adds or drops
        (MainLoop(model="m"), "models/m", False),
        (MainLoop(model="m"), "", False),  # no model named: the main loop's
    ],
)
def test_by_model(main: MainLoop | None, model: str, expected: bool) -> None:
    assert is_auxiliary(main, model, chat()) is expected


def test_agent_rules_apply_to_their_agent_only() -> None:
    title = chat("You are a title generator. You output ONLY a thread title.")
    assert is_auxiliary(MainLoop(model="m", agent="opencode"), "m", title)
    assert not is_auxiliary(MainLoop(model="m", agent="codex"), "m", title)
    assert not is_auxiliary(MainLoop(model="m", agent="opencode"), "m", chat("You are opencode"))


@pytest.mark.parametrize("path", RECORDED, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_recorded_side_calls(path: Path) -> None:
    recorded = json.loads(path.read_text())
    route = detect(
        recorded["path"],
        recorded["headers"],
        dict(pair.split("=", 1) for pair in recorded.get("query", "").split("&") if "=" in pair),
    )
    assert route is not None
    call = DIALECTS[route.dialect].to_engine(
        recorded["body"], url_model=route.url_model, url_stream=route.url_stream
    )
    main = MainLoop(model=recorded["main_model"], agent=recorded["agent"])
    assert is_auxiliary(main, call.request_model, call.body) is recorded["auxiliary"]


def test_recorded_bodies_hold_side_calls_and_main_loop_controls() -> None:
    expected = [json.loads(p.read_text())["auxiliary"] for p in RECORDED]
    assert True in expected and False in expected


def test_the_proxy_marks_side_calls_and_their_trees_auxiliary(server: CaptureServer) -> None:
    reply = server.admin.post("/sessions", json={"main_model": "fake-model", "agent": "opencode"})
    reply.raise_for_status()
    session_id, key = reply.json()["session_id"], reply.json()["key"]
    headers = {"authorization": f"Bearer {key}"}
    calls = [
        {"model": "fake-model", **chat(user="fix the bug")},
        {"model": "harbor-aux", **chat(user="name this session")},
        {"model": "fake-model", **chat("You are a title generator. Output a title.")},
    ]
    for body in calls:
        sent = server.admin.post("/v1/chat/completions", json=body, headers=headers)
        assert sent.status_code == 200, sent.text
    export = server.export(session_id)
    assert [t["auxiliary"] for t in sorted(export["turns"], key=lambda t: t["index"])] == [
        False,
        True,
        True,
    ]
    roles = sorted(s["role"] for s in export["sequences"])
    assert roles == ["agent", "auxiliary", "auxiliary"]


def test_a_session_without_a_main_loop_marks_nothing(server: CaptureServer) -> None:
    session_id, key = server.new_session()
    sent = server.admin.post(
        "/v1/chat/completions",
        json={"model": "harbor-aux", **chat()},
        headers={"authorization": f"Bearer {key}"},
    )
    assert sent.status_code == 200
    assert [t["auxiliary"] for t in server.export(session_id)["turns"]] == [False]
