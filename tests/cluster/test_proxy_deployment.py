"""The capture proxy as a Ray Serve deployment, called by the official openai SDK.

One deployment (2 replicas) per module, in front of the stub engine in its own process;
sessions live in owner actors, as they do in a sweep. Agents reach the replicas through
Serve's route or, as in a sweep, through a rollout host's relay to the replicas' own
sockets. The last tests kill a replica while calls are in flight, through either
ingress: every reply an agent received is recorded, once; a call recorded just before
its replica died is recorded again when the agent retries it (the same prompt under a
new index: the engine was asked twice, and both turns are real).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import openai
import pytest
import ray

from harbor_ray.capture.core.budget import BUDGET_MESSAGE
from harbor_ray.capture.core.export import render_export
from harbor_ray.capture.core.session_keys import mint_key, new_session_id
from harbor_ray.capture.proxy.fake_engine import IM_END, encode, render_prompt
from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.cluster.owner import actor_holder
from harbor_ray.cluster.proxy_deployment import (
    SERVE_NAMESPACE,
    deploy_capture_proxy,
    remove_capture_proxy,
)
from harbor_ray.cluster.replica_registry import ReplicaEntry, registry_name
from tests.fixtures.cluster_actors import (
    replica_actor_names,
    start_probed_host,
    start_session_owner,
)
from tests.fixtures.fake_engine import fake_engine_process, free_port

pytestmark = pytest.mark.integration

APP = "capture_test"
# The engine takes a while, as a real one does, so that calls are in flight on both
# replicas when one is killed.
ENGINE_DELAY_MS = 50


@pytest.fixture(scope="module")
def proxy_url(ray_cluster: None) -> Iterator[str]:
    with fake_engine_process("--delay-ms", str(ENGINE_DELAY_MS)) as engine_url:
        url = deploy_capture_proxy(
            engine_url,
            "fake-model",
            replicas=2,
            app_name=APP,
            route_prefix="/capture-test",
            http_port=free_port(),
        )
        try:
            yield url
        finally:
            remove_capture_proxy(APP)


def new_owner() -> Any:
    return start_session_owner(f"t{uuid.uuid4().hex[:8]}")


@pytest.fixture(scope="module")
def owner(ray_cluster: None) -> Iterator[Any]:
    handle = new_owner()
    yield handle
    ray.kill(handle)


def new_host() -> Any:
    """A rollout host (no rollouts here): it owns sessions and runs the relay."""
    return start_probed_host(
        f"t{uuid.uuid4().hex[:8]}", ProxyTarget("unused-serve-url", "fake-model", "direct", app=APP)
    )


@pytest.fixture(scope="module")
def host(proxy_url: str) -> Iterator[Any]:
    handle = new_host()
    yield handle
    ray.kill(handle)


@dataclass(frozen=True)
class Ingress:
    kind: str
    url: str
    owner: Any


@pytest.fixture(params=["serve", "direct"])
def ingress(request: pytest.FixtureRequest, proxy_url: str, owner: Any, host: Any) -> Ingress:
    """Where agents of either ingress call, and who owns their sessions."""
    if request.param == "serve":
        return Ingress("serve", proxy_url, owner)
    return Ingress("direct", ray.get(host.capture_url.remote()), host)


async def open_session(owner: Any, budget: int | None = None) -> tuple[str, str]:
    info = await owner.open_session.remote(budget=budget, sampling=None)
    return info.session_id, info.key


def client(proxy_url: str, key: str, retries: int = 0) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        base_url=f"{proxy_url}/v1", api_key=key, max_retries=retries, timeout=30
    )


async def ask(sdk: openai.AsyncOpenAI, content: str, *, stream: bool = False) -> str:
    messages = [{"role": "user", "content": content}]
    if not stream:
        reply = await sdk.chat.completions.create(model="m", messages=messages)
        return reply.choices[0].message.content
    chunks = await sdk.chat.completions.create(model="m", messages=messages, stream=True)
    return "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])


def assert_turns_hold_engine_ids(doc: dict, replies: list[str]) -> None:
    assert [t["response_message"]["content"] for t in doc["turns"]] == replies
    for turn, reply in zip(doc["turns"], replies, strict=True):
        assert turn["prompt_ids"] == render_prompt(turn["request_messages"])
        assert turn["token_ids"] == [*encode(reply), IM_END]
        assert len(turn["logprobs"]) == len(turn["token_ids"])


async def test_chat_and_streamed_chat_are_recorded_once_each(proxy_url: str, owner: Any) -> None:
    sid, key = await open_session(owner)
    sdk = client(proxy_url, key)
    assert await ask(sdk, "one") == "echo: one"
    assert await ask(sdk, "two", stream=True) == "echo: two"
    doc = render_export(await owner.close_session.remote(sid))
    assert_turns_hold_engine_ids(doc, ["echo: one", "echo: two"])
    assert [t["index"] for t in doc["turns"]] == [0, 1]


async def test_keys_that_open_nothing_get_401(proxy_url: str, owner: Any) -> None:
    sid, _ = await open_session(owner)
    wrong_secret = mint_key(sid)
    for bad in [mint_key(new_session_id("nobodyhere")), "sk-not-ours", wrong_secret]:
        with pytest.raises(openai.AuthenticationError):
            await ask(client(proxy_url, bad), "x")
    assert render_export(await owner.close_session.remote(sid))["turns"] == []


async def test_a_killed_owner_ends_its_sessions_with_401(proxy_url: str) -> None:
    doomed = new_owner()
    _, key = await open_session(doomed)
    sdk = client(proxy_url, key)
    await ask(sdk, "before")
    ray.kill(doomed)
    # Twice: whichever replica answers (one has the grant cached, one may not).
    for _ in range(2):
        with pytest.raises(openai.AuthenticationError):
            await ask(sdk, "after")


async def test_past_the_budget_the_agent_is_told_to_stop_and_nothing_is_recorded(
    proxy_url: str, owner: Any
) -> None:
    sid, key = await open_session(owner, budget=1)
    sdk = client(proxy_url, key)
    assert await ask(sdk, "one") == "echo: one"
    assert await ask(sdk, "two") == BUDGET_MESSAGE
    assert await ask(sdk, "three", stream=True) == BUDGET_MESSAGE
    doc = render_export(await owner.close_session.remote(sid))
    assert_turns_hold_engine_ids(doc, ["echo: one"])
    assert doc["counts"]["budget_stops"] == 2


AGENTS, CALLS, KILL_AFTER = 6, 8, 10
BUDGET = CALLS + 3  # room for the retries a kill causes


async def test_through_a_hosts_relay_calls_are_recorded_on_the_host(host: Any) -> None:
    relay_url = await host.capture_url.remote()
    assert relay_url.startswith("http://127.0.0.1:")
    sid, key = await open_session(host)
    # A fresh SDK client per call: a new connection each time, spread over the replicas.
    assert await ask(client(relay_url, key), "one") == "echo: one"
    assert await ask(client(relay_url, key), "two", stream=True) == "echo: two"
    doc = render_export(await host.close_session.remote(sid))
    assert_turns_hold_engine_ids(doc, ["echo: one", "echo: two"])


async def test_stale_registry_entries_are_skipped_and_removed(proxy_url: str) -> None:
    registry = ray.get_actor(registry_name(APP), namespace="harbor_ray")
    live = await registry.entries.remote()
    assert len(live) == 2
    node = live[0].node
    nobody = ReplicaEntry("dead-replica", f"http://127.0.0.1:{free_port()}", "gone", node)
    # A live socket that is not the instance registered: a port taken over since.
    impostor = ReplicaEntry("reused-port", live[0].url, "another-instance", node)
    for entry in (nobody, impostor):
        await registry.register.remote(entry)
    fresh = new_host()
    try:
        relay_url = await fresh.capture_url.remote()
        sid, key = await open_session(fresh)
        for n in range(4):
            assert await ask(client(relay_url, key), f"call {n}") == f"echo: call {n}"
        assert len(render_export(await fresh.close_session.remote(sid))["turns"]) == 4
    finally:
        ray.kill(fresh)
    assert sorted(await registry.entries.remote(), key=str) == sorted(live, key=str)


async def test_an_owner_finds_a_live_replica_that_holds_a_call(proxy_url: str, owner: Any) -> None:
    """A replica names itself to owners so that they can tell whether it still lives; a
    live one's calls in flight keep their place in the budget."""
    name = replica_actor_names(APP)[0]
    replica = ray.get_actor(name, namespace=SERVE_NAMESPACE)
    holder = await replica.__ray_call__.remote(lambda _: actor_holder(SERVE_NAMESPACE))
    assert holder == f"{SERVE_NAMESPACE}/{name}"
    sid, _ = await open_session(owner, budget=1)
    assert (await owner.admit.remote(sid, holder)).admitted
    assert not (await owner.admit.remote(sid, None)).admitted


def test_serving_actors_froze_their_startup_heap(proxy_url: str, host: Any) -> None:
    """Replicas and hosts serve model calls in a process holding ~100k startup objects;
    unfrozen, every full garbage collection walks them all (30 ms) while calls wait.
    Serve freezes its replicas itself (RAY_SERVE_FREEZE_GC_ON_STARTUP); hosts do it."""
    ray.get(host.capture_url.remote())  # a host freezes once its capture runs

    def frozen(_actor: Any) -> int:
        import gc

        return gc.get_freeze_count()

    replicas = [ray.get_actor(name, namespace="serve") for name in replica_actor_names(APP)]
    counts = ray.get([actor.__ray_call__.remote(frozen) for actor in [host, *replicas]])
    assert len(counts) >= 2 and min(counts) > 10_000, counts


async def test_a_replica_killed_mid_call_loses_no_reply(
    ingress: Ingress, caplog: pytest.LogCaptureFixture
) -> None:
    proxy_url, owner = ingress.url, ingress.owner
    sessions = [await open_session(owner, budget=BUDGET) for _ in range(AGENTS)]
    received: list[list[str]] = [[] for _ in sessions]
    asked_again = 0
    replicas = {name: ray.get_actor(name, namespace="serve") for name in replica_actor_names(APP)}

    async def agent(n: int, key: str) -> None:
        nonlocal asked_again
        # The SDK retries 5xx and lost connections itself; a stream cut after its 200
        # surfaces mid-iteration instead, and a careful agent asks again.
        sdk = client(proxy_url, key, retries=6)
        for i in range(CALLS):
            content = f"agent {n} call {i}"
            for _ in range(3):
                try:
                    assert await ask(sdk, content, stream=i % 2 == 1) == f"echo: {content}"
                    break
                except (openai.APIError, httpx.HTTPError):
                    asked_again += 1
            else:
                raise AssertionError(f"{content} never answered")
            received[n].append(content)

    async def killer() -> tuple[str, int, float]:
        async with asyncio.timeout(120):
            return await kill_one_in_use()

    async def kill_one_in_use() -> tuple[str, int, float]:
        while sum(map(len, received)) < KILL_AFTER:
            await asyncio.sleep(0.01)
        if ingress.kind == "direct":
            # Through the relay: connections alternate over the replicas, and Serve
            # does not count direct calls; either replica has calls in flight.
            name = next(iter(replicas))
            ray.kill(replicas[name], no_restart=True)
            return name, -1, time.monotonic()
        # Serve's router may send most calls to one replica: kill one that has calls.
        while True:
            ongoing = {
                name: await actor.get_num_ongoing_requests.remote()
                for name, actor in replicas.items()
            }
            name = max(ongoing, key=ongoing.__getitem__)
            if ongoing[name]:
                ray.kill(replicas[name], no_restart=True)
                return name, ongoing[name], time.monotonic()
            await asyncio.sleep(0.005)

    with caplog.at_level(logging.INFO, logger="openai"):
        (victim, in_flight, killed_at), *_ = await asyncio.gather(
            killer(), *(agent(n, key) for n, (_, key) in enumerate(sessions))
        )
    sdk_retries = sum("Retrying request" in r.getMessage() for r in caplog.records)

    # Each agent spends the rest of its budget: every call of it becomes a turn, those the
    # dead replica admitted and never ended included (the old owner kept them).
    for _, key in sessions:
        sdk = client(proxy_url, key, retries=6)
        for _ in range(BUDGET + 1):
            if await ask(sdk, "fill") == BUDGET_MESSAGE:
                break

    duplicates: Counter[str] = Counter()
    for (sid, _), got in zip(sessions, received, strict=True):
        doc = render_export(await owner.close_session.remote(sid))
        indices = [t["index"] for t in doc["turns"]]
        prompts = Counter(t["request_messages"][-1]["content"] for t in doc["turns"])
        assert len(indices) == len(set(indices)), "a turn index recorded twice"
        assert len(indices) == BUDGET, "the budget lost calls that were never recorded"
        del prompts["fill"]
        assert set(prompts) == set(got), "a reply the agent received was not recorded"
        # A prompt recorded twice: the call was recorded, then its reply died with the
        # replica, and the agent's retry was recorded again (a new admission, new index).
        duplicates += prompts - Counter(set(prompts))

    replaced = _wait_for_replacement(APP, victim, timeout_s=60)
    print(
        f"\n{ingress.kind}: replica killed with {in_flight} calls in flight (-1: not "
        f"counted): SDK retries {sdk_retries}, streams asked again {asked_again}, "
        f"turns recorded twice {dict(duplicates)}, "
        f"replacement running {replaced - killed_at:.1f} s after the kill"
    )
    assert sdk_retries + asked_again > 0, "the kill hit no call in flight"


def _wait_for_replacement(app: str, victim: str, timeout_s: float) -> float:
    """When Serve runs 2 replicas again, the killed one not among them."""
    deadline = time.monotonic() + timeout_s
    while True:
        names = replica_actor_names(app)
        if len(names) == 2 and victim not in names:
            return time.monotonic()
        assert time.monotonic() < deadline, f"Serve did not replace {victim}: {names}"
        time.sleep(0.2)
