"""Property: whatever a valid request of each dialect is mutated into, the proxy answers
with no 5xx, whether or not the engine refuses it too; a refusal is a 4xx in the
dialect's own shape with nothing recorded and the budget untouched (the session's one
call still answers the valid request); an answer records exactly one turn, and a stream
either records its turn or ends in the dialect's error event, never both.

In process (the app, the fake engine, asgi_client), bounded in examples: a few seconds
of CPU in all. Derandomized, so that CI runs the same examples every time.
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import dataclass
from typing import Any

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.upstream import engine_status_error
from tests.capture.asgi_client import call
from tests.capture.test_disconnect import CALLS, STREAMS, error_message
from tests.capture.test_hostile_input import with_deep_tool

EXAMPLES = 120  # per dialect and mode

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12)
)
VALUES = st.recursive(
    SCALARS,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
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


@dataclass
class WireEngine(FakeEngine):
    """The fake engine behind the wire: it gets the body as HttpEngine encodes it. With
    `refuse_first`, it refuses the first generation as vLLM refuses a request it cannot
    serve (a 400), after the proxy accepted it: a stream's 200 is then already sent."""

    refuse_first: bool = False

    async def request(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        *,
        session: str | None = None,
    ) -> dict[str, Any]:
        if path == "/v1/chat/completions" and self.refuse_first:
            self.refuse_first = False
            raise engine_status_error(400, "the engine refuses this request")
        return await super().request(
            method, path, orjson.loads(orjson.dumps(body)), session=session
        )


def recorded(store: InMemorySessionStore, session_id: str) -> tuple[int, int]:
    state = store.state(session_id)
    return len(state.turns), len(state.in_flight)


def error_events(body: bytes) -> list[dict[str, Any]]:
    """The SSE data payloads that are an error document (every dialect's error event
    carries an `error` member at its top level; a reply's text never is one)."""
    events = []
    for line in body.splitlines():
        if not line.startswith(b"data:"):
            continue
        try:
            data = orjson.loads(line[len(b"data:") :])
        except orjson.JSONDecodeError:
            continue  # OpenAI's [DONE]
        if isinstance(data, dict) and "error" in data:
            events.append(data)
    return events


def check(
    path: str,
    dialect: str,
    body: dict[str, Any],
    stream: bool,
    valid: dict[str, Any],
    engine_refuses: bool,
) -> None:
    store, engine = InMemorySessionStore(), WireEngine(refuse_first=engine_refuses)
    app = build_capture_app(store, engine, CaptureSettings(served_model="m"))

    async def send(s: Any, request: bytes | dict[str, Any]) -> Any:
        return await call(
            app, path, request, key=s.key, headers={"x-api-key": s.key, "x-goog-api-key": s.key}
        )

    async def run() -> None:
        s = await store.open_session(budget=1)
        # The stdlib writes integers of any size.
        got = await send(s, json.dumps(body).encode())
        assert got.status is not None and got.status < 500, (got.status, got.body)
        turns, in_flight = recorded(store, s.session_id)
        assert in_flight == 0, "a budget slot leaked"
        if got.status >= 400:
            error_message(dialect, got.json())
            assert turns == 0
        elif not stream:
            assert turns == 1
        else:
            # A stream is a 200 before the engine answers: it ends either in a recorded
            # turn or in the dialect's error event, exactly one of them.
            errors = error_events(got.body)
            assert (turns, len(errors)) in ((1, 0), (0, 1)), (turns, got.body)
        if turns == 0:
            # Refused, by the proxy or the engine: the one call of the budget is still
            # there for a valid request (which the engine serves).
            engine.refuse_first = False
            again = await send(s, valid)
            assert again.status == 200 and not error_events(again.body), again.body
            assert recorded(store, s.session_id) == (1, 0), "the refusal took the budget"

    asyncio.run(run())


FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def fuzz(dialect: str, stream: bool):
    path, base = (STREAMS if stream else CALLS)[dialect]
    # With a tool, whose schema the proxy passes on as it is: a place to mutate too.
    base = with_deep_tool(dialect, base, levels=1)

    @FUZZ
    @given(body=mutated(base), engine_refuses=st.booleans())
    def test(body: dict[str, Any], engine_refuses: bool) -> None:
        check(path, dialect, body, stream, base, engine_refuses)

    return test


test_chat = fuzz("chat", False)
test_chat_stream = fuzz("chat", True)
test_responses = fuzz("responses", False)
test_responses_stream = fuzz("responses", True)
test_anthropic = fuzz("anthropic", False)
test_anthropic_stream = fuzz("anthropic", True)
test_google = fuzz("google", False)
test_google_stream = fuzz("google", True)
