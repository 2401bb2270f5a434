"""`harbor_ray.playground.calls`: a recorded turn as the run view shows it, each call
with only the messages its rollout's previous call did not send, read after a cursor."""

from __future__ import annotations

import dataclasses

import orjson

from harbor_ray.playground.calls import PAGE, RunCalls, call_view, same_message
from tests.playground.served import ENGINE_NULLS, agent_turn


def test_a_call_shows_its_reply_tool_calls_usage_and_ids() -> None:
    view, conversation = call_view(agent_turn(0), 1, None)
    assert [m["role"] for m in view["messages"]] == ["system", "user"]
    assert view["earlier"] == 0 and view["rollout"] == 1 and view["index"] == 0
    assert view["reply"]["tool_calls"][0]["function"]["name"] == "bash"
    assert view["finish_reason"] == "tool_calls" and view["latency_s"] == 0.25
    assert (view["prompt_tokens"], view["completion_tokens"]) == (20, 6)
    assert view["token_ids"] == list(range(6)) and len(view["logprobs"]) == 6
    assert conversation[-1] == view["reply"]


def test_a_call_sends_only_what_the_previous_call_did_not() -> None:
    _, conversation = call_view(agent_turn(0), 1, None)
    view, _ = call_view(agent_turn(1), 1, conversation)
    assert view["earlier"] == 3  # system, user and the reply sent back as it came
    assert [m["role"] for m in view["messages"]] == ["tool"]


def test_a_reply_sent_back_without_its_null_fields_is_the_same_message() -> None:
    sent = {
        "role": "assistant",
        "content": "ls",
        "tool_calls": [
            {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{}"}}
        ],
    }
    reply = {**sent, **ENGINE_NULLS, "tool_calls": [{**sent["tool_calls"][0], "index": None}]}
    assert same_message(reply, sent) and same_message(sent, reply)
    assert same_message(
        {"role": "assistant", "content": None, "tool_calls": []},
        {"role": "assistant", "content": ""},
    )
    assert not same_message(reply, {**sent, "content": "ls -l"})
    assert not same_message(reply, {**sent, "role": "user"})
    assert not same_message(reply, {**sent, "tool_calls": []})
    assert not same_message(
        reply,
        {
            **sent,
            "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "bash", "arguments": "{1}"}}
            ],
        },
    )
    assert same_message("odd", "odd") and not same_message("odd", {"role": "odd"})


def test_a_reply_rewritten_before_it_is_sent_back_is_shown_again() -> None:
    _, conversation = call_view(agent_turn(0), 1, None)
    conversation[-1] = {"role": "assistant", "content": "not what was sent back"}
    view, _ = call_view(agent_turn(1), 1, conversation)
    assert view["earlier"] == 2 and [m["role"] for m in view["messages"]] == ["assistant", "tool"]


def test_missing_logprobs_are_null_and_bad_json_is_empty() -> None:
    turn = dataclasses.replace(
        agent_turn(0),
        request_messages_json=b"not json",
        logprobs=agent_turn(0).logprobs * float("nan"),
    )
    view, _ = call_view(turn, 1, None)
    assert view["messages"] == [] and set(view["logprobs"]) == {None}
    orjson.dumps(view)  # the page gets JSON: nothing numpy left in it


def test_calls_are_read_after_a_cursor_and_rollouts_numbered_by_session() -> None:
    calls = RunCalls()
    for index in range(3):
        calls.add("a", agent_turn(index))
    calls.add("b", agent_turn(0))
    found, cursor = calls.after(0)
    assert [(c["seq"], c["rollout"], c["index"]) for c in found] == [
        (0, 1, 0),
        (1, 1, 1),
        (2, 1, 2),
        (3, 2, 0),
    ]
    assert found[3]["earlier"] == 0  # another rollout's conversation
    assert cursor == 4 and calls.after(4) == ([], 4)
    assert [c["seq"] for c in calls.after(2)[0]] == [2, 3]
    assert calls.after(99) == ([], 99)


def test_a_long_run_is_read_a_page_at_a_time() -> None:
    calls = RunCalls()
    for index in range(PAGE + 5):
        calls.add("a", agent_turn(index, tokens=1))
    first, cursor = calls.after(0)
    rest, end = calls.after(cursor)
    assert (len(first), len(rest), cursor, end) == (PAGE, 5, PAGE, PAGE + 5)


def test_a_call_carries_its_ids_text_for_display_and_keeps_the_ids() -> None:
    asked: list[tuple[str, list[int]]] = []

    def pieces(model: str, ids: list[int]) -> dict:
        asked.append((model, ids))
        return {"pieces": {str(i): ["t", f"w{i}"] for i in ids}, "note": "n"}

    calls = RunCalls(pieces)
    calls.add("s", agent_turn(0))
    [call], _ = calls.after(0)
    assert asked == [("test-model", list(range(6)))]
    assert call["pieces"]["5"] == ["t", "w5"] and call["token_ids"] == list(range(6))
    assert call["tokens_note"] == "n"
    assert call_view(agent_turn(0), 1, None)[0]["pieces"] is None  # no tokenizer: ids
