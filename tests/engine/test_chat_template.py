"""The chat template shipped for the default model: SmolLM2's own without tools, and with
tools a form that vLLM's `xlam` parser (the CPU config's) reads back into tool calls."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer
from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
from vllm.tool_parsers.xlam_tool_parser import xLAMToolParser

from harbor_ray.engine.serve import DEFAULT_CHAT_TEMPLATE

TEMPLATE = DEFAULT_CHAT_TEMPLATE.read_text()
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather of a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "get_weather", "arguments": json.dumps({"city": "Paris"})},
}
CONVERSATIONS: list[list[dict[str, Any]]] = [
    [{"role": "user", "content": "hi"}],
    [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "2+2?"},
    ],
]


@pytest.fixture(scope="module")
def tokenizer(prepared_model_dir: Path) -> Any:
    return AutoTokenizer.from_pretrained(prepared_model_dir)


@pytest.mark.parametrize("conversation", CONVERSATIONS)
@pytest.mark.parametrize("generation_prompt", [True, False])
def test_without_tools_it_renders_as_the_models_own(
    tokenizer: Any, conversation: list[dict[str, Any]], generation_prompt: bool
) -> None:
    def render(template: str | None) -> str:
        return tokenizer.apply_chat_template(
            conversation,
            chat_template=template,
            tokenize=False,
            add_generation_prompt=generation_prompt,
        )

    assert render(TEMPLATE) == render(None)


def test_content_parts_render_as_their_text(tokenizer: Any) -> None:
    parts = [
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}
    ]
    plain = [{"role": "user", "content": "ab"}]
    assert tokenizer.apply_chat_template(
        parts, chat_template=TEMPLATE, tokenize=False
    ) == tokenizer.apply_chat_template(plain, chat_template=TEMPLATE, tokenize=False)


def test_tools_reach_the_prompt(tokenizer: Any) -> None:
    messages = [{"role": "user", "content": "Weather in Paris?"}]
    with_tools = tokenizer.apply_chat_template(
        messages, tools=[TOOL], chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True
    )
    assert json.dumps(TOOL) in with_tools
    assert with_tools.endswith(
        "<|im_start|>user\nWeather in Paris?<|im_end|>\n<|im_start|>assistant\n"
    )


def test_a_rendered_tool_call_parses_back_into_the_same_call(tokenizer: Any) -> None:
    """What the template shows the model as its own call is what the parser reads."""
    messages = [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL, CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"},
    ]
    prompt = tokenizer.apply_chat_template(
        messages, tools=[TOOL], chat_template=TEMPLATE, tokenize=False, add_generation_prompt=True
    )
    assistant = prompt.split("<|im_start|>assistant\n")[1].split("<|im_end|>")[0]
    request = ChatCompletionRequest(
        model="m", messages=messages[:1], tools=[TOOL], tool_choice="auto"
    )
    parsed = xLAMToolParser(tokenizer).extract_tool_calls(assistant, request)
    assert parsed.tools_called
    assert [(c.function.name, json.loads(c.function.arguments)) for c in parsed.tool_calls] == [
        ("get_weather", {"city": "Paris"})
    ] * 2
    assert "<|im_start|>tool\n<tool_response>sunny</tool_response><|im_end|>" in prompt
