"""Hundreds of concurrent calls on one budgeted session while clients leave at random
moments (mid-body, while the engine works, while the turn is recorded) and the engine
fails some calls: the turns recorded are exactly the answers clients received, the
budget is spent by those alone, and no slot leaks. In process, seeded: under a second."""

from __future__ import annotations

import asyncio
import collections
import random
from typing import Any

import orjson

from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.upstream import engine_status_error
from tests.capture.asgi_client import Exchange, call

CALLS, BUDGET = 400, 150
CHAT = "/v1/chat/completions"
# Calls the engine holds until their client leaves: some clients surely leave while the
# engine works, however the random timings fall on a loaded machine.
HELD = frozenset(range(3))


class FlakyEngine(FakeEngine):
    """Takes 0-20 ms; one call in six fails (unreachable, overloaded, 5xx); the calls
    `held` wait until they are cancelled, and `reached` says when each call arrived."""

    def __init__(self, rng: random.Random, held: frozenset[str] = frozenset()) -> None:
        super().__init__()
        self.rng, self.failed, self.held = rng, 0, held
        self.reached: dict[str, asyncio.Event] = collections.defaultdict(asyncio.Event)

    async def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        content = body["messages"][-1]["content"]
        self.reached[content].set()
        try:
            if content in self.held:
                await asyncio.Event().wait()
            await asyncio.sleep(self.rng.random() * 0.02)
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if self.rng.random() < 1 / 6:
            self.failed += 1
            raise engine_status_error(self.rng.choice([500, 503, 429]), "injected")
        return await super().complete(body)


class SlowRecords(InMemorySessionStore):
    """Records take 0-3 ms, as an owner actor's round trip does."""

    def __init__(self, rng: random.Random) -> None:
        super().__init__()
        self.rng = rng

    async def record(self, session_id: str, turn: TurnRecord) -> None:
        await asyncio.sleep(self.rng.random() * 0.003)
        await super().record(session_id, turn)


def answered(got: Exchange) -> bool:
    """The client received a model answer (not a refusal, an error or the budget stop)."""
    return got.received and got.status == 200 and b"echo: " in got.body


async def test_recorded_turns_are_exactly_the_answers_received() -> None:
    rng = random.Random(12)
    store = SlowRecords(rng)
    engine = FlakyEngine(rng, frozenset(f"call {n}" for n in HELD))
    app = build_capture_app(
        store, engine, CaptureSettings(served_model="fake-model", keepalive_s=0.005)
    )
    session = await store.open_session(budget=BUDGET)
    behaviours: list[str] = []

    async def client(n: int) -> Exchange:
        stream = rng.random() < 0.5
        body = {
            "model": "m",
            "stream": stream,
            "messages": [{"role": "user", "content": f"call {n}"}],
        }
        behaviour = rng.choice(["stay", "stay", "leave", "leave", "mid-body"])
        leave = asyncio.Event()
        if n in HELD:
            behaviour = "leave"
            leaving = asyncio.ensure_future(engine.reached[f"call {n}"].wait())
            leaving.add_done_callback(lambda _: leave.set())
        elif behaviour == "leave":
            asyncio.get_running_loop().call_later(rng.random() * 0.025, leave.set)
        behaviours.append(behaviour)
        return await call(
            app, CHAT, body, key=session.key, leave=leave, leave_mid_body=behaviour == "mid-body"
        )

    # Bounded: a held call whose client left but that is never cancelled would wait forever.
    exchanges = await asyncio.wait_for(asyncio.gather(*(client(n) for n in range(CALLS))), 60)
    state = store.state(session.session_id)
    received = [got for got in exchanges if answered(got)]
    left_after_the_engine = sum(
        1 for got, b in zip(exchanges, behaviours, strict=True) if b == "leave" and not got.received
    )
    print(
        f"\n{len(received)} answers received, {len(state.turns)} turns, "
        f"{engine.failed} engine failures, {engine.cancelled} engine calls cancelled, "
        f"{left_after_the_engine} clients left unanswered, "
        f"{state.counters['budget_stop']} budget stops"
    )
    assert engine.failed and engine.cancelled and left_after_the_engine
    assert state.counters["budget_stop"] > 0, "the budget was never reached"
    assert state.in_flight == {}, "a budget slot leaked"
    assert len(state.turns) == len(received)
    # The same calls, not just as many: each turn's prompt is one a client got answered.
    prompts = sorted(orjson.loads(t.request_messages_json)[-1]["content"] for t in state.turns)
    assert prompts == sorted(_prompt(got) for got in received)

    # The budget was spent by the delivered calls alone: what is left is still callable.
    engine.rng = random.Random(0)
    engine.complete = FakeEngine.complete.__get__(engine)  # no more failures or delays
    extra = 0
    while answered(
        await call(
            app,
            CHAT,
            {"model": "m", "messages": [{"role": "user", "content": "fill"}]},
            key=session.key,
        )
    ):
        extra += 1
    assert extra == BUDGET - len(received)
    assert len(state.turns) == BUDGET


def _prompt(got: Exchange) -> str:
    """What the client asked, from the echo it received."""
    text = got.body.decode()
    start = text.index("echo: ") + len("echo: ")
    return text[start : text.index('"', start)]
