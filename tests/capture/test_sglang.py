"""SGLang as the engine: found from its answers, certified, and captured with exact ids
(against a stand-in built from SGLang's documented shapes, tests/fixtures/sglang_engine.py)."""

from __future__ import annotations

from typing import Any

import pytest

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.engine_adapter import adapt_engine, detect_engine_kind
from harbor_ray.capture.proxy.fake_engine import FakeEngine, FakeReply
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.sglang import SglangEngine, vllm_shaped
from harbor_ray.errors import CertificationError, EngineError
from tests.capture.asgi_client import call
from tests.fixtures import sglang_tokenizer as tok
from tests.fixtures.sglang_engine import SGLANG_VERSION, SglangStandIn

CHAT = "/v1/chat/completions"
TOOLS = [{"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}]


def tool_then_text(messages: list[dict[str, Any]]) -> FakeReply:
    if messages[-1]["role"] == "tool":
        return FakeReply(text="done")
    return FakeReply(tool_calls=(("ls", {"path": "."}),))


async def test_sglang_is_found_from_its_answers_and_vllm_is_not() -> None:
    assert await detect_engine_kind(SglangStandIn()) == "sglang"
    assert await detect_engine_kind(FakeEngine()) == "vllm"
    adapted = await adapt_engine(SglangStandIn())
    assert adapted.kind == "sglang" and not adapted.stitch
    assert isinstance(adapted.engine, SglangEngine)
    forced = await adapt_engine(FakeEngine(), "vllm")
    assert forced.kind == "vllm" and forced.stitch


async def test_sglang_is_found_by_its_native_route_when_cards_say_nothing() -> None:
    """A router in front may rewrite the model cards; /get_model_info still answers."""
    engine = SglangStandIn()
    original = engine.request

    async def plain_cards(method: str, path: str, body: dict | None = None) -> dict:
        reply = await original(method, path, body)
        if path == "/v1/models":
            reply["data"][0]["owned_by"] = "router"
        return reply

    engine.request = plain_cards  # type: ignore[method-assign]
    assert await detect_engine_kind(engine) == "sglang"


async def test_certifies_sglang_with_its_facts() -> None:
    adapted = await adapt_engine(SglangStandIn(model="qwen"))
    cert = await certify(adapted.engine, "http://sgl", engine_kind=adapted.kind)
    assert cert.engine_kind == "sglang" and cert.served_model == "qwen"
    assert cert.returns_token_ids and cert.returns_logprobs and cert.tool_calling
    assert cert.engine_version == SGLANG_VERSION
    assert cert.logprobs_mode == "processed"  # SGLang's default: after the temperature


async def test_sglang_original_logprobs_are_raw() -> None:
    adapted = await adapt_engine(SglangStandIn(original_logprob=True))
    cert = await certify(adapted.engine, "http://sgl", engine_kind=adapted.kind)
    assert cert.logprobs_mode == "raw"


async def test_sglang_without_the_capture_fields_is_refused_naming_them() -> None:
    adapted = await adapt_engine(SglangStandIn(capture_fields=False))
    with pytest.raises(CertificationError, match="return_prompt_token_ids"):
        await certify(adapted.engine, "http://sgl", engine_kind=adapted.kind)


async def test_an_sglang_release_without_return_token_ids_needs_the_adapter() -> None:
    """Unadapted, a release that knows only its own fields returns no ids to vLLM's
    request: refused, not recorded; adapted, it certifies."""
    with pytest.raises(CertificationError, match="prompt_token_ids"):
        await certify(SglangStandIn(return_token_ids=False), "http://sgl")
    adapted = await adapt_engine(SglangStandIn(return_token_ids=False))
    assert (await certify(adapted.engine, "http://sgl", engine_kind=adapted.kind)).returns_token_ids


async def test_sglang_without_a_tool_call_parser_names_its_flag() -> None:
    adapted = await adapt_engine(SglangStandIn(tool_call_parser=None))
    cert = await certify(adapted.engine, "http://sgl", engine_kind=adapted.kind)
    assert not cert.tool_calling
    assert "--tool-call-parser" in (cert.tool_calling_fix or "")
    assert "vLLM" not in (cert.tool_calling_fix or "")


async def test_multi_turn_capture_keeps_sglangs_exact_ids_and_logprobs() -> None:
    stand_in = SglangStandIn(script=tool_then_text, return_token_ids=False)
    adapted = await adapt_engine(stand_in)
    store = InMemorySessionStore()
    app = build_capture_app(
        store, adapted.engine, CaptureSettings(served_model="sgl-model", stitch=adapted.stitch)
    )
    info = await store.open_session()
    messages: list[dict[str, Any]] = [{"role": "user", "content": "list files"}]
    for _ in range(2):
        reply = await call(
            app, CHAT, {"model": "m", "messages": messages, "tools": TOOLS}, key=info.key
        )
        assert reply.status == 200, reply.json()
        message = reply.json()["choices"][0]["message"]
        messages.append({k: v for k, v in message.items() if v is not None})
        for tool_call in message.get("tool_calls") or []:
            messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": "a"})
    closed = await store.close_session(info.session_id)
    assert closed is not None and len(closed.turns) == 2
    first, second = closed.turns
    assert second.continuation is None  # no stitching on SGLang
    for turn, sent, prompt, sampled, answer in zip(
        closed.turns,
        stand_in.calls,
        stand_in.prompts,
        stand_in.outputs,
        stand_in.replies,
        strict=True,
    ):
        assert sent["return_prompt_token_ids"] and sent["return_meta_info"]
        assert "input_ids" not in sent and "kv_transfer_params" not in sent
        # The ids the stand-in's own tokenizer made, exactly, and its logprobs.
        assert turn.prompt_ids is not None and turn.token_ids is not None
        assert turn.prompt_ids.tolist() == prompt
        assert turn.token_ids.tolist() == sampled
        triples = answer["choices"][0]["meta_info"]["output_token_logprobs"]
        assert turn.logprobs is not None
        assert turn.logprobs.tolist() == pytest.approx([lp for lp, _, _ in triples])
    assert first.finish_reason == "tool_calls"
    # The sampled tool call as Qwen2.5 writes it, then the end of turn.
    assert first.token_ids is not None
    assert first.token_ids.tolist() == [
        *tok.encode(tok.tool_call_text("ls", {"path": "."})),
        tok.IM_END,
    ]
    # The second prompt holds the first turn's call, parsed and rendered by the template.
    assert tok.tool_call_text("ls", {"path": "."}) in tok.decode(stand_in.prompts[1])


async def test_a_call_offering_tools_to_sglang_without_a_parser_is_refused() -> None:
    engine = SglangEngine(SglangStandIn(tool_call_parser=None))
    with pytest.raises(EngineError, match="--tool-call-parser") as caught:
        await engine.request(
            "POST", CHAT, {"messages": [], "tools": TOOLS, "return_token_ids": True}
        )
    assert caught.value.status == 400


async def test_sglang_has_no_tokenize_for_the_proxy() -> None:
    with pytest.raises(EngineError):
        await SglangEngine(SglangStandIn()).request("POST", "/tokenize", {"messages": []})


def test_malformed_triples_are_an_engine_error() -> None:
    reply = {
        "choices": [{"prompt_token_ids": [1], "meta_info": {"output_token_logprobs": [[-0.1]]}}]
    }
    with pytest.raises(EngineError, match="triples"):
        vllm_shaped(reply)


async def test_native_generate_takes_ids_and_returns_triples() -> None:
    """The stand-in's /generate: a prompt as ids, logprobs as (logprob, id, text)."""
    stand_in = SglangStandIn()
    out = await stand_in.request(
        "POST",
        "/generate",
        {
            "input_ids": [5, 6, 7],
            "sampling_params": {"max_new_tokens": 2},
            "return_logprob": True,
            "return_prompt_token_ids": True,
        },
    )
    assert out["prompt_token_ids"] == [5, 6, 7]
    triples = out["meta_info"]["output_token_logprobs"]
    assert [t[1] for t in triples] == out["output_ids"] and len(triples) == 2
    assert [t[2] for t in triples] == [None, None]  # text only with return_text_in_logprobs
    assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 2}
