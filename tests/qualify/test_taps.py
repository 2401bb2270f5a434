"""The taps qualification reads: the proxy's answers, the engine's generations."""

from __future__ import annotations

import httpx

from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.local import local_capture
from harbor_ray.qualify.taps import EngineTap, ProxyTap


async def test_the_taps_see_the_answers_and_the_ids_a_rollout_got() -> None:
    engine, taps = EngineTap(FakeEngine()), []

    def wrap(app):
        taps.append(ProxyTap(app))
        return taps[0]

    async with local_capture(engine, "in-process", wrap=wrap) as capture:
        engine.generations.clear()  # certification's
        taps[0].answers.clear()  # the server's own readiness probe
        session = await capture.open_session(budget=None, sampling=None)
        async with httpx.AsyncClient(base_url=capture.host_url) as client:
            auth = {"authorization": f"Bearer {session.key}"}
            body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
            ok = await client.post("/v1/chat/completions", json=body, headers=auth)
            streamed = await client.post(
                "/v1/chat/completions", json={**body, "stream": True}, headers=auth
            )
            refused = await client.post("/v1/chat/completions", json={"model": "m"}, headers=auth)
        closed = await capture.close_session(session.session_id)
    assert (ok.status_code, streamed.status_code, refused.status_code) == (200, 200, 400)
    assert [(a.path, a.status, a.streamed) for a in taps[0].answers] == [
        ("/v1/chat/completions", 200, False),
        ("/v1/chat/completions", 200, True),
        ("/v1/chat/completions", 400, False),
    ]
    assert closed is not None and len(engine.generations) == len(closed.turns) == 2
    assert [(list(g.prompt_ids), list(g.token_ids), g.messages) for g in engine.generations] == [
        (turn.prompt_ids.tolist(), turn.token_ids.tolist(), turn.request_messages_json)
        for turn in closed.turns
    ]
