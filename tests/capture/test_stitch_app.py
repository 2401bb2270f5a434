"""The proxy stitches a continued conversation's prompt (fake engine, in process)."""

from __future__ import annotations

import json
from typing import Any

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine, FakeReply
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.capture.asgi_client import call

CHAT = "/v1/chat/completions"
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
ARGS = {"path": ".", "depth": 2}


def tool_then_text(messages: list[dict[str, Any]]) -> FakeReply:
    """A tool call first, then text once a tool answered."""
    if messages[-1]["role"] == "tool":
        return FakeReply(text="done")
    return FakeReply(tool_calls=(("ls", ARGS),))


async def tool_loop(
    engine: FakeEngine, *, stitch: bool = True, rewrite: bool = False
) -> dict[str, Any]:
    """Three calls of an agent that sends tool arguments back compacted (as most do).
    `rewrite`: before the last call it rewrites the history (a summary)."""
    store = InMemorySessionStore()
    app = build_capture_app(store, engine, CaptureSettings(served_model="m", stitch=stitch))
    info = await store.open_session()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
    for step in range(3):
        if rewrite and step == 2:
            messages = [{"role": "user", "content": "summary: files listed"}]
        reply = await call(
            app, CHAT, {"model": "m", "messages": messages, "tools": TOOLS}, key=info.key
        )
        assert reply.status == 200, reply.json()
        message = reply.json()["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        messages.append(
            {
                "role": "assistant",
                "content": message["content"],
                "tool_calls": [
                    {
                        **c,
                        "function": {
                            **c["function"],
                            "arguments": json.dumps(
                                json.loads(c["function"]["arguments"]), separators=(",", ":")
                            ),
                        },
                    }
                    for c in calls
                ],
            }
            if calls
            else {"role": "assistant", "content": message["content"]}
        )
        for c in calls:
            messages.append({"role": "tool", "tool_call_id": c["id"], "content": "a.txt"})
        messages.append({"role": "user", "content": "again"})
    doc = await store.export(info.session_id)
    assert doc is not None
    return doc


def codes(doc: dict[str, Any]) -> list[str]:
    return [f["code"] for f in doc["findings"]]


async def test_reserialised_tool_arguments_stay_one_root() -> None:
    engine = FakeEngine(script=tool_then_text)
    doc = await tool_loop(engine)
    assert doc["counts"]["roots"] == 1
    assert [t["parent"] for t in doc["turns"]] == [None, 0, 1]
    assert [t["continuation"] for t in doc["turns"]] == [
        None,
        {"turn": 0, "stitched": True, "fallback": None},
        {"turn": 1, "stitched": True, "fallback": None},
    ]
    assert "retokenization_split" not in codes(doc)
    # The engine was handed the ids: the sampled `{"path": ".", ...}`, not the echo.
    sent = engine.calls[1]["kv_transfer_params"]["prompt_token_ids"]
    assert sent == doc["turns"][1]["prompt_ids"]
    assert sent[: len(doc["turns"][0]["prompt_ids"]) + len(doc["turns"][0]["token_ids"])] == (
        doc["turns"][0]["prompt_ids"] + doc["turns"][0]["token_ids"]
    )


async def test_without_stitching_the_same_loop_splits() -> None:
    doc = await tool_loop(FakeEngine(script=tool_then_text), stitch=False)
    assert doc["counts"]["roots"] == 3  # every call made a tool call
    assert "retokenization_split" in codes(doc)
    assert all(t["continuation"] is None for t in doc["turns"])


async def test_a_rewritten_history_is_a_new_root_without_a_stitch() -> None:
    engine = FakeEngine(script=tool_then_text)
    doc = await tool_loop(engine, rewrite=True)
    assert doc["turns"][2]["continuation"] is None
    assert doc["turns"][2]["parent"] is None
    assert "kv_transfer_params" not in engine.calls[2]
    assert "stitch_fallback" not in codes(doc)


async def test_an_engine_without_tokenize_falls_back_with_a_finding() -> None:
    doc = await tool_loop(FakeEngine(script=tool_then_text, tokenize=False))
    assert doc["turns"][1]["continuation"] == {
        "turn": 0,
        "stitched": False,
        "fallback": "no_tokenize",
    }
    [finding] = [f for f in doc["findings"] if f["code"] == "stitch_fallback" and f["turn"] == 1]
    assert "tokenize" in finding["message"] and finding["severity"] == "warn"
    assert doc["counts"]["roots"] == 3  # as without stitching


async def test_an_engine_that_ignores_the_ids_is_named() -> None:
    class Ignoring(FakeEngine):
        async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
            return await super().complete(
                {k: v for k, v in body.items() if k != "kv_transfer_params"}
            )

    doc = await tool_loop(Ignoring(script=tool_then_text))
    assert doc["turns"][1]["continuation"]["fallback"] == "engine_ignored"
    assert "stitch_fallback" in codes(doc)


async def test_each_call_reaches_the_engine_naming_its_session() -> None:
    # What lets a session-affine engine keep a session's calls on one replica.
    engine = FakeEngine(script=tool_then_text)
    store = InMemorySessionStore()
    app = build_capture_app(store, engine, CaptureSettings(served_model="m"))
    first, second = await store.open_session(), await store.open_session()
    for info in (first, second, first):
        reply = await call(
            app,
            CHAT,
            {"model": "m", "messages": [{"role": "user", "content": "list files"}]},
            key=info.key,
        )
        assert reply.status == 200, reply.json()
    assert engine.sessions == [first.session_id, second.session_id, first.session_id]
