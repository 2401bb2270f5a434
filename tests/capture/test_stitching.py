"""`Stitcher` on its own: a continued call's prompt from the recorded turn's ids, the
template's turn ending learned once per stitcher, and a fallback (never a failure) when
the prompt cannot be stitched (fake engine, in process)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from harbor_ray.capture.core.completion import parse_engine_reply
from harbor_ray.capture.core.continuation import Continuation, ContinuationBase, Fallback
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.stitching import Stitcher

FIRST = [{"role": "user", "content": "list files"}]


@dataclass
class CountingEngine(FakeEngine):
    """The fake engine, counting the renderings it was asked for."""

    tokenized: list[list[Any]] = field(default_factory=list)

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> dict[str, Any]:
        if path == "/tokenize" and body is not None:
            self.tokenized.append(body["messages"])
        return await super().request(method, path, body, session=session)


async def recorded_turn(engine: FakeEngine) -> tuple[ContinuationBase, list[dict[str, Any]]]:
    """The first turn as its owner holds it, and the next call's messages."""
    reply = await engine.complete(
        {"model": "m", "messages": FIRST, "return_token_ids": True, "logprobs": True}
    )
    completion = parse_engine_reply(reply)
    answer = reply["choices"][0]["message"]["content"]
    base = ContinuationBase(
        turn=0, messages=2, prompt_ids=completion.prompt_ids, token_ids=completion.token_ids
    )
    return base, [
        *FIRST,
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and now?"},
    ]


async def test_a_continued_call_starts_with_the_turns_prompt_and_sampled_ids():
    engine = FakeEngine()
    base, messages = await recorded_turn(engine)
    prompt = await Stitcher(engine).prompt({"model": "m", "messages": messages}, base)
    assert prompt.continuation == Continuation(0, True)
    ids = prompt.payload["kv_transfer_params"]["prompt_token_ids"]
    earlier = [*base.prompt_ids.tolist(), *base.token_ids.tolist()]
    assert ids[: len(earlier)] == earlier and len(ids) > len(earlier)
    assert np.array_equal(prompt.stitched_ids, ids)


async def test_the_turn_ending_is_learned_once_per_stitcher():
    engine = CountingEngine()
    base, messages = await recorded_turn(engine)
    stitcher = Stitcher(engine)
    for _ in range(3):
        prompt = await stitcher.prompt({"model": "m", "messages": messages}, base)
        assert prompt.continuation == Continuation(0, True)
    # The probe's two renderings once, then the history and the whole conversation per call.
    assert len(engine.tokenized) == 2 + 3 * 2


async def test_a_call_that_continues_nothing_goes_as_sent():
    engine = CountingEngine()
    payload = {"model": "m", "messages": FIRST}
    prompt = await Stitcher(engine).prompt(payload, None)
    assert (prompt.payload, prompt.continuation, engine.tokenized) == (payload, None, [])


async def test_what_cannot_be_stitched_falls_back_with_its_reason():
    base, messages = await recorded_turn(FakeEngine())
    without_tokenize = Stitcher(FakeEngine(tokenize=False))
    prompt = await without_tokenize.prompt({"model": "m", "messages": messages}, base)
    assert prompt.continuation == Continuation(0, False, Fallback.NO_TOKENIZE)
    assert "kv_transfer_params" not in prompt.payload

    image = [
        *messages[:-1],
        {
            "role": "user",
            "content": [{"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}],
        },
    ]
    prompt = await Stitcher(FakeEngine()).prompt({"model": "m", "messages": image}, base)
    assert prompt.continuation == Continuation(0, False, Fallback.NON_TEXT_CONTENT)
