"""One policy trained through several harnesses at once: one real training step of
TRL on a tiny random model (CPU, seconds), its prompts `task_dataset(tasks, harnesses)`,
its samples from `GroupRollouts` over a stand-in client that runs each group under the
agent its submit named, with rewards, model calls and sampled tokens set per (task,
harness) by the test. TRL's groups (its `num_generations` samples in a row) must each be
one task under one harness, and the per-harness figures in TRL's log those of that
harness's rollouts alone."""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Any

import pytest

from harbor_ray.errors import TrainerError
from harbor_ray.integrations.trl import (
    GroupRollouts,
    ServiceGRPOConfig,
    ServiceGRPOTrainer,
    harness_prompt,
    task_dataset,
)
from harbor_ray.online.wire import Group, GroupRef, SubmitReply, TaskRequest
from tests.integrations.test_trl_correction import tiny_model, tokenizer
from tests.integrations.test_trl_logs import Logged

VERSION = 2
N = 2  # num_generations
# Each (task, harness)'s rewards, one per rollout of its group.
REWARDS = {
    ("a", "terminus-2"): [1.0, 0.0],
    ("b", "terminus-2"): [0.5, 0.0],
    ("a", "codex"): [0.25, 0.0],
    ("b", "codex"): [1.0, 0.75],
}
TURNS = {"terminus-2": 3, "codex": 1}  # model calls per rollout
SAMPLED = {"terminus-2": 2, "codex": 3}  # tokens each rollout's model sampled


class HarnessClient:
    """Runs each asked group under its task's agent (else the request's), as the
    service does, and keeps what was asked."""

    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []
        self.pending: list[Group] = []

    def submit(self, tasks: list[TaskRequest], agent: str, **options: Any) -> SubmitReply:
        refs = []
        for i, request in enumerate(tasks):
            ran = request.agent or agent
            self.asked.append((request.task, ran))
            slot = f"g{len(self.asked)}-{i}"
            self.pending.append(_group(slot, request.task, ran))
            refs.append(GroupRef(group_id=slot, task=request.task, n=request.n))
        return SubmitReply(groups=refs, policy_version=VERSION)

    def poll(self, *, max_groups: int, wait_s: float) -> list[Group]:
        batch, self.pending = self.pending, []
        return batch

    def ack(self, group_ids: list[str]) -> None:
        pass


def _group(slot: str, task: str, agent: str) -> Group:
    rewards = REWARDS[task, agent]
    ids = [f"{slot}-r{i}" for i in range(len(rewards))]
    rollouts = [
        {
            "rollout_id": rid,
            "task": task,
            "agent": agent,
            "reward": reward,
            "ok": True,
            "trainable": True,
            "counts": {"turns": TURNS[agent], "model_calls": TURNS[agent]},
            "policy_version_min": VERSION,
            "policy_version_max": VERSION,
        }
        for rid, reward in zip(ids, rewards, strict=True)
    ]
    # Prompt [5]; then SAMPLED[agent] sampled tokens, each after a tool output.
    mask = [0] + [0, 1] * SAMPLED[agent]
    sequences = [
        {
            "rollout_id": rid,
            "role": "agent",
            "input_ids": [5 + i % 7 for i in range(len(mask))],
            "loss_mask": mask,
            "logprobs": [-1.0 if m else 0.0 for m in mask],
            "policy_versions": [VERSION if m else None for m in mask],
        }
        for rid in ids
    ]
    return Group(
        group_id=slot,
        request_id="q",
        task=task,
        n=len(rewards),
        metadata={},
        policy_version_min=VERSION,
        policy_version_max=VERSION,
        finished_version=VERSION,
        staleness=0,
        rollouts=rollouts,
        sequences=sequences,
        turns=[],
    )


class SeenByReward:
    """A reward function that keeps what TRL hands it, in TRL's order: a group is
    `num_generations` samples in a row there (TRL's advantages: rewards.view(-1, n))."""

    __name__ = "seen_by_reward"

    def __init__(self) -> None:
        self.seen: list[tuple[str, str, str]] = []

    def __call__(
        self,
        completions: list[Any],
        reward: list[float],
        agent: list[str],
        task: list[str],
        group_id: list[str],
        **_: Any,
    ) -> list[float]:
        self.seen += zip(group_id, task, agent, strict=True)
        return list(reward)


def test_each_grpo_group_is_one_task_under_one_harness_with_its_own_figures(tmp_path: Path) -> None:
    client = HarnessClient()
    rewards, logged = SeenByReward(), Logged()
    args = ServiceGRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=2 * len(REWARDS),
        num_generations=N,
        max_steps=1,
        temperature=0.7,
        beta=0.0,
        bf16=False,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        max_completion_length=16,
    )
    trainer = ServiceGRPOTrainer(
        model=tiny_model(),
        reward_funcs=rewards,
        args=args,
        train_dataset=task_dataset(["a", "b"], ["terminus-2", "codex"]),
        processing_class=tokenizer(),
        rollout_func=GroupRollouts(client, "terminus-2"),  # type: ignore[arg-type]
        callbacks=[logged],
    )
    trainer.train()
    # Every (task, harness) was asked once, each under its own harness.
    assert sorted(client.asked) == sorted(REWARDS)
    # TRL's groups, as its advantages take them: each one service group, so one task
    # under one harness, and every harness's groups are its own.
    assert len(rewards.seen) == N * len(REWARDS)
    blocks = [rewards.seen[i : i + N] for i in range(0, len(rewards.seen), N)]
    assert all(len(set(block)) == 1 for block in blocks), blocks
    assert sorted((task, agent) for _, task, agent in (b[0] for b in blocks)) == sorted(REWARDS)

    [step] = [log for log in logged.logs if "rollouts/reward_mean" in log]
    print({k: v for k, v in step.items() if k.startswith("harness/")})
    for harness in TURNS:
        mine = [r for (_, agent), group in REWARDS.items() if agent == harness for r in group]
        prefix = f"harness/{harness}/"
        assert step[prefix + "rollouts"] == len(mine)
        assert step[prefix + "reward_mean"] == pytest.approx(statistics.fmean(mine))
        assert step[prefix + "reward_std"] == pytest.approx(statistics.pstdev(mine))
        assert step[prefix + "turns_mean"] == pytest.approx(TURNS[harness])
        assert step[prefix + "sampled_tokens_mean"] == pytest.approx(SAMPLED[harness])
        assert step[prefix + "unscored"] == 0
    # The run's own figures are over every harness.
    everyone = [r for group in REWARDS.values() for r in group]
    assert step["rollouts/reward_mean"] == pytest.approx(statistics.fmean(everyone))


def test_a_prompt_names_its_harness_after_the_last_mark() -> None:
    assert harness_prompt("hello-file", "codex") == "hello-file @ codex"
    assert task_dataset(["a"], ["codex", "terminus-2"])["prompt"] == ["a @ codex", "a @ terminus-2"]
    for bad in ("", "a b", "x@y"):
        with pytest.raises(TrainerError, match="agent name"):
            harness_prompt("t", bad)
    with pytest.raises(TrainerError, match="distinct"):
        task_dataset(["a"], ["codex", "codex"])


def test_a_group_the_service_ran_under_another_harness_is_refused() -> None:
    """Its baseline would mix harnesses: refused, not trained."""

    class WrongHarness(HarnessClient):
        def submit(self, tasks: list[TaskRequest], agent: str, **options: Any) -> SubmitReply:
            return super().submit([TaskRequest(task=t.task, n=t.n) for t in tasks], agent)

    rollouts = GroupRollouts(WrongHarness(), "terminus-2")  # type: ignore[arg-type]
    trainer = type(
        "T",
        (),
        {
            "num_generations": N,
            "model": type("M", (), {"training": True})(),
            "args": type("A", (), {"temperature": 0.7})(),
            "state": type("S", (), {"global_step": 0})(),
            "processing_class": None,
        },
    )()
    with pytest.raises(TrainerError, match="asked of codex but its rows name"):
        rollouts([harness_prompt("a", "codex")] * N, trainer)
