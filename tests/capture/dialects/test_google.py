"""The Google generateContent dialect, checked against the real google-genai SDK.

The SDK talks to the dialect through an httpx mock transport: its own request bodies
are what `to_engine` translates, and its own parsers read what `render` and
`render_stream` produce.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import errors, types

from harbor_ray.capture.core.completion import Completion, ToolCall
from harbor_ray.capture.core.dialects.base import ReplyContext
from harbor_ray.capture.core.dialects.google import GOOGLE, count_tokens_call
from harbor_ray.errors import AgentRequestError

CTX = ReplyContext(response_id="resp-1", created=1_700_000_000, model="gemini-test")


class FakeServer:
    """One SDK client whose requests reach whatever `handler` a test sets.

    Building a genai.Client costs ~0.2 s, so the module shares one.
    """

    def __init__(self) -> None:
        self.handler: Callable[[httpx.Request], httpx.Response] = self.reply_ok
        transport = httpx.MockTransport(lambda request: self.handler(request))
        self.client = genai.Client(
            api_key="session-key",
            http_options=types.HttpOptions(
                base_url="http://127.0.0.1", httpx_client=httpx.Client(transport=transport)
            ),
        )
        self.seen: list[httpx.Request] = []

    def reply_ok(self, request: httpx.Request) -> httpx.Response:
        self.seen.append(request)
        return httpx.Response(200, json=GOOGLE.render(Completion("ok", "stop"), CTX))

    def sent(self, call: Callable[[genai.Client], Any]) -> tuple[str, dict[str, Any]]:
        """The URL path and JSON body the SDK sends for `call`."""
        self.seen = []
        self.handler = self.reply_ok
        call(self.client)
        (request,) = self.seen
        return request.url.path, json.loads(request.content)

    def generate(self, completion: Completion) -> types.GenerateContentResponse:
        self.handler = lambda request: httpx.Response(200, json=GOOGLE.render(completion, CTX))
        return self.client.models.generate_content(model="gemini-test", contents="q")

    def stream(self, frames: list[bytes]) -> list[types.GenerateContentResponse]:
        def handler(request: httpx.Request) -> httpx.Response:
            assert request.url.path.endswith(":streamGenerateContent")
            assert request.url.params["alt"] == "sse"
            return httpx.Response(
                200, content=b"".join(frames), headers={"content-type": "text/event-stream"}
            )

        self.handler = handler
        return list(self.client.models.generate_content_stream(model="gemini-test", contents="q"))


@pytest.fixture(scope="module")
def sdk() -> FakeServer:
    return FakeServer()


def engine(body: dict[str, Any], stream: bool = False) -> dict[str, Any]:
    return GOOGLE.to_engine(body, url_model="gemini-test", url_stream=stream).body


def user(text: str) -> dict[str, Any]:
    return {"role": "user", "parts": [{"text": text}]}


# ---- request ---------------------------------------------------------------------------


def test_sdk_request_translates_to_chat_messages_and_sampling(sdk: FakeServer) -> None:
    path, body = sdk.sent(
        lambda c: c.models.generate_content(
            model="gemini-test",
            contents=[
                types.Content(role="user", parts=[types.Part(text="Hi")]),
                types.Content(role="model", parts=[types.Part(text="Hello.")]),
                types.Content(role="user", parts=[types.Part(text="Add 2+2")]),
            ],
            config=types.GenerateContentConfig(
                system_instruction="Be brief.",
                max_output_tokens=64,
                temperature=0.2,
                top_p=0.9,
                top_k=40,
                stop_sequences=["END"],
                seed=7,
                candidate_count=1,
                thinking_config=types.ThinkingConfig(thinking_budget=0),
                response_mime_type="text/plain",
            ),
        )
    )
    assert path.endswith("/models/gemini-test:generateContent")
    call = GOOGLE.to_engine(body, url_model="gemini-test", url_stream=False)
    assert call.request_model == "gemini-test"
    assert call.stream is False
    assert call.body == {
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Hi"},
            {"role": "assistant", "content": "Hello."},
            {"role": "user", "content": "Add 2+2"},
        ],
        "max_tokens": 64,
        "temperature": 0.2,
        "top_p": 0.9,
        "top_k": 40,
        "seed": 7,
        "stop": ["END"],
    }
    assert isinstance(call.body["top_k"], int)


def test_stream_and_model_come_from_the_url_only() -> None:
    call = GOOGLE.to_engine({"contents": [user("x")]}, url_model="gemini-pro", url_stream=True)
    assert (call.stream, call.request_model) == (True, "gemini-pro")
    assert set(call.body) == {"messages"}


def test_snake_case_request_equals_camel_case_request() -> None:
    camel = {
        "systemInstruction": {"role": "user", "parts": [{"text": "sys"}]},
        "contents": [
            user("go"),
            {"role": "model", "parts": [{"functionCall": {"name": "ls", "args": {"dir": "/"}}}]},
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "ls", "response": {"out": "a"}}}],
            },
        ],
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "ls",
                        "parametersJsonSchema": {
                            "type": "object",
                            "properties": {"dir": {"type": "string"}},
                        },
                    }
                ]
            }
        ],
        "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls"]}},
        "generationConfig": {"maxOutputTokens": 9, "topP": 0.5, "stopSequences": ["x"]},
    }
    snake = {
        "system_instruction": {"parts": [{"text": "sys"}]},
        "contents": [
            user("go"),
            {"role": "model", "parts": [{"function_call": {"name": "ls", "args": {"dir": "/"}}}]},
            {
                "role": "user",
                "parts": [{"function_response": {"name": "ls", "response": {"out": "a"}}}],
            },
        ],
        "tools": [
            {
                "function_declarations": [
                    {
                        "name": "ls",
                        "parameters_json_schema": {
                            "type": "object",
                            "properties": {"dir": {"type": "string"}},
                        },
                    }
                ]
            }
        ],
        "tool_config": {
            "function_calling_config": {"mode": "ANY", "allowed_function_names": ["ls"]}
        },
        "generation_config": {"max_output_tokens": 9, "top_p": 0.5, "stop_sequences": ["x"]},
    }
    assert engine(snake) == engine(camel)
    assert engine(camel)["tool_choice"] == {"type": "function", "function": {"name": "ls"}}
    assert engine(camel)["max_tokens"] == 9


def test_function_calls_without_ids_get_positional_ids_matched_by_name_in_order() -> None:
    body = {
        "contents": [
            user("read both"),
            {
                "role": "model",
                "parts": [
                    {"text": "Reading."},
                    {"functionCall": {"name": "read", "args": {"path": "a", "n": 1}}},
                    {"functionCall": {"name": "read", "args": {"path": "b"}}},
                    {"functionCall": {"name": "stat", "args": {}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "stat", "response": {"size": 3}}},
                    {"functionResponse": {"name": "read", "response": {"output": "A"}}},
                    {"functionResponse": {"name": "read", "response": {"output": "B é"}}},
                ],
            },
        ]
    }
    assert engine(body)["messages"][1:] == [
        {
            "role": "assistant",
            "content": "Reading.",
            "tool_calls": [
                {
                    "id": "call_1_1",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"a","n":1}'},
                },
                {
                    "id": "call_1_2",
                    "type": "function",
                    "function": {"name": "read", "arguments": '{"path":"b"}'},
                },
                {
                    "id": "call_1_3",
                    "type": "function",
                    "function": {"name": "stat", "arguments": "{}"},
                },
            ],
        },
        {"role": "tool", "tool_call_id": "call_1_3", "content": '{"size":3}'},
        {"role": "tool", "tool_call_id": "call_1_1", "content": '{"output":"A"}'},
        {"role": "tool", "tool_call_id": "call_1_2", "content": '{"output":"B é"}'},
    ]


def test_function_call_ids_from_the_agent_are_kept_and_matched_by_id() -> None:
    body = {
        "contents": [
            user("go"),
            {
                "role": "model",
                "parts": [
                    {"functionCall": {"id": "c-a", "name": "run", "args": {"cmd": "a"}}},
                    {"functionCall": {"id": "c-b", "name": "run", "args": {"cmd": "b"}}},
                ],
            },
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "c-b", "name": "run", "response": {"rc": 1}}},
                    {"functionResponse": {"id": "c-a", "name": "run", "response": {"rc": 0}}},
                ],
            },
        ]
    }
    messages = engine(body)["messages"]
    assert messages[1]["content"] is None
    assert [c["id"] for c in messages[1]["tool_calls"]] == ["c-a", "c-b"]
    assert [(m["tool_call_id"], m["content"]) for m in messages[2:]] == [
        ("c-b", '{"rc":1}'),
        ("c-a", '{"rc":0}'),
    ]


def test_unmatched_function_response_keeps_a_deterministic_id() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
            {
                "role": "user",
                "parts": [{"functionResponse": {"id": "x", "name": "f", "response": {}}}],
            },
        ]
    }
    assert [m["tool_call_id"] for m in engine(body)["messages"]] == ["call_0_0", "x"]


def test_function_responses_alone_under_the_model_role_are_tool_results() -> None:
    # As antigravity-sdk 0.1.22's harness sends them (a content of their own, role model).
    body = {
        "contents": [
            user("go"),
            {
                "role": "model",
                "parts": [
                    {
                        "functionCall": {
                            "id": "c-1",
                            "name": "run_command",
                            "args": {"CommandLine": "ls"},
                        }
                    }
                ],
            },
            {
                "role": "model",
                "parts": [
                    {
                        "functionResponse": {
                            "id": "c-1",
                            "name": "run_command",
                            "response": {"output": "ok"},
                        }
                    }
                ],
            },
        ]
    }
    messages = engine(body)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool"]
    assert (messages[2]["tool_call_id"], messages[2]["content"]) == ("c-1", '{"output":"ok"}')


def test_thoughts_are_dropped_and_text_parts_concatenated() -> None:
    body = {
        "contents": [
            {"role": "user", "parts": [{"text": "line one\n"}, {"text": "line two"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "thinking...", "thought": True},
                    {"text": "Ans", "thoughtSignature": "c2ln"},
                    {"text": "wer."},
                ],
            },
            {"role": "model", "parts": [{"text": "only thought", "thought": True}]},
            {"parts": [{"text": "role defaults to user"}]},
        ]
    }
    assert engine(body)["messages"] == [
        {"role": "user", "content": "line one\nline two"},
        {"role": "assistant", "content": "Answer."},
        {"role": "assistant", "content": ""},
        {"role": "user", "content": "role defaults to user"},
    ]


def test_text_and_function_responses_in_one_user_content_keep_their_order() -> None:
    body = {
        "contents": [
            user("go"),
            {"role": "model", "parts": [{"functionCall": {"name": "f", "args": {}}}]},
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"name": "f", "response": {"ok": True}}},
                    {"text": "Now "},
                    {"text": "summarise."},
                ],
            },
        ]
    }
    assert engine(body)["messages"][2:] == [
        {"role": "tool", "tool_call_id": "call_1_0", "content": '{"ok":true}'},
        {"role": "user", "content": "Now summarise."},
    ]


def test_function_declarations_from_sdk_become_lowercase_json_schema(sdk: FakeServer) -> None:
    schema = types.Schema(
        type="OBJECT",
        properties={
            "type": types.Schema(
                type="STRING", enum=["a", "b"], description="a property named type keeps its name"
            ),
            "tags": types.Schema(type="ARRAY", items=types.Schema(type="STRING"), min_items=1),
            "limit": types.Schema(type="INTEGER", nullable=True),
            "either": types.Schema(
                any_of=[types.Schema(type="NUMBER"), types.Schema(type="BOOLEAN")]
            ),
        },
        required=["type"],
    )
    _, body = sdk.sent(
        lambda c: c.models.generate_content(
            model="gemini-test",
            contents="hi",
            config=types.GenerateContentConfig(
                tools=[
                    types.Tool(
                        function_declarations=[
                            types.FunctionDeclaration(
                                name="search", description="Search.", parameters=schema
                            ),
                            types.FunctionDeclaration(name="noop"),
                        ]
                    )
                ]
            ),
        )
    )
    assert engine(body)["tools"] == [
        {
            "type": "function",
            "function": {
                "name": "search",
                "description": "Search.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "type": {
                            "type": "string",
                            "enum": ["a", "b"],
                            "description": "a property named type keeps its name",
                        },
                        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1},
                        "limit": {"type": ["integer", "null"]},
                        "either": {"anyOf": [{"type": "number"}, {"type": "boolean"}]},
                    },
                    "required": ["type"],
                },
            },
        },
        {"type": "function", "function": {"name": "noop"}},
    ]


def test_snake_case_schema_keywords_and_unspecified_type() -> None:
    body = {
        "contents": [user("x")],
        "tools": [
            {
                "function_declarations": [
                    {
                        "name": "f",
                        "parameters": {
                            "type": "TYPE_UNSPECIFIED",
                            "any_of": [{"type": "NULL"}],
                            "additional_properties": {"type": "STRING"},
                        },
                    }
                ]
            }
        ],
    }
    assert engine(body)["tools"][0]["function"]["parameters"] == {
        "anyOf": [{"type": "null"}],
        "additionalProperties": {"type": "string"},
    }


def test_parameters_json_schema_passes_through_untouched() -> None:
    schema = {"type": "object", "properties": {"Q": {"type": "string", "x_custom": 1}}}
    body = {
        "contents": [user("x")],
        "tools": [{"functionDeclarations": [{"name": "f", "parametersJsonSchema": schema}]}],
    }
    assert engine(body)["tools"][0]["function"]["parameters"] == schema


@pytest.mark.parametrize(
    ("config", "choice"),
    [
        ({"mode": "AUTO"}, "auto"),
        ({"mode": "VALIDATED"}, "auto"),
        ({"mode": "NONE"}, "none"),
        ({"mode": "ANY"}, "required"),
        ({"mode": "ANY", "allowedFunctionNames": ["a", "b"]}, "required"),
        (
            {"mode": "ANY", "allowedFunctionNames": ["b"]},
            {"type": "function", "function": {"name": "b"}},
        ),
        ({"mode": "any"}, "required"),
    ],
)
def test_function_calling_modes(config: dict[str, Any], choice: Any) -> None:
    body = {
        "contents": [user("x")],
        "tools": [{"functionDeclarations": [{"name": "a"}, {"name": "b"}]}],
        "toolConfig": {"functionCallingConfig": config},
    }
    assert engine(body)["tool_choice"] == choice


def test_unspecified_mode_and_missing_tools_add_nothing() -> None:
    body = {"contents": [user("x")], "tools": [{}], "toolConfig": {"functionCallingConfig": {}}}
    assert engine(body) == {"messages": [{"role": "user", "content": "x"}]}


def test_same_history_gives_byte_identical_engine_body() -> None:
    body = {
        "systemInstruction": {"parts": [{"text": "s"}, {"text": "t"}]},
        "contents": [
            user("q"),
            {
                "role": "model",
                "parts": [{"functionCall": {"name": "f", "args": {"b": 2, "a": [1]}}}],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "f", "response": {"z": None, "y": "ü"}}}],
            },
        ],
    }
    first = json.dumps(engine(body))
    assert engine(body)["messages"][0] == {"role": "system", "content": "st"}
    assert json.dumps(engine(copy.deepcopy(body))) == first
    assert json.dumps(engine(json.loads(json.dumps(body)))) == first
    assert '"arguments": "{\\"b\\":2,\\"a\\":[1]}"' in first


MALFORMED: list[tuple[dict[str, Any], str]] = [
    ({}, "contents"),
    ({"contents": "hi"}, "contents"),
    ({"contents": []}, "contents must not be empty"),
    ({"contents": ["hi"]}, "contents[0]"),
    ({"contents": [{"role": "system", "parts": [{"text": "x"}]}]}, "contents[0].role"),
    ({"contents": [{"role": "user"}]}, "contents[0].parts"),
    ({"contents": [{"role": "user", "parts": [{"text": 3}]}]}, "contents[0].parts[0].text"),
    (
        {
            "contents": [
                {
                    "role": "user",
                    "parts": [{"inlineData": {"mimeType": "image/png", "data": "AA=="}}],
                }
            ]
        },
        "inlineData",
    ),
    ({"contents": [{"role": "user", "parts": [{"file_data": {"fileUri": "gs://x"}}]}]}, "fileData"),
    (
        {"contents": [{"role": "user", "parts": [{"text": "a", "functionCall": {"name": "f"}}]}]},
        "not several",
    ),
    (
        {"contents": [{"role": "model", "parts": [{"text": "a", "thought": "yes"}]}]},
        "parts[0].thought",
    ),
    (
        {"contents": [{"role": "model", "parts": [{"functionCall": {"args": {}}}]}]},
        "functionCall.name",
    ),
    (
        {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "args": "{}"}}]}]},
        "functionCall.args",
    ),
    (
        {"contents": [{"role": "model", "parts": [{"functionCall": {"name": "f", "id": 3}}]}]},
        "functionCall.id",
    ),
    (
        {"contents": [{"role": "user", "parts": [{"functionResponse": {"name": "f"}}]}]},
        "functionResponse.response",
    ),
    (
        {"contents": [{"role": "user", "parts": [{"functionCall": {"name": "f"}}]}]},
        "belongs to a model content",
    ),
    (
        {
            "contents": [
                {
                    "role": "model",
                    "parts": [{"text": "a"}, {"functionResponse": {"name": "f", "response": {}}}],
                }
            ]
        },
        "belongs to a user content",
    ),
    ({"contents": [user("x")], "systemInstruction": "be nice"}, "systemInstruction"),
    (
        {
            "contents": [user("x")],
            "systemInstruction": {"parts": [{"functionCall": {"name": "f"}}]},
        },
        "systemInstruction.parts[0]",
    ),
    ({"contents": [user("x")], "tools": {"functionDeclarations": []}}, "tools"),
    (
        {"contents": [user("x")], "tools": [{"functionDeclarations": [{"description": "d"}]}]},
        "functionDeclarations[0].name",
    ),
    (
        {
            "contents": [user("x")],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": "f", "parameters": {}, "parametersJsonSchema": {}}
                    ]
                }
            ],
        },
        "not both",
    ),
    (
        {
            "contents": [user("x")],
            "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"type": 1}}]}],
        },
        "parameters.type",
    ),
    (
        {
            "contents": [user("x")],
            "tools": [{"functionDeclarations": [{"name": "f", "parameters": {"properties": []}}]}],
        },
        "parameters.properties",
    ),
    (
        {
            "contents": [user("x")],
            "tools": [
                {
                    "functionDeclarations": [
                        {"name": "f", "parameters": {"type": "STRING", "nullable": "no"}}
                    ]
                }
            ],
        },
        "parameters.nullable",
    ),
    (
        {"contents": [user("x")], "toolConfig": {"functionCallingConfig": {"mode": "SOMETIMES"}}},
        "functionCallingConfig.mode",
    ),
    (
        {
            "contents": [user("x")],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": [1]}},
        },
        "allowedFunctionNames[0]",
    ),
    (
        {"contents": [user("x")], "generationConfig": {"maxOutputTokens": "5"}},
        "generationConfig.maxOutputTokens",
    ),
    (
        {"contents": [user("x")], "generationConfig": {"temperature": True}},
        "generationConfig.temperature",
    ),
    ({"contents": [user("x")], "generationConfig": {"topK": 1.5}}, "generationConfig.topK"),
    (
        {"contents": [user("x")], "generationConfig": {"seed": float("nan")}},
        "generationConfig.seed",
    ),
    (
        {"contents": [user("x")], "generationConfig": {"stopSequences": "END"}},
        "generationConfig.stopSequences",
    ),
    ({"contents": [user("x")], "generationConfig": {"candidateCount": 2}}, "candidateCount"),
    ({"contents": [user("x")], "generationConfig": []}, "generationConfig"),
    ({"contents": [user("x")], "maxOutputTokens": 1, "max_output_tokens": 2}, "twice"),
    ({"contents": [user("x")], "cachedContent": "cachedContents/abc"}, "cachedContent"),
]


@pytest.mark.parametrize(("body", "named"), MALFORMED)
def test_malformed_requests_raise_request_error_naming_the_field(
    body: dict[str, Any], named: str
) -> None:
    with pytest.raises(AgentRequestError) as caught:
        engine(body)
    assert named in caught.value.message
    assert caught.value.status == 400


def test_count_tokens_call_accepts_both_body_forms() -> None:
    request = {"contents": [user("count me")], "systemInstruction": {"parts": [{"text": "s"}]}}
    direct = GOOGLE.to_engine(request, url_model="g", url_stream=False)
    bare = count_tokens_call({"contents": request["contents"]}, "g")
    wrapped = count_tokens_call({"generateContentRequest": {"model": "models/g", **request}}, "g")
    snake = count_tokens_call({"generate_content_request": request}, "g")
    assert bare.body == {"messages": [{"role": "user", "content": "count me"}]}
    assert wrapped == snake == direct
    assert wrapped.stream is False and wrapped.request_model == "g"
    with pytest.raises(AgentRequestError, match="not both"):
        count_tokens_call({"contents": request["contents"], "generateContentRequest": request}, "g")
    with pytest.raises(AgentRequestError, match="generateContentRequest"):
        count_tokens_call({"generateContentRequest": []}, "g")


def test_count_tokens_round_trip_through_sdk(sdk: FakeServer) -> None:
    seen: dict[str, Any] = {}

    def handler(request: httpx.Request) -> httpx.Response:
        seen["path"] = request.url.path
        call = count_tokens_call(json.loads(request.content), "gemini-test")
        seen["messages"] = call.body["messages"]
        return httpx.Response(200, json=GOOGLE.count_tokens_reply(17))

    sdk.handler = handler
    reply = sdk.client.models.count_tokens(model="gemini-test", contents="how many?")
    assert seen["path"].endswith("/models/gemini-test:countTokens")
    assert seen["messages"] == [{"role": "user", "content": "how many?"}]
    assert reply.total_tokens == 17


# ---- response --------------------------------------------------------------------------


TEXT = Completion("The answer is 4.", "stop", prompt_tokens=12, completion_tokens=6)
THINKING = Completion("Four.", "stop", reasoning="2+2=4", prompt_tokens=5, completion_tokens=9)
CALLS = Completion(
    "",
    "tool_calls",
    tool_calls=(
        ToolCall("call-7", "read", '{"path": "a.txt", "n": 2}'),
        ToolCall("call-8", "ls", "{}"),
    ),
    prompt_tokens=30,
    completion_tokens=20,
)
TEXT_AND_CALL = Completion(
    "Let me look.",
    "tool_calls",
    tool_calls=(ToolCall("c1", "grep", '{"q": "x"}'),),
    reasoning="need to search",
    prompt_tokens=3,
    completion_tokens=4,
)
EMPTY = Completion("", "length", prompt_tokens=2, completion_tokens=1)
COMPLETIONS = [TEXT, THINKING, CALLS, TEXT_AND_CALL, EMPTY]


def expected_calls(completion: Completion) -> list[tuple[str, str, dict[str, Any]]]:
    return [(c.id, c.name, json.loads(c.arguments)) for c in completion.tool_calls]


def sdk_calls(parts: list[types.Part]) -> list[tuple[str | None, str | None, Any]]:
    return [
        (p.function_call.id, p.function_call.name, p.function_call.args)
        for p in parts
        if p.function_call is not None
    ]


def thoughts(parts: list[types.Part]) -> str:
    return "".join(p.text or "" for p in parts if p.thought)


@pytest.mark.parametrize("completion", COMPLETIONS)
def test_render_parses_with_sdk(sdk: FakeServer, completion: Completion) -> None:
    reply = sdk.generate(completion)
    parts = reply.candidates[0].content.parts
    assert (reply.text or "") == completion.text
    assert thoughts(parts) == (completion.reasoning or "")
    assert sdk_calls(parts) == expected_calls(completion)
    assert reply.candidates[0].content.role == "model"
    assert reply.usage_metadata.prompt_token_count == completion.prompt_tokens
    assert reply.usage_metadata.candidates_token_count == completion.completion_tokens
    assert reply.usage_metadata.total_token_count == (
        completion.prompt_tokens + completion.completion_tokens
    )
    assert (reply.model_version, reply.response_id) == ("gemini-test", "resp-1")


def test_render_shape() -> None:
    assert GOOGLE.render(TEXT_AND_CALL, CTX) == {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"text": "need to search", "thought": True},
                        {"text": "Let me look."},
                        {"functionCall": {"id": "c1", "name": "grep", "args": {"q": "x"}}},
                    ],
                },
                "finishReason": "STOP",
                "index": 0,
            }
        ],
        "usageMetadata": {"promptTokenCount": 3, "candidatesTokenCount": 4, "totalTokenCount": 7},
        "modelVersion": "gemini-test",
        "responseId": "resp-1",
    }


@pytest.mark.parametrize(
    ("arguments", "args"),
    [
        ('{"a": [1, {"b": null}]}', {"a": [1, {"b": None}]}),
        ("", {}),
        ("not json", {}),
        ("[1, 2]", {}),
        ('"text"', {}),
    ],
)
def test_render_arguments_are_an_object(
    sdk: FakeServer, arguments: str, args: dict[str, Any]
) -> None:
    completion = Completion("", "tool_calls", tool_calls=(ToolCall("id-1", "f", arguments),))
    assert sdk.generate(completion).function_calls[0].args == args


@pytest.mark.parametrize(
    ("finish", "google"),
    [
        ("stop", "STOP"),
        ("length", "MAX_TOKENS"),
        ("tool_calls", "STOP"),
        ("content_filter", "SAFETY"),
    ],
)
def test_finish_reasons(sdk: FakeServer, finish: Any, google: str) -> None:
    completion = Completion("x", finish)
    assert sdk.generate(completion).candidates[0].finish_reason == types.FinishReason(google)
    chunks = sdk.stream(list(GOOGLE.render_stream(completion, CTX)))
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason(google)


def parse_frames(frames: list[bytes]) -> list[dict[str, Any]]:
    """Each frame is exactly one `data: <json>` line: no event names, no [DONE]."""
    docs = []
    for frame in frames:
        text = frame.decode()
        assert text.startswith("data: ") and text.endswith("\n\n")
        assert "\n" not in text[:-2]
        docs.append(json.loads(text[len("data: ") :]))
    return docs


@pytest.mark.parametrize("completion", COMPLETIONS)
def test_stream_frames_validate_and_reassemble(sdk: FakeServer, completion: Completion) -> None:
    frames = list(GOOGLE.render_stream(completion, CTX))
    docs = parse_frames(frames)
    for doc in docs:
        # As the SDK does for each chunk, from the wire's camelCase.
        types.GenerateContentResponse._from_response(response=doc, kwargs={})
    chunks = sdk.stream(frames)
    assert len(chunks) == len(docs)
    parts = [p for c in chunks for p in c.candidates[0].content.parts]
    assert "".join(c.text or "" for c in chunks) == completion.text
    assert thoughts(parts) == (completion.reasoning or "")
    assert sdk_calls(parts) == expected_calls(completion)
    # Function calls come in a chunk of their own.
    for chunk in chunks:
        kinds = {p.function_call is not None for p in chunk.candidates[0].content.parts}
        assert len(kinds) == 1
    # Only the last chunk finishes and carries usage.
    assert [c.candidates[0].finish_reason is not None for c in chunks] == (
        [False] * (len(chunks) - 1) + [True]
    )
    assert [c.usage_metadata is not None for c in chunks] == ([False] * (len(chunks) - 1) + [True])
    assert chunks[-1].usage_metadata.total_token_count == (
        completion.prompt_tokens + completion.completion_tokens
    )
    assert {c.response_id for c in chunks} == {"resp-1"}


def test_rendered_calls_echoed_back_keep_the_engine_ids() -> None:
    content = GOOGLE.render(CALLS, CTX)["candidates"][0]["content"]
    body = {
        "contents": [
            user("q"),
            content,
            {
                "role": "user",
                "parts": [
                    {"functionResponse": {"id": "call-8", "name": "ls", "response": {"out": ""}}},
                    {
                        "functionResponse": {
                            "id": "call-7",
                            "name": "read",
                            "response": {"out": "x"},
                        }
                    },
                ],
            },
        ]
    }
    messages = engine(body)["messages"]
    assert messages[1]["tool_calls"] == [
        {
            "id": "call-7",
            "type": "function",
            "function": {"name": "read", "arguments": '{"path":"a.txt","n":2}'},
        },
        {"id": "call-8", "type": "function", "function": {"name": "ls", "arguments": "{}"}},
    ]
    assert [m["tool_call_id"] for m in messages[2:]] == ["call-8", "call-7"]


# ---- errors ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "kind", "google"),
    [
        (400, "invalid_request", "INVALID_ARGUMENT"),
        (401, "authentication", "UNAUTHENTICATED"),
        (404, "not_found", "NOT_FOUND"),
        (413, "too_large", "INVALID_ARGUMENT"),
        (502, "engine", "UNAVAILABLE"),
        (429, "overloaded", "RESOURCE_EXHAUSTED"),
    ],
)
def test_error_body_is_what_the_sdk_raises(
    sdk: FakeServer, status: int, kind: Any, google: str
) -> None:
    body = GOOGLE.error_body(status, "went wrong", kind)
    assert body == {"error": {"code": status, "message": "went wrong", "status": google}}

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body)

    sdk.handler = handler
    with pytest.raises(errors.APIError) as caught:
        sdk.client.models.generate_content(model="gemini-test", contents="q")
    assert (caught.value.code, caught.value.status, caught.value.message) == (
        status,
        google,
        "went wrong",
    )


def test_error_event_mid_stream_raises_in_the_sdk(sdk: FakeServer) -> None:
    frames = [*GOOGLE.render_stream(TEXT, CTX)][:-1]
    frames.append(GOOGLE.error_event(502, "engine died", "engine"))
    assert parse_frames(frames[-1:]) == [
        {"error": {"code": 502, "message": "engine died", "status": "UNAVAILABLE"}}
    ]
    with pytest.raises(errors.APIError) as caught:
        sdk.stream(frames)
    assert (caught.value.code, caught.value.message) == (502, "engine died")


def test_count_tokens_reply() -> None:
    assert GOOGLE.count_tokens_reply(42) == {"totalTokens": 42}


def test_tools_google_runs_are_left_out_and_named() -> None:
    body = {
        "contents": [user("x")],
        "tools": [
            {"googleSearch": {}},
            {"functionDeclarations": [{"name": "f", "parameters": {"type": "object"}}]},
            {"code_execution": {}},
        ],
    }
    call = GOOGLE.to_engine(body, url_model="g", url_stream=False)
    assert [t["function"]["name"] for t in call.body["tools"]] == ["f"]
    assert call.not_forwarded == ("tools[0].googleSearch", "tools[2].codeExecution")
