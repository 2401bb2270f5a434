"""The in-process proxy (`harbor-ray rollout`, and each rollout host with host ingress)."""

from __future__ import annotations

import httpx

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.local import local_capture
from tests.fixtures.sglang_engine import SglangStandIn

HELLO = {"messages": [{"role": "user", "content": "hello"}]}


async def test_agents_cannot_reach_the_sessions_of_others() -> None:
    """The agents' only way in is the model routes with their own key: no listing,
    minting, reading or deleting sessions over HTTP."""
    async with local_capture(FakeEngine(), "in-process") as capture:
        mine = await capture.open_session(budget=None, sampling=None)
        theirs = await capture.open_session(budget=None, sampling=None)
        async with httpx.AsyncClient(base_url=capture.host_url) as http:
            assert (await http.get("/sessions")).status_code == 404
            assert (await http.post("/sessions", json={})).status_code == 404
            export = await http.get(f"/sessions/{theirs.session_id}/export")
            assert export.status_code == 404
            delete = await http.delete(f"/sessions/{theirs.session_id}")
            assert delete.status_code == 405
            reply = await http.post(
                "/v1/chat/completions", json=HELLO, headers={"authorization": f"Bearer {mine.key}"}
            )
            assert reply.status_code == 200, reply.text
        assert capture.store.state(theirs.session_id) is not None
        closed = await capture.close_session(mine.session_id)
        assert closed is not None and len(closed.turns) == 1


async def test_an_sglang_engine_is_found_adapted_and_certified_as_sglang() -> None:
    """The rollout path's one adapter call: SGLang's ids through its adapter (a release
    without the chat field return_token_ids needs it), stitching off there."""
    stand_in = SglangStandIn(return_token_ids=False)
    async with local_capture(stand_in, "in-process") as capture:
        assert capture.certification is not None
        assert capture.certification.engine_kind == "sglang"
        info = await capture.open_session(budget=None, sampling=None)
        async with httpx.AsyncClient(base_url=capture.host_url) as http:
            reply = await http.post(
                "/v1/chat/completions", json=HELLO, headers={"authorization": f"Bearer {info.key}"}
            )
            assert reply.status_code == 200, reply.text
        closed = await capture.close_session(info.session_id)
    assert closed is not None
    (turn,) = closed.turns
    # The ids the stand-in's own tokenizer made for the agent's call (the last).
    assert turn.prompt_ids is not None and turn.token_ids is not None
    assert turn.prompt_ids.tolist() == stand_in.prompts[-1]
    assert turn.token_ids.tolist() == stand_in.outputs[-1]


async def test_a_vllm_engine_is_certified_as_vllm() -> None:
    async with local_capture(FakeEngine(), "in-process") as capture:
        assert capture.certification is not None
        assert capture.certification.engine_kind == "vllm"


async def test_a_certification_made_already_is_not_made_again() -> None:
    engine = FakeEngine()
    async with local_capture(FakeEngine(), "in-process") as first:
        assert first.certification is not None
    async with local_capture(engine, "in-process", certified=first.certification) as again:
        assert again.certification == first.certification
    assert engine.calls == []  # no probe
