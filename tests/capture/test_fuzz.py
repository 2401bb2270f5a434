"""Property: whatever a valid request of each dialect is mutated into, the proxy answers
with no 5xx; a refusal is a 4xx in the dialect's own shape with nothing recorded and the
budget untouched; an answer records exactly one turn.

In process (the app, the fake engine, asgi_client), bounded in examples: a few seconds
of CPU in all. Derandomized, so that CI runs the same examples every time.
"""

from __future__ import annotations

import asyncio
import copy
import json
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from tests.capture.asgi_client import call
from tests.capture.test_disconnect import CALLS, STREAMS, error_message
from tests.capture.test_hostile_input import with_deep_tool

EXAMPLES = 120  # per dialect and mode

SCALARS = (st.none() | st.booleans() | st.integers(-(2**70), 2**70)
           | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=12))
VALUES = st.recursive(
    SCALARS,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner,
                                                                max_size=3),
    max_leaves=12,
)
# Past what the engine client encodes (254), within what JSON parses (1024).
DEEP = st.integers(240, 600).map(lambda n: json.loads("[" * n + "]" * n))


def paths(value: Any, prefix: tuple = ()) -> list[tuple]:
    """Every place in a JSON document, the root included."""
    found = [prefix]
    if isinstance(value, dict):
        for key, item in value.items():
            found += paths(item, (*prefix, key))
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += paths(item, (*prefix, i))
    return found


@st.composite
def mutated(draw: st.DrawFn, body: dict[str, Any]) -> dict[str, Any]:
    """`body` with one to three places replaced, removed, or given a new field."""
    out = copy.deepcopy(body)
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(paths(out)))
        if not where:
            out = {**out, draw(st.text(max_size=8)): draw(VALUES | DEEP)}
            continue
        *parent_path, last = where
        parent = out
        for step in parent_path:
            parent = parent[step]
        op = draw(st.sampled_from(["replace", "replace", "remove", "deep", "deep"]))
        if op == "remove":
            del parent[last]
        else:
            parent[last] = draw(DEEP if op == "deep" else VALUES)
    return out


class WireEngine(FakeEngine):
    """The fake engine behind the wire: it gets the body as HttpEngine encodes it."""

    async def request(self, method: str, path: str, body: dict[str, Any] | None = None
                      ) -> dict[str, Any]:
        return await super().request(method, path, orjson.loads(orjson.dumps(body)))


def recorded(store: InMemorySessionStore, session_id: str) -> tuple[int, int]:
    state = store.state(session_id)
    return len(state.turns), len(state.in_flight)


def check(path: str, dialect: str, body: dict[str, Any], stream: bool) -> None:
    store, engine = InMemorySessionStore(), WireEngine()
    app = build_capture_app(store, engine, CaptureSettings(served_model="m"))

    async def run() -> None:
        s = await store.create(budget=1)
        raw = json.dumps(body).encode()  # the stdlib writes integers of any size
        got = await call(app, path, raw, key=s.key,
                         headers={"x-api-key": s.key, "x-goog-api-key": s.key})
        assert got.status is not None and got.status < 500, (got.status, got.body)
        turns, in_flight = recorded(store, s.session_id)
        assert in_flight == 0, "a budget slot leaked"
        if got.status >= 400:
            error_message(dialect, got.json())
            assert turns == 0
        elif not stream:
            assert turns == 1
        else:
            # A stream is a 200 before the engine answers: it either ends in a recorded
            # turn or carries the dialect's error event.
            assert turns == 1 or b"error" in got.body, got.body

    asyncio.run(run())


FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def fuzz(dialect: str, stream: bool):
    path, base = (STREAMS if stream else CALLS)[dialect]
    # With a tool, whose schema the proxy passes on as it is: a place to mutate too.
    base = with_deep_tool(dialect, base, levels=1)

    @FUZZ
    @given(body=mutated(base))
    def test(body: dict[str, Any]) -> None:
        check(path, dialect, body, stream)

    return test


test_chat = fuzz("chat", False)
test_chat_stream = fuzz("chat", True)
test_responses = fuzz("responses", False)
test_responses_stream = fuzz("responses", True)
test_anthropic = fuzz("anthropic", False)
test_anthropic_stream = fuzz("anthropic", True)
test_google = fuzz("google", False)
test_google_stream = fuzz("google", True)
