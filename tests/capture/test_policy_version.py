"""Every recorded turn carries the policy version when its call was forwarded and when
its reply arrived: over real HTTP, with the version moved while the engine works."""

from __future__ import annotations

from typing import Any

import httpx

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.fixtures.threaded import serve_in_thread

ADMIN = "admin-key"


class UpdatingEngine(FakeEngine):
    """Moves the policy version to `bump_to` while it answers a call, once, and says (as
    harbor_ray's engines do) that the new weights sampled from its second token on."""

    def __init__(self, version: list[int], bump_to: int | None) -> None:
        super().__init__()
        self.version, self.bump_to = version, bump_to

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        if self.bump_to is None:
            return await super().complete(body)
        old, (self.version[0], self.bump_to) = self.version[0], (self.bump_to, None)
        reply = await super().complete(body)
        [choice] = reply["choices"]
        n = reply["usage"]["completion_tokens"]
        choice["weight_versions"] = [
            {"version": str(old), "start": 0, "end": 1},
            {"version": str(self.version[0]), "start": 1, "end": n},
        ]
        return reply


def _turns(bump_to: int | None, default: bool = False) -> list[dict]:
    version = [3]
    engine, store = UpdatingEngine(version, bump_to), InMemorySessionStore()
    kwargs = {} if default else {"policy_version": lambda: version[0]}
    app = build_capture_app(
        store, engine, CaptureSettings(served_model="m", admin_key=ADMIN), admin=store, **kwargs
    )
    with (
        serve_in_thread(app) as url,
        httpx.Client(base_url=url, headers={"authorization": f"Bearer {ADMIN}"}) as admin,
    ):
        session = admin.post("/sessions", json={}).json()
        for _ in range(2):
            reply = httpx.post(
                f"{url}/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
                headers={"authorization": f"Bearer {session['key']}"},
            )
            assert reply.status_code == 200
        return admin.get(f"/sessions/{session['session_id']}/export").json()["turns"]


def test_an_update_mid_call_shows_as_two_versions() -> None:
    first, second = _turns(bump_to=4)
    assert (first["policy_version_start"], first["policy_version_end"]) == (3, 4)
    assert (second["policy_version_start"], second["policy_version_end"]) == (4, 4)
    # Which version sampled which tokens: the engine's spans where it sent them; none
    # (every token the version the call was forwarded at) otherwise.
    assert first["policy_segments"] == [[3, 0], [4, 1]]
    assert second["policy_segments"] is None


def test_without_a_version_source_turns_record_version_zero() -> None:
    turns = _turns(bump_to=None, default=True)
    assert {(t["policy_version_start"], t["policy_version_end"]) for t in turns} == {(0, 0)}
    assert [t["policy_segments"] for t in turns] == [None, None]
