"""`ActorSessionStore` against real owner actors on the session's local Ray, with the app
in this process (no Serve): what a replica does when sessions end or owners die."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import httpx
import openai
import pytest
import ray
from ray.exceptions import RayActorError

from harbor_ray.capture.core.export import render_export
from harbor_ray.capture.core.session_info import SessionInfo
from harbor_ray.capture.core.session_keys import mint_key, new_session_id
from harbor_ray.capture.proxy.app import CaptureSettings, build_capture_app
from harbor_ray.capture.proxy.fake_engine import FakeEngine, render_prompt
from harbor_ray.cluster.actor_store import ActorSessionStore
from harbor_ray.cluster.owner import NAMESPACE, actor_holder
from harbor_ray.errors import SessionGone
from tests.capture.test_session import turn
from tests.fixtures.cluster_actors import start_session_owner

pytestmark = pytest.mark.integration

HELLO = [{"role": "user", "content": "hello"}]


def _owner(ray_cluster: None) -> Iterator[Any]:
    handle = start_session_owner(f"t{uuid.uuid4().hex[:8]}")
    yield handle
    ray.kill(handle)


async def kill_and_wait(handle: Any, timeout_s: float = 60.0) -> None:
    """Kill an actor and return once a call to it fails: `ray.kill` only asks, and on a
    loaded machine the actor may still answer for a while."""
    ray.kill(handle)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            await asyncio.wait_for(handle.__ray_ready__.remote(), timeout=5)
        except RayActorError:
            return
        except TimeoutError:
            pass
        await asyncio.sleep(0.1)
    raise AssertionError(f"the actor still answers {timeout_s:g} s after ray.kill")


# One owner for the module (an actor takes seconds to start here); tests that kill
# their owner get their own.
owner = pytest.fixture(scope="module")(_owner)
doomed_owner = pytest.fixture(_owner)


@pytest.fixture
async def proxy(ray_cluster: None) -> AsyncIterator[httpx.AsyncClient]:
    app = build_capture_app(
        ActorSessionStore(), FakeEngine(), CaptureSettings(served_model="fake-model")
    )
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as client:
        yield client


async def open_session(owner: Any, budget: int | None = None) -> SessionInfo:
    return await owner.open_session.remote(budget=budget, sampling=None)


def sdk(proxy: httpx.AsyncClient, key: str) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url="http://127.0.0.1/v1", api_key=key, http_client=proxy, max_retries=0
    )


async def chat(proxy: httpx.AsyncClient, key: str) -> str:
    reply = await sdk(proxy, key).chat.completions.create(model="m", messages=HELLO)
    return reply.choices[0].message.content


async def test_calls_are_admitted_and_recorded_on_the_owner(owner, proxy) -> None:
    session = await open_session(owner)
    assert await chat(proxy, session.key) == "echo: hello"
    assert await chat(proxy, session.key) == "echo: hello"
    doc = render_export(await owner.close_session.remote(session.session_id))
    assert [t["index"] for t in doc["turns"]] == [0, 1]
    assert doc["turns"][0]["prompt_ids"] == render_prompt(doc["turns"][0]["request_messages"])


async def test_a_closed_session_ends_with_401(owner, proxy) -> None:
    session = await open_session(owner)
    await chat(proxy, session.key)  # the grant is now cached
    await owner.close_session.remote(session.session_id)
    with pytest.raises(openai.AuthenticationError, match="session has ended"):
        await chat(proxy, session.key)
    # That evicted the cached grant: the owner is asked again, and says no.
    with pytest.raises(openai.AuthenticationError, match="invalid or missing session key"):
        await chat(proxy, session.key)


async def test_a_dead_owner_ends_its_sessions(doomed_owner, proxy) -> None:
    session = await open_session(doomed_owner)
    await chat(proxy, session.key)
    await kill_and_wait(doomed_owner)
    with pytest.raises(openai.AuthenticationError, match="session has ended"):
        await chat(proxy, session.key)
    with pytest.raises(openai.AuthenticationError, match="invalid or missing session key"):
        await chat(proxy, session.key)


async def test_keys_that_open_nothing(owner) -> None:
    store = ActorSessionStore()
    session = await open_session(owner)
    secret = session.key.rsplit("-", 1)[1]
    assert (await store.authenticate(session.key)).session_id == session.session_id
    for key in [
        session.key[:-1] + ("A" if session.key[-1] != "A" else "B"),  # wrong secret
        mint_key(session.session_id),  # a fresh secret for a real session
        mint_key(new_session_id("nobodyhere")),  # no such owner actor
        mint_key(new_session_id()),  # an id that names no owner
        f"hr-{session.session_id}x-{secret}",  # a session the owner does not have
        "sk-not-ours",
    ]:
        assert await store.authenticate(key) is None, key


async def test_a_session_that_names_no_owner_is_gone(ray_cluster: None) -> None:
    """An id no actor can hold (it names no owner) is a session gone (a 401 to the
    agent), as a closed one is: not a bare error (a 500)."""
    store = ActorSessionStore()
    for call in (store.admit(new_session_id()), store.release(new_session_id(), 0)):
        with pytest.raises(SessionGone):
            await call


async def test_records_for_a_dead_owner_raise_session_gone(doomed_owner) -> None:
    """A reply whose turn could not be kept is not delivered: the agent gets a 401."""
    store = ActorSessionStore()
    session = await open_session(doomed_owner)
    await store.authenticate(session.key)
    admission = await store.admit(session.session_id)
    await kill_and_wait(doomed_owner)
    with pytest.raises(SessionGone):
        await store.record(session.session_id, turn(admission.call_index))
    with pytest.raises(SessionGone):
        await store.release(session.session_id, admission.call_index, "engine_error")
    with pytest.raises(SessionGone):
        await store.admit(session.session_id)


async def test_a_session_closed_while_its_call_runs_gets_401(owner) -> None:
    """The owner closes the session (its rollout ended) while a replica's call runs."""
    engine = FakeEngine(delay_s=0.5)
    app = build_capture_app(ActorSessionStore(), engine, CaptureSettings(served_model="fake-model"))
    session = await open_session(owner)
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
    ) as proxy:
        calling = asyncio.ensure_future(chat(proxy, session.key))
        while not engine.calls:
            await asyncio.sleep(0.01)
        await owner.close_session.remote(session.session_id)
        with pytest.raises(openai.AuthenticationError, match="session has ended"):
            await calling


async def test_an_evicted_grant_still_reaches_its_owner(owner) -> None:
    store = ActorSessionStore(max_sessions=2)
    sessions = [await open_session(owner) for _ in range(3)]
    for session in sessions:
        assert await store.authenticate(session.key) is not None
    assert len(store._sessions) == 2  # the first grant was evicted from the cache
    admission = await store.admit(sessions[0].session_id)  # the evicted one
    await store.record(sessions[0].session_id, turn(admission.call_index))
    doc = render_export(await owner.close_session.remote(sessions[0].session_id))
    assert len(doc["turns"]) == 1


async def test_an_owner_gives_back_the_calls_of_a_holder_that_died(owner, doomed_owner) -> None:
    """A replica killed between admit and record never ends its call. Once such calls are
    all that stand between the session and its budget, the owner gives them back."""
    session = await open_session(owner, budget=1)
    holder = await doomed_owner.__ray_call__.remote(lambda _: actor_holder(NAMESPACE))
    assert holder.startswith(f"{NAMESPACE}/sessions-")  # as a replica names itself
    assert (await owner.admit.remote(session.session_id, holder)).admitted
    assert not (await owner.admit.remote(session.session_id, holder)).admitted  # alive
    ray.kill(doomed_owner)
    for _ in range(100):  # until the cluster knows it is dead
        if (await owner.admit.remote(session.session_id, None)).admitted:
            break
        await asyncio.sleep(0.1)
    else:
        raise AssertionError("the dead holder's call was never given back")
    assert not (await owner.admit.remote(session.session_id, None)).admitted
