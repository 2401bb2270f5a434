"""Continuation keys and stitched prompts (capture/core/continuation.py), pure."""

from __future__ import annotations

import json

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from harbor_ray.capture.core.continuation import (
    ContinuationBase,
    Conversation,
    Fallback,
    extend,
    has_non_text_content,
    stitch,
    turn_closing,
)

TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]
HISTORY = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "list"}]
# The engine's reply, as the proxy recorded it: arguments as the model wrote them.
REPLY = {
    "role": "assistant",
    "content": None,
    "reasoning_content": "think",
    "tool_calls": [
        {
            "id": "chatcmpl-tool-1",
            "type": "function",
            "function": {"name": "ls", "arguments": '{"path": ".", "n": 1.0}'},
        }
    ],
}


def recorded_key(messages: list, reply: dict, tools: list | None = TOOLS) -> bytes:
    return extend(Conversation(messages, tools).digest, reply)


def test_a_reply_sent_back_reserialised_matches_its_turn() -> None:
    # Another id, compact JSON, other key order, 1 for 1.0, no reasoning, "" for null.
    echoed = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "call_0_0",
                "type": "function",
                "function": {"name": "ls", "arguments": '{"n":1,"path":"."}'},
            }
        ],
    }
    new = [*HISTORY, echoed, {"role": "tool", "tool_call_id": "call_0_0", "content": "a b"}]
    [prefix] = Conversation(new, TOOLS).prefixes()
    assert prefix.messages == 3
    assert prefix.digest == recorded_key(HISTORY, REPLY)


def test_an_edited_history_or_other_tools_match_nothing() -> None:
    key = recorded_key(HISTORY, REPLY)
    edited = [HISTORY[0], {"role": "user", "content": "list!"}, REPLY]
    other_args = [
        *HISTORY,
        {**REPLY, "tool_calls": [{"function": {"name": "ls", "arguments": '{"path": "/"}'}}]},
    ]
    summarised = [{"role": "user", "content": "summary"}, REPLY]
    for messages, tools in (
        (edited, TOOLS),
        (other_args, TOOLS),
        (summarised, TOOLS),
        ([*HISTORY, REPLY], None),
    ):
        assert all(p.digest != key for p in Conversation(messages, tools).prefixes())


def test_prefixes_are_every_assistant_end_longest_first() -> None:
    messages = [
        *HISTORY,
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "d"},
    ]
    assert [p.messages for p in Conversation(messages).prefixes()] == [5, 3]


@given(
    st.dictionaries(
        st.text(max_size=5),
        st.one_of(
            st.integers(-(10**6), 10**6),
            st.floats(allow_nan=False, allow_infinity=False),
            st.text(),
            st.booleans(),
            st.none(),
        ),
        max_size=5,
    ),
    st.booleans(),
)
def test_arguments_match_however_they_are_spelled(args: dict, compact: bool) -> None:
    sampled = {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"function": {"name": "f", "arguments": json.dumps(args)}}],
    }
    separators = (",", ":") if compact else (", ", ": ")
    echoed = {
        "role": "assistant",
        "tool_calls": [
            {
                "function": {
                    "name": "f",
                    "arguments": json.dumps(
                        dict(reversed(list(args.items()))), separators=separators
                    ),
                }
            }
        ],
    }
    assert recorded_key(HISTORY, sampled) == recorded_key(HISTORY, echoed)


def test_text_parts_and_non_text_content() -> None:
    parts = {"role": "assistant", "content": [{"type": "text", "text": "hi"}]}
    assert recorded_key(HISTORY, parts) == recorded_key(
        HISTORY, {"role": "assistant", "content": "hi"}
    )
    image = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}
    assert has_non_text_content([*HISTORY, image]) and not has_non_text_content([parts])


# ---- stitching: ChatML-like ids, END = end of turn, NL = its newline -----------------

END, NL = 2, 10
CLOSING = np.array([END, NL], dtype=np.int32)


def base(sampled: list[int]) -> ContinuationBase:
    return ContinuationBase(
        turn=0,
        messages=3,
        prompt_ids=np.array([1, 5, 6, 7], np.int32),
        token_ids=np.array(sampled, np.int32),
    )


def test_the_stitched_prompt_keeps_the_sampled_ids() -> None:
    # The engine re-renders the reply 8 9 as 8 90: the stitched prompt keeps 8 9.
    history = [1, 5, 6, 7, 8, 90, END, NL]
    full = [*history, 1, 33, END, NL, 1, 44]
    ids = stitch(base([8, 9, END]), CLOSING, history, full)
    assert isinstance(ids, np.ndarray)
    assert ids.tolist() == [1, 5, 6, 7, 8, 9, END, NL, 1, 33, END, NL, 1, 44]


def test_a_reply_cut_at_the_limit_is_closed_in_full() -> None:
    history = [1, 5, 6, 7, 8, 9, END, NL]
    ids = stitch(base([8, 9]), CLOSING, history, [*history, 1, 44])
    assert isinstance(ids, np.ndarray)
    assert ids.tolist() == [1, 5, 6, 7, 8, 9, END, NL, 1, 44]


def test_renderings_that_disagree_fall_back() -> None:
    history = [1, 5, 6, 7, 8, 9, END, NL]
    # The full rendering does not start with the history's (a template that rewrites
    # earlier turns), or the history does not end with the closing.
    assert (
        stitch(base([8, 9, END]), CLOSING, history, [1, 5, 6, 0, 8, 9, END, NL, 1])
        is Fallback.RENDER_MISMATCH
    )
    assert (
        stitch(base([8, 9, END]), CLOSING, history[:-1], [*history, 1]) is Fallback.RENDER_MISMATCH
    )


def test_turn_closing_from_the_probe_renderings() -> None:
    assert turn_closing([1, 5, 1, 3], [1, 5, 1, 3, END, NL]).tolist() == [END, NL]
    assert turn_closing([1, 5, 1, 3], [1, 5, 1, 3]) is None
    assert turn_closing([1, 5, 1, 3], [1, 6, 1, 3, END]) is None
