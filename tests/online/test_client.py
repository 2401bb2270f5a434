"""`harbor_ray.client` against the running controller app over HTTP: the controller
actor runs the stub agent on rollout hosts, through the capture proxy deployment,
against the fake engine."""

from __future__ import annotations

import asyncio
import math
import time

import httpx
import pytest

from harbor_ray.client import AsyncClient, Client, ClientError, Retry, group_call_records
from harbor_ray.online.wire import Group
from tests.online.conftest import KEY, stub_agent

pytestmark = pytest.mark.integration

TASK = "hello-file"


def assert_records_are_the_turns(group: Group) -> None:
    """The TRL records of `group` hold exactly its turns' ids and logprobs."""
    records = group_call_records([group])
    turns = {(t["rollout_id"], t["index"]): t for t in group.turns}
    rewards = {r["rollout_id"]: r["reward"] for r in group.rollouts}
    assert len(records) == len(turns) == 4  # two calls per stub rollout, all trainable
    for record in records:
        turn = turns[(record["rollout_id"], record["turn"])]
        assert record["prompt_ids"] == turn["prompt_ids"]
        assert record["completion_ids"] == turn["token_ids"]
        assert len(record["logprobs"]) == len(turn["token_ids"]) == len(record["env_mask"])
        for logprob, mask, given in zip(
            record["logprobs"], record["env_mask"], turn["logprobs"], strict=True
        ):
            assert mask == (given is not None and math.isfinite(given))
            assert logprob == (given if mask else 0.0)
        assert sum(record["env_mask"]) > 0  # the fake engine gives logprobs
        assert record["reward"] == rewards[record["rollout_id"]] == 1.0
        assert record["group_id"] == group.group_id and record["task"] == TASK


def test_submit_take_groups_ack_and_redelivery(service_factory) -> None:
    service = service_factory("client-flow")
    with Client(service.url, KEY) as client:
        assert client.health() is True
        submitted = client.submit(
            {TASK: 2}, "terminus-2", request_id="flow-1", metadata={"step": 0}
        )
        assert client.submit({TASK: 2}, "terminus-2", request_id="flow-1") == submitted
        (ref,) = submitted.groups
        assert ref.n == 2 and submitted.policy_version == 0

        # A caller that leaves holding a batch has not acknowledged it: it comes again.
        for batch in client.groups(wait_s=5):
            (held,) = batch
            break
        assert held.group_id == ref.group_id and held.metadata == {"step": 0}
        taken = [g for batch in client.groups(wait_s=5, total=1) for g in batch]
        assert [g.group_id for g in taken] == [ref.group_id]  # delivered again, now acked
        stats = client.stats()
        assert (stats.finished, stats.delivered, stats.groups_ready) == (2, 1, 0)
        assert client.ack([ref.group_id]).unknown == [ref.group_id]  # acked already
        assert client.policy().version == 0
        assert_records_are_the_turns(taken[0])


def test_the_async_client_and_weight_updates(service_factory) -> None:
    service = service_factory("client-async")

    async def run() -> list[Group]:
        async with AsyncClient(service.url, KEY) as client:
            assert await client.health()
            updated = await client.update_weights("/ckpt/1", 1)
            assert updated.version == 1 and [r.version for r in updated.replicas] == [1, 1]
            with pytest.raises(ClientError) as stale:
                await client.update_weights("/ckpt/1", 1)
            assert (stale.value.status, stale.value.field) == (409, "version")
            assert (await client.policy()).version == 1
            submitted = await client.submit({TASK: 2}, "terminus-2")
            assert submitted.policy_version == 1
            groups = [g async for batch in client.groups(wait_s=5, total=1) for g in batch]
            assert (await client.stats()).delivered == 1
            return groups

    (group,) = asyncio.run(run())
    assert {(t["policy_version_start"], t["policy_version_end"]) for t in group.turns} == {(1, 1)}
    assert_records_are_the_turns(group)


def test_429_is_retried_after_retry_after_then_accepted(service_factory) -> None:
    service = service_factory(
        "client-429", capacity=2, retry_after_s=1, work=stub_agent(2, think_s=1.0)
    )
    statuses: list[int] = []
    http = httpx.Client(event_hooks={"response": [lambda r: statuses.append(r.status_code)]})
    with Client(service.url, KEY, http=http, retry=Retry(attempts=30)) as client:
        client.submit({TASK: 2}, "terminus-2")  # fills the capacity for ~2 s
        started = time.monotonic()
        second = client.submit({TASK: 2}, "terminus-2")
        assert time.monotonic() - started >= 1.0  # it waited what Retry-After said
        assert statuses[0] == 202 and statuses[1] == 429 and statuses[-1] == 202
        assert second.groups[0].n == 2
        with pytest.raises(ClientError) as refused:
            Client(service.url, KEY, retry=Retry(attempts=0)).submit({TASK: 2}, "terminus-2")
        assert refused.value.status == 429


def test_refusals_surface_as_client_errors(service_factory) -> None:
    service = service_factory("client-refusals")
    with pytest.raises(ClientError) as wrong_key:
        Client(service.url, "not-the-key").stats()
    assert wrong_key.value.status == 401 and "key is wrong" in str(wrong_key.value)
    with Client(service.url, KEY) as client:
        with pytest.raises(ClientError) as unknown:
            client.submit({"no-such-task": 1}, "terminus-2")
        assert (unknown.value.status, unknown.value.field) == (404, "tasks[0].task")
        with pytest.raises(ClientError) as malformed:
            next(client.groups(wait_s=1_000))
        assert (malformed.value.status, malformed.value.field) == (400, "wait_s")
        stats = client.stats()
        assert stats.queued == stats.in_flight == stats.finished == 0  # nothing started


def test_cancel_through_the_client(service_factory) -> None:
    service = service_factory("client-cancel", work=stub_agent(200, think_s=0.5))
    with Client(service.url, KEY) as client:
        (ref,) = client.submit({TASK: 2}, "terminus-2").groups
        assert client.cancel(ref.group_id).cancelled == 2
        assert client.cancel(ref.group_id).cancelled == 0  # a resent cancel: nothing more
        stats = client.stats()
        assert stats.errors == {"cancelled": 2} and stats.cancelled == 1
        with pytest.raises(ClientError) as unknown:
            client.cancel("nope")
        assert (unknown.value.status, unknown.value.field) == (404, "group_id")
