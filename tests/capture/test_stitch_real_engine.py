"""Stitched prompts on the real engine (SmolLM2 on vLLM via Ray Serve LLM): a client
that sends replies back as text (re-tokenised by the engine) stays one root, and the
stitched sequence is what the model saw: transformers, scoring it independently,
gives the logprobs the engine recorded."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import openai
import pytest

from harbor_ray.capture.core.sampling import Sampling
from harbor_ray.capture.proxy.local import LocalCapture, local_capture
from harbor_ray.capture.proxy.upstream import HttpEngine

pytestmark = pytest.mark.integration

# Greedy and short: a CPU engine is slow, and replies cut at the limit exercise a turn
# that nothing closed.
SAMPLING = Sampling(temperature=0.0, max_tokens=16)


@pytest.fixture(scope="module")
async def capture(engine_url: str) -> AsyncIterator[LocalCapture]:
    engine = HttpEngine(engine_url)
    try:
        async with local_capture(engine, engine.root) as running:
            yield running
    finally:
        await engine.aclose()


@pytest.fixture(scope="module")
def scorer(prepared_model_dir: Path) -> Any:
    """Per-token logprobs of a sequence under the model, by transformers (float32)."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        prepared_model_dir, local_files_only=True, dtype=torch.float32
    )
    model.eval()

    def score(ids: list[int]) -> np.ndarray:
        with torch.no_grad():
            logits = model(torch.tensor([ids])).logits[0, :-1].float()
        logprobs = torch.log_softmax(logits, dim=-1)
        picked = logprobs.gather(1, torch.tensor(ids[1:])[:, None])[:, 0]
        return np.concatenate(([0.0], picked.numpy()))  # position 0 has no logprob

    return score


async def converse(
    capture: LocalCapture, messages: list[dict[str, Any]], follow_ups: list[dict[str, Any]]
) -> dict[str, Any]:
    info = await capture.open_session(budget=None, sampling=SAMPLING)
    client = openai.AsyncOpenAI(base_url=f"{capture.host_url}/v1", api_key=info.key, max_retries=0)
    for follow_up in [None, *follow_ups]:
        if follow_up is not None:
            messages.append(follow_up)
        reply = await client.chat.completions.create(model="any", messages=messages)
        # Sent back as text: the engine would re-tokenise it.
        messages.append({"role": "assistant", "content": reply.choices[0].message.content})
    doc = await capture.store.export(info.session_id)
    assert doc is not None
    return doc


def assert_one_stitched_root(doc: dict[str, Any], scorer: Any) -> None:
    turns = doc["turns"]
    assert doc["counts"]["roots"] == 1, doc["findings"]
    assert [t["parent"] for t in turns] == [None, *range(len(turns) - 1)]
    assert [t["continuation"] for t in turns] == [
        None,
        *({"turn": k, "stitched": True, "fallback": None} for k in range(len(turns) - 1)),
    ]
    assert not [
        f for f in doc["findings"] if f["code"] in ("retokenization_split", "stitch_fallback")
    ]
    (sequence,) = doc["sequences"]
    mask = np.array(sequence["loss_mask"], dtype=bool)
    assert mask.sum() == sum(len(t["token_ids"]) for t in turns)
    rescored = scorer(sequence["input_ids"])
    recorded = np.array(sequence["logprobs"])
    error = np.abs(rescored[mask] - recorded[mask]).max()
    print(
        f"{len(turns)} turns, {len(sequence['input_ids'])} ids, {mask.sum()} sampled: "
        f"largest |transformers - engine| logprob {error:.2e}"
    )
    assert error < 1e-3


async def test_a_plain_conversation_is_one_stitched_root(
    capture: LocalCapture, scorer: Any
) -> None:
    doc = await converse(
        capture,
        [
            {"role": "system", "content": "You are brief."},
            {"role": "user", "content": "Name three colours."},
        ],
        [
            {"role": "user", "content": "And three fruits?"},
            {"role": "user", "content": "And three animals?"},
        ],
    )
    assert_one_stitched_root(doc, scorer)


async def test_a_tool_loop_the_client_writes_is_one_stitched_root(
    capture: LocalCapture, scorer: Any
) -> None:
    # The client runs the "tool" the model was asked to call and answers as a tool.
    doc = await converse(
        capture,
        [
            {
                "role": "system",
                "content": 'Reply only with JSON: {"tool": "ls", "args": {"path": "..."}}',
            },
            {"role": "user", "content": "List the files in /app."},
        ],
        [
            {"role": "tool", "tool_call_id": "call_0", "content": "notes.txt\nmain.py"},
            {"role": "tool", "tool_call_id": "call_1", "content": "error: no such path"},
        ],
    )
    assert_one_stitched_root(doc, scorer)
