"""What `ServiceGRPOTrainer` logs of its rollouts, through TRL's own `log` (what
`report_to` sends on): one real training step of TRL on a tiny random model (CPU,
seconds), its samples from `GroupRollouts` over a stand-in client whose groups are
fabricated with known rewards, model calls, stale rollouts, masked tokens and groups
dropped or flagged for no signal."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest
from transformers import TrainerCallback

from harbor_ray.integrations.trl import (
    GroupRollouts,
    ServiceGRPOConfig,
    ServiceGRPOTrainer,
    rollout_metrics,
    task_dataset,
    verifier_reward,
)
from harbor_ray.online.wire import Group, GroupRef, SubmitReply
from tests.integrations.test_trl_correction import tiny_model, tokenizer

VERSION = 3  # serving at submit


def _group(
    slot: str, task: str, rewards: list[float], calls: list[int], oldest: list[int], **fields: Any
) -> Group:
    ids = [f"{slot}-r{i}" for i in range(len(rewards))]
    rollouts = [
        {
            "rollout_id": rid,
            "task": task,
            "reward": reward,
            "ok": True,
            "trainable": True,
            "counts": {"turns": n, "model_calls": n},
            "policy_version_min": low,
            "policy_version_max": VERSION,
        }
        for rid, reward, n, low in zip(ids, rewards, calls, oldest, strict=True)
    ]
    # Prompt [5]; completion [6, 7, 8], 7 a tool output: 2 sampled tokens each.
    sequences = [
        {
            "rollout_id": rid,
            "role": "agent",
            "input_ids": [5, 6, 7, 8],
            "loss_mask": [0, 1, 0, 1],
            "logprobs": [0.0, -2.0, 0.0, -2.5],
            "policy_versions": [None, VERSION, None, VERSION],
        }
        for rid in ids
    ]
    return Group(
        group_id=f"{slot}-final",
        request_id="q",
        task=task,
        n=len(rewards),
        metadata={},
        policy_version_min=min(oldest),
        policy_version_max=VERSION,
        finished_version=VERSION,
        staleness=VERSION - min(oldest),
        rollouts=rollouts,
        sequences=sequences,
        turns=[],
        **fields,
    )


class StandInClient:
    """The service's answers to one call of two groups: the first place's group is a
    replacement (one group without signal dropped before it) with one rollout too
    stale; the second's has no signal, flagged at the bound, and 2 tokens the service
    masked as stale."""

    def __init__(self) -> None:
        self.options: dict[str, Any] = {}
        self.pending: list[Group] = []

    def submit(self, tasks: list[Any], agent: str, **options: Any) -> SubmitReply:
        self.options = options
        slots = [f"g{i}" for i in range(len(tasks))]
        second = tasks[1].task
        self.pending = [
            _group(
                slots[0],
                second,
                [1.0, 0.0],
                [2, 3],
                [VERSION, 1],
                replaces=slots[0],
                no_signal_dropped=1,
            ),
            _group(
                slots[1],
                second,
                [0.5, 0.5],
                [1, 1],
                [VERSION, VERSION],
                replaces=slots[1],
                no_signal=True,
                masked_tokens=2,
            ),
        ]
        return SubmitReply(
            groups=[
                GroupRef(group_id=s, task=t.task, n=t.n) for s, t in zip(slots, tasks, strict=True)
            ],
            policy_version=VERSION,
        )

    def poll(self, *, max_groups: int, wait_s: float) -> list[Group]:
        batch, self.pending = self.pending, []
        return batch

    def ack(self, group_ids: list[str]) -> None:
        pass


class Logged(TrainerCallback):
    """What a `report_to` integration is handed: every `on_log`'s logs."""

    def __init__(self) -> None:
        self.logs: list[dict[str, float]] = []

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        self.logs.append(dict(logs or {}))


def test_a_training_step_logs_its_rollouts_and_its_time_through_trls_log(tmp_path: Path) -> None:
    client = StandInClient()
    rollouts = GroupRollouts(
        client,
        "terminus-2",
        max_staleness=1,  # type: ignore[arg-type]
        drop_no_signal=True,
        max_extra_groups=4,
    )
    logged = Logged()
    args = ServiceGRPOConfig(
        output_dir=str(tmp_path),
        per_device_train_batch_size=4,
        num_generations=2,
        max_steps=1,
        temperature=0.7,
        beta=0.0,
        bf16=False,
        use_cpu=True,
        report_to=[],
        logging_steps=1,
        save_strategy="no",
        max_completion_length=8,
    )
    trainer = ServiceGRPOTrainer(
        model=tiny_model(),
        reward_funcs=verifier_reward,
        args=args,
        train_dataset=task_dataset(["a", "b"]),
        processing_class=tokenizer(),
        rollout_func=rollouts,
        callbacks=[logged],
    )
    trainer.train()
    assert client.options["drop_no_signal"] is True and client.options["max_extra_groups"] == 4
    [step] = [log for log in logged.logs if "rollouts/reward_mean" in log]
    print({k: v for k, v in step.items() if k.startswith(("rollouts/", "groups/", "timing/"))})
    # Rewards 1, 0, 0.5, 0.5: mean 0.5, population std sqrt(0.125).
    assert step["rollouts/reward_mean"] == pytest.approx(0.5)
    assert step["rollouts/reward_std"] == pytest.approx(math.sqrt(0.125))
    assert step["rollouts/turns_mean"] == pytest.approx((2 + 3 + 1 + 1) / 4)
    assert step["rollouts/sampled_tokens_mean"] == pytest.approx(2.0)
    assert step["rollouts/unscored"] == 0
    assert step["rollouts/stale_dropped"] == 1  # oldest turn 1, 2 behind: past 1
    assert step["rollouts/stale_masked_tokens"] == 2  # the service's mask policy
    assert (
        step["groups/no_signal_dropped"],
        step["groups/no_signal_kept"],
        step["groups/extra_rollouts"],
    ) == (1, 1, 2)
    assert step["timing/rollout_s"] > 0 and step["timing/train_s"] > 0
    # The same figures are in the trainer's own history (log_history), as TRL keeps them.
    assert trainer.state.log_history[0]["groups/no_signal_kept"] == 1
    # Only the replacement's fresh rollout trains: the flagged group and the stale
    # sample train nothing (TRL still gets its 4 samples).
    assert rollouts.last["trainable"] == 1 and rollouts.last["rollouts"] == 4


def test_rollout_metrics_are_means_over_rollouts_and_the_counts() -> None:
    metrics = rollout_metrics(
        {
            "rollouts": 4,
            "scored": 2,
            "reward_sum": 1.0,
            "reward_sq_sum": 1.0,
            "turns": 8,
            "sampled_tokens": 40,
            "no_signal_dropped": 3,
        }
    )
    assert metrics == {
        "rollouts/reward_mean": 0.5,
        "rollouts/reward_std": 0.5,
        "rollouts/turns_mean": 2.0,
        "rollouts/sampled_tokens_mean": 10.0,
        "rollouts/unscored": 2,
        "groups/no_signal_dropped": 3,
    }
    assert rollout_metrics({"rollouts": 0, "scored": 0}) == {}
