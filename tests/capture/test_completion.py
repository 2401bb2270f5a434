import numpy as np
import pytest

from harbor_ray.capture.core.completion import parse_engine_reply
from harbor_ray.errors import EngineReplyError


def vllm_reply(**choice_extra) -> dict:
    choice = {
        "index": 0,
        "message": {"role": "assistant", "content": "hi"},
        "finish_reason": "stop",
        "token_ids": [5, 6, 2],
        "logprobs": {"content": [{"logprob": -0.5}, {"logprob": -1.0}, {"logprob": 0.0}]},
        **choice_extra,
    }
    return {
        "model": "m",
        "prompt_token_ids": [1, 2, 3],
        "choices": [choice],
        "usage": {"prompt_tokens": 3, "completion_tokens": 3},
    }


def test_vllm_shape_parsed_exactly() -> None:
    c = parse_engine_reply(vllm_reply())
    assert c.text == "hi" and c.finish_reason == "stop"
    assert c.prompt_ids.dtype == np.int32 and c.prompt_ids.tolist() == [1, 2, 3]
    assert c.token_ids.tolist() == [5, 6, 2]
    assert c.logprobs.dtype == np.float32 and c.logprobs.tolist() == [-0.5, -1.0, 0.0]


def test_missing_capture_fields_stay_none() -> None:
    reply = vllm_reply()
    del reply["prompt_token_ids"]
    del reply["choices"][0]["token_ids"]
    del reply["choices"][0]["logprobs"]
    c = parse_engine_reply(reply)
    assert c.prompt_ids is None and c.token_ids is None and c.logprobs is None


def test_bad_values_are_marked_not_dropped() -> None:
    c = parse_engine_reply(
        vllm_reply(
            token_ids=[5, "x", 2**40],
            logprobs={"content": [{"logprob": None}, {"logprob": -1.0}, {}]},
        )
    )
    assert c.token_ids.tolist() == [5, -1, -1]
    lp = c.logprobs.tolist()
    assert np.isnan(lp[0]) and lp[1] == -1.0 and np.isnan(lp[2])


def test_a_float_id_is_marked_not_truncated() -> None:
    reply = vllm_reply(token_ids=[5, 7.9])
    reply["prompt_token_ids"] = [1, -2]
    c = parse_engine_reply(reply)
    assert c.token_ids.tolist() == [5, -1]
    assert c.prompt_ids.tolist() == [1, -1]


def test_tool_calls_and_reasoning() -> None:
    c = parse_engine_reply(
        vllm_reply(
            message={
                "role": "assistant",
                "content": None,
                "reasoning_content": "think",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "f", "arguments": {"a": 1}},
                    }
                ],
            },
            finish_reason="tool_calls",
        )
    )
    assert c.finish_reason == "tool_calls" and c.reasoning == "think" and c.text == ""
    assert c.tool_calls[0].name == "f" and c.tool_calls[0].arguments == '{"a": 1}'


def test_prompt_ids_on_the_choice_as_in_completions() -> None:
    reply = vllm_reply(prompt_token_ids=[9, 9])
    del reply["prompt_token_ids"]
    assert parse_engine_reply(reply).prompt_ids.tolist() == [9, 9]


@pytest.mark.parametrize(
    "body", [{}, {"choices": []}, {"choices": ["x"]}, {"choices": [{"message": "x"}]}]
)
def test_unusable_reply(body: dict) -> None:
    with pytest.raises(EngineReplyError):
        parse_engine_reply(body)
