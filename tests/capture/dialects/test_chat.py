import json

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from harbor_ray.capture.core.completion import Completion, ToolCall
from harbor_ray.capture.core.dialects.base import ReplyContext, loads_arguments
from harbor_ray.capture.core.dialects.chat import CHAT
from harbor_ray.errors import AgentRequestError

CTX = ReplyContext(response_id="r1", created=7, model="agent-model")
TOOL_REPLY = Completion(
    text="checking",
    finish_reason="tool_calls",
    reasoning="hmm",
    tool_calls=(ToolCall("c1", "get", '{"k": 1}'), ToolCall("c2", "put", "{}")),
    prompt_tokens=10,
    completion_tokens=4,
)


def frames(completion: Completion) -> list[str]:
    out = []
    for frame in CHAT.render_stream(completion, CTX):
        text = frame.decode()
        assert text.startswith("data: ") and text.endswith("\n\n")
        out.append(text[len("data: ") : -2])
    return out


def test_messages_pass_through_untouched_and_proxy_fields_removed() -> None:
    messages = [
        {"role": "system", "content": "s"},
        {"role": "user", "content": [{"type": "text", "text": "a"}]},
    ]
    call = CHAT.to_engine(
        {
            "model": "m",
            "messages": messages,
            "stream": True,
            "stream_options": {},
            "temperature": 0.5,
            "tools": [],
        },
        url_model=None,
        url_stream=False,
    )
    assert call.body == {"messages": messages, "temperature": 0.5, "tools": []}
    assert call.stream is True and call.request_model == "m"


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"messages": []},
        {"messages": "x"},
        {"messages": ["x"]},
        {"messages": [{"role": "wizard"}]},
        {"messages": [{"role": ["user"]}]},
        {"messages": [{"role": "user"}], "stream": "yes"},
        {"messages": [{"role": "user"}], "model": 3},
    ],
)
def test_malformed_requests(body: dict) -> None:
    with pytest.raises(AgentRequestError):
        CHAT.to_engine(body, url_model=None, url_stream=False)


def test_render_validates_with_the_sdk_and_keeps_tool_calls() -> None:
    reply = ChatCompletion.model_validate(CHAT.render(TOOL_REPLY, CTX))
    message = reply.choices[0].message
    assert message.content == "checking"
    assert [(c.id, c.function.name, c.function.arguments) for c in message.tool_calls] == [
        ("c1", "get", '{"k": 1}'),
        ("c2", "put", "{}"),
    ]
    assert reply.choices[0].finish_reason == "tool_calls"
    assert reply.usage.total_tokens == 14 and reply.model == "agent-model"


def test_stream_chunks_validate_and_reassemble() -> None:
    data = frames(TOOL_REPLY)
    assert data[-1] == "[DONE]"
    chunks = [ChatCompletionChunk.model_validate(json.loads(d)) for d in data[:-1]]
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []]
    assert text == "checking"
    assert [(tc.index, tc.function.name, tc.function.arguments) for tc in calls] == [
        (0, "get", '{"k": 1}'),
        (1, "put", "{}"),
    ]
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "tool_calls" and set(finishes[:-1]) == {None}
    assert chunks[-1].usage.completion_tokens == 4


def test_empty_reply_has_empty_string_content() -> None:
    reply = CHAT.render(Completion(text="", finish_reason="length"), CTX)
    assert reply["choices"][0]["message"]["content"] == ""


def test_error_shapes() -> None:
    body = CHAT.error_body(401, "bad key", "authentication")
    assert body["error"]["type"] == "authentication_error"
    assert (
        json.loads(CHAT.error_event(502, "down", "engine").decode()[6:])["error"]["message"]
        == "down"
    )


def test_loads_arguments() -> None:
    assert loads_arguments('{"a": 1}') == {"a": 1}
    assert loads_arguments("not json") == {}
    assert loads_arguments("[1]") == {}
    assert loads_arguments("") == {}
