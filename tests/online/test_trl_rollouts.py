"""`harbor_ray.integrations.trl.GroupRollouts` against the running controller (the stub
agent on rollout hosts, through the capture proxy deployment, against the fake engine):
TRL's prompts become groups, and the groups one sample per rollout in TRL's order.
The trainer is a stand-in with the attributes TRL's GRPOTrainer hands a `rollout_func`;
tests/integrations/test_trl_engine.py trains with the real one."""

from __future__ import annotations

import time
import zlib
from types import SimpleNamespace
from typing import Any

import pytest

from harbor_ray.capture.proxy.fake_engine import IM_END, IM_START
from harbor_ray.client import Client
from harbor_ray.errors import TrainerError
from harbor_ray.integrations.trl import GroupRollouts, harness_prompt, verifier_reward
from harbor_ray.online.wire import Group
from tests.fixtures.stub_agent import chat_agent
from tests.online.conftest import KEY, stub_agent

pytestmark = pytest.mark.integration

TRL_KEYS = {"prompt_ids", "completion_ids", "logprobs", "env_mask", "reward"}


def trainer(n: int, step: int = 0, temperature: float = 0.7) -> Any:
    return SimpleNamespace(
        num_generations=n,
        num_generations_eval=n,
        model=SimpleNamespace(training=True),
        args=SimpleNamespace(temperature=temperature, top_p=1.0, top_k=0, min_p=None),
        state=SimpleNamespace(global_step=step),
        processing_class=SimpleNamespace(pad_token_id=2),
    )


def reward_of(rollout_id: str, task: str = "") -> float:
    """A reward that differs from rollout to rollout, known from its id alone. The ids of
    one group's rollouts differ in one character, which a CRC always tells apart, so they
    never tie (taken modulo 97, two tied about once in a hundred groups: a group with
    signal was dropped as having none)."""
    return zlib.crc32(rollout_id.encode()) / 0xFFFFFFFF


def first_prompt(prompt_ids: list[int]) -> str:
    """The text of a sample's first message (the fake engine's ids are bytes + 3)."""
    first = prompt_ids[prompt_ids.index(IM_START) + 1 : prompt_ids.index(IM_END)]
    return bytes(i - 3 for i in first).decode()


def test_prompts_become_groups_and_one_sample_per_rollout_in_trls_order(
    service_factory, fake_engine
) -> None:
    engine, _ = fake_engine
    service = service_factory("trl-rollouts", work=stub_agent(2, reward=reward_of))
    with Client(service.url, KEY) as client:
        # A group someone else asked for, finished before the trainer's call: not taken
        # for the trainer's, kept apart.
        [other] = client.submit({"make-directory": 1}, "terminus-2").groups
        deadline = time.monotonic() + 120
        while client.stats().groups_ready < 1:
            assert time.monotonic() < deadline, client.stats()
            time.sleep(0.1)
        rollouts = GroupRollouts(client, "terminus-2", max_tokens=16, wait_s=2)
        prompts = ["count-words"] * 2 + ["hello-file"] * 2 + ["count-words"] * 2
        columns = rollouts(prompts, trainer(2))
    assert columns.keys() >= TRL_KEYS
    assert columns["task"] == prompts
    assert len(set(columns["group_id"])) == 3 and columns["group_id"][0] == columns["group_id"][1]
    # Each sample carries its own rollout's reward, and its rollout's tokens: the
    # stub's first message names its rollout.
    rewards = [reward_of(r) for r in columns["rollout_id"]]
    assert verifier_reward(completions=[], **columns) == columns["reward"] == rewards
    assert len(set(rewards)) > 1
    assert [first_prompt(p) for p in columns["prompt_ids"]] == [
        f"user\ntask {r}: begin" for r in columns["rollout_id"]
    ]
    assert all(columns["trainable"])
    for prompt, completion, logprobs, mask in zip(
        columns["prompt_ids"],
        columns["completion_ids"],
        columns["logprobs"],
        columns["env_mask"],
        strict=True,
    ):
        assert prompt and len(completion) == len(logprobs) == len(mask)
        assert mask[0] == 1 and 0 in mask  # the stub's second prompt sits in the completion
        assert [lp is not None for lp in logprobs] == [bool(m) for m in mask]
    # TRL's sampling reached the engine; the rollouts' own max_tokens too.
    sent = engine.calls[-1]
    assert (sent["temperature"], sent["top_p"], sent["top_k"], sent["max_tokens"]) == (
        0.7,
        1.0,
        0,
        16,
    )
    assert [g.group_id for g in rollouts.unclaimed] == [other.group_id]
    assert rollouts.last["groups"] == 3 and rollouts.last["trainable"] == 6


@pytest.mark.parametrize(
    ("prompts", "why"),
    [
        (["a", "a", "b"], "no whole number of groups of 2"),
        (["a", "b", "b", "b"], "repeated num_generations"),
        ([[{"role": "user", "content": "hi"}]] * 2, "task name"),
    ],
)
def test_prompts_that_name_no_groups_are_refused(prompts: list, why: str) -> None:
    rollouts = GroupRollouts(Client("http://127.0.0.1:9", "key"), "terminus-2")
    with pytest.raises(TrainerError, match=why):
        rollouts(prompts, trainer(2))


def group(rewards: list[float | None], versions: list[int], *, ok: bool = True) -> Group:
    rollouts = [
        {
            "rollout_id": f"r{i}",
            "task": "t",
            "reward": reward,
            "ok": ok,
            "policy_version_min": version,
            "policy_version_max": version,
        }
        for i, (reward, version) in enumerate(zip(rewards, versions, strict=True))
    ]
    sequences = [
        {
            "rollout_id": f"r{i}",
            "role": "agent",
            "input_ids": [5, 6, 7, 8],
            "loss_mask": [0, 1, 0, 1],
            "logprobs": [0.0, -0.5, 0.0, -0.25],
        }
        for i in range(len(rewards))
    ]
    return Group(
        group_id="g",
        request_id="q",
        task="t",
        n=len(rewards),
        metadata={},
        policy_version_min=min(versions),
        policy_version_max=max(versions),
        finished_version=max(versions),
        staleness=0,
        rollouts=rollouts,
        sequences=sequences,
        turns=[],
    )


def trained(samples: list[dict]) -> list[bool]:
    return [any(s["env_mask"]) and s["trainable"] for s in samples]


def test_a_group_with_an_unscored_rollout_trains_nothing() -> None:
    rollouts = GroupRollouts(Client("http://127.0.0.1:9", "key"), "terminus-2")
    assert trained(rollouts._samples(group([1.0, 0.0], [3, 3]), 2, 3, 0)) == [True, True]
    unscored = rollouts._samples(group([1.0, None], [3, 3]), 2, 3, 0)
    assert trained(unscored) == [False, False]
    assert unscored[0]["logprobs"] == [None, None, None]  # nothing left to compare with
    assert trained(rollouts._samples(group([1.0, 0.0], [3, 3], ok=False), 2, 3, 0)) == [
        False,
        False,
    ]


def test_samples_older_than_max_staleness_train_nothing() -> None:
    rollouts = GroupRollouts(Client("http://127.0.0.1:9", "key"), "terminus-2", max_staleness=1)
    assert trained(rollouts._samples(group([1.0, 0.0], [2, 1]), 2, 3, 0)) == [True, False]
    with pytest.raises(TrainerError, match="has 2 rollouts, not 3"):
        rollouts._samples(group([1.0, 0.0], [3, 3]), 3, 3, 0)


def test_the_mask_policy_trains_the_fresh_tokens_of_a_stale_sample() -> None:
    rollouts = GroupRollouts(
        Client("http://127.0.0.1:9", "key"), "terminus-2", max_staleness=1, stale_policy="mask"
    )
    stale = group([1.0, 0.0], [3, 1])
    # The second rollout's one call crossed updates: its first sampled token is version
    # 1's (2 behind 3: stale), its last version 3's.
    stale.sequences[1]["policy_versions"] = [None, 1, None, 3]
    samples = rollouts._samples(stale, 2, 3, 0)
    assert [s["env_mask"] for s in samples] == [[1, 0, 1], [0, 0, 1]]
    assert samples[1]["policy_versions"] == [1, None, 3] and trained(samples) == [True, True]
    # The version serving at submit goes with every sample, for the trainer's staleness log.
    assert [s["policy_version"] for s in samples] == [3, 3]


def test_groups_that_do_not_finish_in_timeout_s_are_cancelled_and_refused(service_factory) -> None:
    """The wait is bounded between long polls, not only once groups arrive."""
    service = service_factory("trl-timeout", work=chat_agent(2, think_s=600))
    with Client(service.url, KEY) as client:
        rollouts = GroupRollouts(client, "terminus-2", timeout_s=2, wait_s=1)
        with pytest.raises(TrainerError, match="1 of 1 groups did not finish in 2 s"):
            rollouts(["hello-file"] * 2, trainer(2))
        stats = client.stats()
    assert stats.in_flight == stats.queued == 0, stats


def flat_for_hello_file(rollout_id: str, task: str) -> float:
    """hello-file's rollouts all get 1.0 (no signal); other tasks' rewards vary."""
    return 1.0 if task == "hello-file" else reward_of(rollout_id)


def test_groups_without_signal_are_dropped_and_replaced_to_a_full_batch(service_factory) -> None:
    """DAPO's dynamic sampling: hello-file's groups (rewards all equal) are dropped by
    the service and replaced by count-words groups in their places, so TRL's call still
    gets one group per prompt, each with signal."""
    service = service_factory("trl-no-signal", work=stub_agent(1, reward=flat_for_hello_file))
    with Client(service.url, KEY) as client:
        rollouts = GroupRollouts(
            client, "terminus-2", max_tokens=16, wait_s=2, drop_no_signal=True, max_extra_groups=4
        )
        prompts = ["hello-file"] * 2 + ["count-words"] * 2 + ["hello-file"] * 2
        columns = rollouts(prompts, trainer(2))
        stats = client.stats()
    # Three groups, as asked, each with signal: hello-file's two were replaced.
    assert len(columns["reward"]) == 6 and len(set(columns["group_id"])) == 3
    for start in range(0, 6, 2):
        assert columns["reward"][start] != columns["reward"][start + 1]
    assert set(columns["task"]) == {"count-words"} and all(columns["trainable"])
    assert (
        stats.no_signal_dropped,
        stats.signal_kept,
        stats.no_signal_delivered,
        stats.extra_rollouts,
    ) == (2, 3, 0, 4), stats
    figures = rollouts.last
    assert (figures["no_signal_dropped"], figures["extra_rollouts"], figures["no_signal_kept"]) == (
        2,
        4,
        0,
    )
    assert figures["turns"] == 6  # one model call each, from the rows' counts


def test_past_max_extra_groups_a_group_without_signal_comes_back_and_trains_nothing(
    service_factory,
) -> None:
    service = service_factory("trl-no-signal-bound", work=stub_agent(1, reward=flat_for_hello_file))
    with Client(service.url, KEY) as client:
        rollouts = GroupRollouts(
            client, "terminus-2", max_tokens=16, wait_s=2, drop_no_signal=True, max_extra_groups=0
        )
        columns = rollouts(["hello-file"] * 2 + ["count-words"] * 2, trainer(2))
        stats = client.stats()
    assert columns["task"] == ["hello-file"] * 2 + ["count-words"] * 2
    assert columns["trainable"] == [False, False, True, True]
    assert not any(columns["env_mask"][0]) and any(columns["env_mask"][2])
    assert (stats.no_signal_dropped, stats.no_signal_delivered, stats.signal_kept) == (0, 1, 1), (
        stats
    )
    assert rollouts.last["no_signal_kept"] == 1


def test_mixed_harnesses_run_each_group_under_its_own_even_when_replaced(service_factory) -> None:
    """One call, two harnesses: each group runs its prompt's agent (the stub writes the
    agent it was given into each row, which GroupRollouts checks), and a group dropped
    for no signal is replaced under the same harness, so no group mixes harnesses."""
    service = service_factory("trl-harnesses", work=stub_agent(1, reward=flat_for_hello_file))
    with Client(service.url, KEY) as client:
        rollouts = GroupRollouts(
            client,
            "terminus-2",
            max_tokens=16,
            wait_s=2,
            drop_no_signal=True,
            max_extra_groups=4,
            replacement_tasks=["count-words"],
        )
        prompts = (
            [harness_prompt("hello-file", "codex")] * 2
            + [harness_prompt("count-words", "claude-code")] * 2
            + ["count-words"] * 2
        )
        columns = rollouts(prompts, trainer(2))
    assert columns["agent"] == ["codex"] * 2 + ["claude-code"] * 2 + ["terminus-2"] * 2
    # hello-file under codex had no signal: its place went to count-words, still codex.
    assert columns["task"] == ["count-words"] * 6
    assert rollouts.last["no_signal_dropped"] == 1
    for start in range(0, 6, 2):
        assert len({columns["group_id"][start], columns["group_id"][start + 1]}) == 1
    for harness in ("codex", "claude-code", "terminus-2"):
        mine = [r for r, a in zip(columns["reward"], columns["agent"], strict=True) if a == harness]
        assert rollouts.last[f"harness/{harness}/reward_sum"] == pytest.approx(sum(mine))
        assert rollouts.last[f"harness/{harness}/rollouts"] == 2
