"""The SGLang stand-in refuses what SGLang's own request types refuse, in SGLang's error
shape, and ignores what SGLang ignores: so a request the proxy's SGLang adapter gets
wrong fails a test instead of being read the way the adapter meant."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from harbor_ray.capture.proxy import fake_engine, sglang
from harbor_ray.capture.proxy.sglang import SglangEngine
from harbor_ray.errors import EngineError
from tests.fixtures import sglang_tokenizer as tok
from tests.fixtures.sglang_engine import SglangStandIn, sglang_app

CHAT = "/v1/chat/completions"
HI = [{"role": "user", "content": "hi"}]


async def post(stand_in: SglangStandIn, body: dict[str, Any]) -> httpx.Response:
    transport = httpx.ASGITransport(app=sglang_app(stand_in))
    async with httpx.AsyncClient(transport=transport, base_url="http://sgl") as http:
        return await http.post(CHAT, json=body)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("logprobs", 5),  # the Completions API's count, not chat's bool
        ("return_meta_info", {"output_token_logprobs": True}),
        ("input_ids", [[1, 2, 3]]),  # one prompt is a flat list
        ("max_tokens", "many"),
        ("tool_choice", "sometimes"),
        ("tools", [{"type": "function", "function": {"parameters": {}}}]),  # no name
        ("messages", [{"role": "robot", "content": "hi"}]),
    ],
)
async def test_a_field_sglang_types_refuse_is_a_400_in_its_error_shape(
    field: str,
    value: Any,
) -> None:
    stand_in = SglangStandIn()
    reply = await post(stand_in, {"model": "m", "messages": HI, field: value})
    assert reply.status_code == 400
    body = reply.json()
    assert (body["object"], body["type"], body["param"], body["code"]) == (
        "error",
        "Bad Request",
        None,
        400,
    )
    assert field in body["message"]  # refused by the field's own check
    assert stand_in.prompts == []  # and nothing was generated


@pytest.mark.parametrize(
    ("body", "said"),
    [
        ({"messages": []}, "Messages cannot be empty"),
        ({"messages": HI, "tool_choice": "required"}, "Tools cannot be empty"),
        (
            {"messages": HI, "stream": True, "return_meta_info": True},
            "not supported with streaming",
        ),
        (
            {
                "messages": [
                    *HI,
                    {
                        "role": "assistant",
                        "tool_calls": [
                            {"id": "c", "function": {"name": "ls", "arguments": "{path"}}
                        ],
                    },
                ]
            },
            "valid JSON",
        ),
    ],
)
async def test_what_sglangs_chat_server_refuses_is_a_bad_request_error(
    body: dict[str, Any],
    said: str,
) -> None:
    stand_in = SglangStandIn()
    reply = await post(stand_in, body)
    assert reply.status_code == 400
    assert reply.json()["type"] == "BadRequestError" and said in reply.json()["message"]
    assert stand_in.prompts == []


async def test_a_field_sglang_does_not_have_is_ignored_as_sglang_ignores_it() -> None:
    """Misnamed or vLLM-only fields change nothing: no ids come back for them."""
    stand_in = SglangStandIn()
    reply = await post(
        stand_in,
        {
            "messages": HI,
            "return_prompt_ids": True,
            "kv_transfer_params": {"prompt_token_ids": [1]},
        },
    )
    assert reply.status_code == 200
    (choice,) = reply.json()["choices"]
    assert "prompt_token_ids" not in choice and "meta_info" not in choice
    assert stand_in.prompts == [
        tok.encode("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n")
    ]


async def test_a_capture_field_the_adapter_sends_with_the_wrong_type_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The adapter's capture fields reach the stand-in's SGLang types: sent as the
    Completions API's logprob count, they are refused as SGLang refuses them (the
    stand-in before these types took any truthy value and answered)."""
    monkeypatch.setitem(sglang._CAPTURE_FIELDS, "logprobs", 5)
    stand_in = SglangStandIn()
    with pytest.raises(EngineError, match="logprobs") as caught:
        await SglangEngine(stand_in).request(
            "POST", CHAT, {"model": "m", "messages": HI, "return_token_ids": True, "logprobs": True}
        )
    assert caught.value.status == 400 and stand_in.prompts == []


@pytest.mark.parametrize(
    "text",
    [
        "echo: hi",
        "",
        "héllo\tworld ☃\n\n",
        '{"name": "ls"}',
        "<|im_end|> as text",
        "<tool_call>\n{}\n</tool_call>",
        "a\x00b",
    ],
)
def test_the_stand_ins_tokenizer_round_trips_and_is_not_the_fake_engines(text: str) -> None:
    """The reply's text is the decoded sampled ids, so they must give the text back;
    and they are not the fake engine's ids, so a proxy that made its own would differ."""
    ids = tok.encode(text)
    assert tok.decode(ids) == text
    assert not text or ids != fake_engine.encode(text)
