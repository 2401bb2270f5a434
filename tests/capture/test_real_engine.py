"""The capture proxy in front of the real engine (SmolLM2 on vLLM via Ray Serve LLM),
called by the official SDKs: every recorded turn holds exactly what the engine returned."""

from __future__ import annotations

import itertools
import math
from collections.abc import AsyncIterator

import anthropic
import httpx
import openai
import pytest
from google import genai
from google.genai import types as gtypes

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.proxy.certify import certify
from harbor_ray.capture.proxy.local import LocalCapture, local_capture
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.errors import CertificationError
from tests.fixtures.recording_engine import RecordingEngine, assert_turns_are_the_engines

pytestmark = pytest.mark.integration

# Small replies keep a CPU engine quick; greedy keeps the conversation reproducible.
SAMPLING = Sampling(temperature=0.0, max_tokens=12)


@pytest.fixture(scope="module")
async def recorder(engine_url: str) -> AsyncIterator[RecordingEngine]:
    engine = HttpEngine(engine_url)
    try:
        yield RecordingEngine(engine)
    finally:
        await engine.aclose()


@pytest.fixture(scope="module")
async def module_capture(recorder: RecordingEngine) -> AsyncIterator[LocalCapture]:
    async with local_capture(recorder, recorder.inner.root) as running:
        yield running


@pytest.fixture(scope="module")
async def module_unstitched(recorder: RecordingEngine) -> AsyncIterator[LocalCapture]:
    async with local_capture(recorder, recorder.inner.root, stitch=False) as running:
        yield running


@pytest.fixture
def capture(module_capture: LocalCapture, recorder: RecordingEngine) -> LocalCapture:
    """The module's proxy, with only this test's generations kept by `recorder`."""
    recorder.generations.clear()
    return module_capture


@pytest.fixture
def unstitched(module_unstitched: LocalCapture, recorder: RecordingEngine) -> LocalCapture:
    """The module's proxy with stitching off, with only this test's generations kept."""
    recorder.generations.clear()
    return module_unstitched


async def session(capture: LocalCapture) -> tuple[str, str]:
    info = await capture.open_session(budget=None, sampling=SAMPLING)
    return info.session_id, info.key


def assert_exact_turns(doc: dict, recorder: RecordingEngine, calls: int) -> None:
    """One turn per call, each exactly the engine's own reply to it."""
    assert len(doc["turns"]) == calls
    assert_turns_are_the_engines(doc["turns"], recorder.generations)
    for turn, (sent, _) in zip(doc["turns"], recorder.generations, strict=True):
        assert sent["temperature"] == SAMPLING.temperature  # the session's, imposed
        assert 0 < len(turn["token_ids"]) <= SAMPLING.max_tokens
        assert all(lp is not None and math.isfinite(lp) and lp <= 0 for lp in turn["logprobs"])


async def test_certification_passes_on_the_real_engine(engine_url: str) -> None:
    engine = HttpEngine(engine_url)
    try:
        cert = await certify(engine, engine.root)
    finally:
        await engine.aclose()
    assert cert.returns_token_ids and cert.returns_logprobs
    assert cert.served_model in cert.models
    # The CPU config starts a tool parser and serves a template that renders tools.
    assert cert.tool_calling and cert.tool_calling_fix is None


async def test_a_tools_request_to_the_real_engine_is_answered(engine_url: str) -> None:
    """tools + tool_choice auto: a 200 whose calls, if any, name the tool offered."""
    tool = {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather of a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
    engine = HttpEngine(engine_url)
    try:
        reply = await engine.request(
            "POST",
            "/v1/chat/completions",
            {
                "model": (await engine.request("GET", "/v1/models"))["data"][0]["id"],
                "messages": [{"role": "user", "content": "What is the weather in Paris?"}],
                "tools": [tool],
                "tool_choice": "auto",
                "max_tokens": 48,
                "temperature": 0,
            },
        )
    finally:
        await engine.aclose()
    message = reply["choices"][0]["message"]
    calls = message.get("tool_calls") or []
    assert calls or message.get("content")
    assert all(call["function"]["name"] == "get_weather" for call in calls)


async def test_a_server_without_token_ids_is_refused() -> None:
    """A plain OpenAI-style answer (no vLLM capture fields) must be refused by name."""

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/models"):
            return httpx.Response(200, json={"data": [{"id": "m"}]})
        return httpx.Response(
            200, json={"choices": [{"message": {"content": "OK"}, "finish_reason": "stop"}]}
        )

    class PlainEngine:
        async def request(
            self, method: str, path: str, body: dict | None = None, *, session: str | None = None
        ) -> dict:
            async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
                return (await client.request(method, "http://plain" + path, json=body)).json()

    with pytest.raises(CertificationError, match="return_token_ids"):
        await certify(PlainEngine(), "http://plain")


@pytest.mark.parametrize("stream", [False, True])
async def test_openai_chat_and_responses(
    capture: LocalCapture, recorder: RecordingEngine, stream: bool
) -> None:
    sid, key = await session(capture)
    client = openai.AsyncOpenAI(base_url=f"{capture.host_url}/v1", api_key=key, max_retries=0)
    messages = [{"role": "user", "content": "What is 2+2?"}]
    if stream:
        chunks = [
            c
            async for c in await client.chat.completions.create(
                model="any", messages=messages, stream=True
            )
        ]
        chat_text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        async with client.responses.stream(model="any", input="What is 2+2?") as events:
            responses_text = (await events.get_final_response()).output_text
    else:
        reply = await client.chat.completions.create(model="any", messages=messages)
        chat_text = reply.choices[0].message.content
        responses_text = (
            await client.responses.create(model="any", input="What is 2+2?")
        ).output_text
    assert chat_text.strip() and responses_text.strip()
    # Greedy and the same prompt: both dialects reached the same model the same way.
    assert chat_text == responses_text
    assert_exact_turns(await capture.store.export(sid), recorder, 2)
    assert chat_text == recorder.generations[0][1]["choices"][0]["message"]["content"]


@pytest.mark.parametrize("stream", [False, True])
async def test_anthropic_messages(
    capture: LocalCapture, recorder: RecordingEngine, stream: bool
) -> None:
    sid, key = await session(capture)
    client = anthropic.AsyncAnthropic(base_url=capture.host_url, api_key=key, max_retries=0)
    kwargs = {
        "model": "claude-any",
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "Name a colour."}],
    }
    if stream:
        async with client.messages.stream(**kwargs) as events:
            message = await events.get_final_message()
    else:
        message = await client.messages.create(**kwargs)
    assert message.content[0].text.strip()
    assert_exact_turns(await capture.store.export(sid), recorder, 1)
    [(_, reply)] = recorder.generations
    [choice] = reply["choices"]
    assert message.content[0].text == choice["message"]["content"]
    assert (
        message.stop_reason == {"stop": "end_turn", "length": "max_tokens"}[choice["finish_reason"]]
    )


@pytest.mark.parametrize("stream", [False, True])
async def test_google_generate_content(
    capture: LocalCapture, recorder: RecordingEngine, stream: bool
) -> None:
    sid, key = await session(capture)
    client = genai.Client(
        api_key=key, http_options=gtypes.HttpOptions(base_url=capture.host_url, retry_options=None)
    )
    if stream:
        chunks = [
            c
            async for c in await client.aio.models.generate_content_stream(
                model="gemini-any", contents="Name a fruit."
            )
        ]
        text = "".join(c.text or "" for c in chunks)
    else:
        text = (
            await client.aio.models.generate_content(model="gemini-any", contents="Name a fruit.")
        ).text
    assert text.strip()
    assert_exact_turns(await capture.store.export(sid), recorder, 1)
    assert text == recorder.generations[0][1]["choices"][0]["message"]["content"]


async def token_ids(recorder: RecordingEngine, text: str) -> list[int]:
    """`text` as the engine's own tokenizer encodes it."""
    reply = await recorder.inner.request(
        "POST", "/tokenize", {"prompt": text, "add_special_tokens": False}
    )
    return reply["tokens"]


async def re_tokenised_conversation(capture: LocalCapture, recorder: RecordingEngine) -> dict:
    """Three turns whose every reply the engine tokenises differently once the client
    sends it back as text: the reply is one letter's id sampled over and over (its
    `logit_bias`), which the tokenizer renders as longer runs of that letter."""
    [letter] = await token_ids(recorder, "a")
    assert len(await token_ids(recorder, "aaaa")) < 4  # the tokenizer merges the run
    sid, key = await session(capture)
    client = openai.AsyncOpenAI(base_url=f"{capture.host_url}/v1", api_key=key, max_retries=0)
    messages: list[dict] = [{"role": "system", "content": "You are brief."}]
    for question in ("What is 2+2?", "And 3+3?", "And 4+4?"):
        messages.append({"role": "user", "content": question})
        reply = await client.chat.completions.create(
            model="any", messages=messages, logit_bias={str(letter): 100}
        )
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    doc = await capture.store.export(sid)
    assert_exact_turns(doc, recorder, 3)
    assert {i for t in doc["turns"] for i in t["token_ids"]} == {letter}
    return doc


async def test_three_turns_re_tokenised_are_one_root_when_stitched(
    capture: LocalCapture, recorder: RecordingEngine
) -> None:
    doc = await re_tokenised_conversation(capture, recorder)
    turns = doc["turns"]
    assert doc["counts"]["roots"] == 1, doc["findings"]
    assert [t["parent"] for t in turns] == [None, 0, 1]
    assert [(t["continuation"] or {}).get("stitched") for t in turns] == [None, True, True]
    assert not [
        f for f in doc["findings"] if f["code"] in ("retokenization_split", "stitch_fallback")
    ]
    (sequence,) = doc["sequences"]
    assert sequence["input_ids"] == turns[-1]["prompt_ids"] + turns[-1]["token_ids"]


async def test_three_turns_re_tokenised_split_without_stitching(
    unstitched: LocalCapture, recorder: RecordingEngine
) -> None:
    doc = await re_tokenised_conversation(unstitched, recorder)
    turns = doc["turns"]
    for earlier, later in itertools.pairwise(turns):
        # The engine's own rendering of the earlier call extends its prompt, not its
        # sampled ids: the split is in the engine's ids, not made up by the proxy.
        full = earlier["prompt_ids"] + earlier["token_ids"]
        assert later["prompt_ids"][: len(earlier["prompt_ids"])] == earlier["prompt_ids"]
        assert later["prompt_ids"][: len(full)] != full
    # Each later turn is found split (from every earlier turn its prompt extends).
    splits = {f["turn"] for f in doc["findings"] if f["code"] == "retokenization_split"}
    assert splits == {1, 2}
    assert doc["counts"]["roots"] == 3
