import pytest

from harbor_ray.capture.core.dialects.base import EngineCall
from harbor_ray.capture.core.normalize import engine_body
from harbor_ray.errors import AgentRequestError


def call(**body) -> EngineCall:
    return EngineCall(
        body={"messages": [{"role": "user", "content": "x"}], **body},
        stream=True,
        request_model="agent",
    )


def test_capture_fields_model_and_no_stream() -> None:
    body = engine_body(call(model="agent", stream=True, logprobs=False, temperature=0.3), "served")
    assert body["model"] == "served"
    assert body["stream"] is False
    assert body["return_token_ids"] is True and body["logprobs"] is True
    assert body["temperature"] == 0.3


def test_empty_tools_dropped_with_choice_and_parallel() -> None:
    body = engine_body(call(tools=[], tool_choice="auto", parallel_tool_calls=True), "s")
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & body.keys()


def test_nonempty_tools_kept() -> None:
    tools = [{"type": "function", "function": {"name": "f"}}]
    body = engine_body(call(tools=tools, tool_choice="auto"), "s")
    assert body["tools"] == tools and body["tool_choice"] == "auto"


def test_stream_options_dropped() -> None:
    assert "stream_options" not in engine_body(call(stream_options={"include_usage": True}), "s")


def test_n_above_one_refused() -> None:
    with pytest.raises(AgentRequestError, match="n=2"):
        engine_body(call(n=2), "s")
    assert "n" not in engine_body(call(n=1), "s")
