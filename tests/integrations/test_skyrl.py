"""`harbor_ray.integrations.skyrl.ServiceGenerator` through SkyRL's own code path, on the
CPU (seconds; nothing downloaded): SkyRL's `prepare_generator_input` builds the batch;
its trainer's `generate` has the generator run it as groups over a stand-in client (the
groups fabricated as the service delivers them) and validates the output
(`validate_generator_output`); its `postprocess_generator_output`,
`convert_to_training_input` and `compute_advantages_and_returns` (GRPO) take the output
on; then one optimizer step of a
tiny random model with SkyRL's PPO policy loss and its token-level truncated importance
sampling against the recorded logprobs.

Not run: SkyRL's Ray workers (FSDP, its own inference engines), which need GPUs.
The samples and offsets are test_trl_correction's: each recorded logprob is the model's
less a known offset, so SkyRL's ratio `exp(logp_old - logp_recorded)`, capped, is known.
"""

from __future__ import annotations

import asyncio
import importlib.util
import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from skyrl.backends.skyrl_train.utils.ppo_utils import PolicyLossRegistry
from skyrl.train.config import SkyRLTrainConfig
from skyrl.train.generators.utils import prepare_generator_input
from skyrl.train.trainer import RayPPOTrainer
from skyrl.train.utils.trainer_utils import validate_generator_output

from harbor_ray.errors import TrainerError
from harbor_ray.integrations.skyrl import ServiceGenerator, generator_output, task_groups
from harbor_ray.integrations.trl import GroupRollouts
from harbor_ray.online.wire import Group, GroupRef, SubmitReply
from tests.integrations.test_trl_correction import (
    CURRENT,
    PROMPT,
    SAMPLES,
    TEMPERATURE,
    model_logprobs,
    tiny_model,
    tokenizer,
)

CAP = 3.0
N = 2  # rollouts per group: SAMPLES are two groups of two


def _group(slot: str, task: str, samples: list[Any], recorded: list[list[float | None]]) -> Group:
    """One group as the service delivers it: per rollout, its agent sequence (the
    prompt, then the completion with the sampled ids in the loss mask and their recorded
    logprobs) and its reward."""
    ids = [f"{slot}-r{i}" for i in range(len(samples))]
    rollouts = [
        {
            "rollout_id": rid,
            "task": task,
            "reward": reward,
            "ok": True,
            "trainable": True,
            "counts": {"turns": 2, "model_calls": 2},
            "policy_version_min": min(v for v in versions if v is not None),
            "policy_version_max": CURRENT,
        }
        for rid, (_, _, _, versions, reward) in zip(ids, samples, strict=True)
    ]
    sequences = [
        {
            "rollout_id": rid,
            "role": "agent",
            "input_ids": PROMPT + completion,
            "loss_mask": [0] * len(PROMPT) + mask,
            "logprobs": [0.0] * len(PROMPT) + [0.0 if lp is None else lp for lp in logprobs],
            "policy_versions": [None] * len(PROMPT) + versions,
        }
        for rid, (completion, mask, _, versions, _), logprobs in zip(
            ids, samples, recorded, strict=True
        )
    ]
    return Group(
        group_id=slot,
        request_id="q",
        task=task,
        n=len(samples),
        metadata={},
        policy_version_min=min(r["policy_version_min"] for r in rollouts),
        policy_version_max=CURRENT,
        finished_version=CURRENT,
        staleness=CURRENT - min(r["policy_version_min"] for r in rollouts),
        rollouts=rollouts,
        sequences=sequences,
        turns=[],
    )


class StandInClient:
    """The service's answers to one call: a group per task, of SAMPLES two at a time."""

    def __init__(self, recorded: list[list[float | None]]) -> None:
        self.recorded = recorded
        self.submitted: list[Any] = []
        self.options: dict[str, Any] = {}
        self.pending: list[Group] = []

    def submit(self, tasks: list[Any], agent: str, **options: Any) -> SubmitReply:
        self.submitted, self.options = tasks, options
        slots = [f"g{i}" for i in range(len(tasks))]
        self.pending = [
            _group(slot, t.task, SAMPLES[N * i : N * i + N], self.recorded[N * i : N * i + N])
            for i, (slot, t) in enumerate(zip(slots, tasks, strict=True))
        ]
        return SubmitReply(
            groups=[
                GroupRef(group_id=s, task=t.task, n=t.n) for s, t in zip(slots, tasks, strict=True)
            ],
            policy_version=CURRENT,
        )

    def poll(self, *, max_groups: int, wait_s: float) -> list[Group]:
        batch, self.pending = self.pending, []
        return batch

    def ack(self, group_ids: list[str]) -> None:
        pass


def skyrl_batch(tasks: list[str], **sampling: Any) -> tuple[Any, list[str]]:
    """SkyRL's generator input for these tasks, built by SkyRL's own function."""
    rows = [
        {
            "prompt": [{"role": "user", "content": task}],
            "env_class": None,
            "env_extras": {"task": task},
            "uid": f"uid-{i}",
        }
        for i, task in enumerate(tasks)
    ]
    return prepare_generator_input(
        rows, N, {"temperature": TEMPERATURE, "top_k": -1, **sampling}, "harbor", "train", 7
    )


def skyrl_trainer(config: SkyRLTrainConfig) -> RayPPOTrainer:
    """SkyRL's trainer, with what its batch methods read and nothing of its Ray workers
    (its __init__ builds dataloaders and GPU placement)."""
    trainer = object.__new__(RayPPOTrainer)
    trainer.cfg, trainer.tokenizer, trainer.all_metrics = config, tokenizer(), {}
    trainer.dispatch = SimpleNamespace(get_lcm_dp_size=lambda: 1)
    return trainer


def config(tis: str | None) -> SkyRLTrainConfig:
    cfg = SkyRLTrainConfig()
    cfg.generator.n_samples_per_prompt = N
    cfg.trainer.train_batch_size = cfg.trainer.policy_mini_batch_size = 2
    cfg.trainer.algorithm.off_policy_correction.tis_ratio_type = tis
    cfg.trainer.algorithm.off_policy_correction.token_tis_ratio_clip_high = CAP
    return cfg


def recorded_by(model: Any) -> list[list[float | None]]:
    """What the engine recorded: the model's logprob less the sample's offset."""
    return [
        [None if off is None else lp - off for lp, off in zip(lps, sample[2], strict=True)]
        for lps, sample in zip(model_logprobs(model), SAMPLES, strict=True)
    ]


def test_skyrl_takes_the_services_groups_as_its_training_batch() -> None:
    model = tiny_model()
    client = StandInClient(recorded_by(model))
    trainer = skyrl_trainer(config("token"))
    trainer.generator = ServiceGenerator(
        GroupRollouts(client, "terminus-2", filler_id=0, max_tokens=16)
    )  # type: ignore[arg-type]
    batch, uids = skyrl_batch(["a", "b"])
    # SkyRL's trainer step: its generate (the generator's, then its validation).
    output = asyncio.run(trainer.generate(batch))
    # One group per SkyRL prompt, of n_samples_per_prompt rollouts, at SkyRL's sampling.
    assert [(t.task, t.n) for t in client.submitted] == [("a", N), ("b", N)]
    assert client.options["sampling"] == {"temperature": TEMPERATURE, "max_tokens": 16}
    assert client.options["metadata"] == {"trl_global_step": 7}
    validate_generator_output(len(uids), output)
    assert output["response_ids"] == [ids for ids, *_ in SAMPLES]
    assert output["loss_masks"] == [mask for _, mask, *_ in SAMPLES]
    assert output["rewards"] == [reward for *_, reward in SAMPLES]
    # The call's figures reach SkyRL's metrics, which its tracker logs.
    assert trainer.all_metrics["rollouts/turns_mean"] == 2.0
    assert trainer.all_metrics["rollouts/reward_mean"] == pytest.approx(1.75 / 4)

    output, uids = trainer.postprocess_generator_output(output, uids)
    batch = trainer.convert_to_training_input(output, uids)
    batch["values"] = None
    batch = trainer.compute_advantages_and_returns(batch)
    # GRPO per group: rewards (1, 0) and (0.5, 0.25), each normalised by its own std.
    # SkyRL right-aligns the responses (pads on the left), so every one ends last.
    first = batch["advantages"][:, -1].tolist()
    assert first[0] == pytest.approx(-first[1]) and first[0] > 0
    assert first[2] == pytest.approx(-first[3]) and first[2] > 0
    assert batch["loss_mask"].tolist() == [[0] * (5 - len(mask)) + mask for _, mask, *_ in SAMPLES]

    # One optimizer step with SkyRL's policy loss: the recorded logprobs go in as
    # `rollout_logprobs`, and SkyRL weighs each token by min(exp(offset), CAP).
    loss_fn = PolicyLossRegistry.get("regular")
    log_probs = response_logprobs(
        model, batch["sequences"], batch["attention_mask"], batch["response_mask"].shape[1]
    )
    old = log_probs.detach()
    mask = batch["loss_mask"].float()
    loss, metrics = loss_fn(
        log_probs,
        old,
        batch["advantages"],
        trainer.cfg.trainer.algorithm,
        loss_mask=mask,
        rollout_logprobs=batch["rollout_logprobs"],
    )
    offsets = [off for _, m, offs, *_ in SAMPLES for off, keep in zip(offs, m, strict=True) if keep]
    assert metrics["tis_token_clip_high_ratio"] == pytest.approx(
        sum(math.exp(o) > CAP for o in offsets) / len(offsets)
    )
    # At the old policy the PPO ratio is 1, so the loss is -sum(tis * advantage).
    tis = torch.clamp(torch.exp(old - batch["rollout_logprobs"]), max=CAP)
    expected = [
        [1.0] * (5 - len(offs)) + [1.0 if o is None else min(math.exp(o), CAP) for o in offs]
        for _, _, offs, *_ in SAMPLES
    ]
    torch.testing.assert_close(tis * mask, torch.tensor(expected) * mask, atol=1e-4, rtol=0)
    assert loss.item() == pytest.approx(-(tis * batch["advantages"] * mask).sum().item(), rel=1e-5)
    uncorrected, _ = loss_fn(
        log_probs,
        old,
        batch["advantages"],
        config(None).trainer.algorithm,
        loss_mask=mask,
        rollout_logprobs=batch["rollout_logprobs"],
    )
    assert uncorrected.item() != pytest.approx(loss.item(), rel=1e-3)
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loss.backward()
    optimizer.step()
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))


def response_logprobs(
    model: Any, sequences: torch.Tensor, attention: torch.Tensor, length: int
) -> torch.Tensor:
    """The model's logprob of each of the last `length` tokens at the sampling
    temperature, as SkyRL's workers score them (left-padded sequences, positions
    counted from each one's first real token)."""
    positions = (attention.cumsum(-1) - 1).clamp(min=0)
    logits = (
        model(input_ids=sequences, attention_mask=attention, position_ids=positions)
        .logits[:, -length - 1 : -1]
        .float()
        / TEMPERATURE
    )
    return torch.log_softmax(logits, dim=-1).gather(2, sequences[:, -length:, None])[..., 0]


def test_the_example_runs_skyrls_generation_step() -> None:
    path = Path(__file__).parents[2] / "examples" / "skyrl_generate.py"
    spec = importlib.util.spec_from_file_location("skyrl_generate", path)
    assert spec is not None and spec.loader is not None
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    client = StandInClient(recorded_by(tiny_model()))
    generator = ServiceGenerator(
        GroupRollouts(
            client,
            "terminus-2",  # type: ignore[arg-type]
            filler_id=0,
        )
    )
    step = example.generate_step(generator, ["a", "b"], N, TEMPERATURE)
    assert [(row["task"], row["reward"], row["trained_tokens"]) for row in step["rows"]] == [
        (task, reward, sum(mask))
        for task, (_, mask, *_, reward) in zip("aabb", SAMPLES, strict=True)
    ]
    assert step["rollout_metrics"]["rollouts/reward_mean"] == pytest.approx(1.75 / 4)


@pytest.mark.parametrize(
    ("rows", "why"),
    [
        ({"env_extras": [{"task": "a"}, {}], "ids": ["u", "u"]}, "no task name"),
        ({"env_extras": [{"task": "a"}, {"task": "b"}], "ids": ["u", "u"]}, "no whole number"),
        ({"env_extras": [{"task": "a"}] * 3, "ids": ["u", "u", "v"]}, "no whole number"),
        ({"env_extras": [{"task": "a"}] * 3, "ids": ["u", "v", "u"]}, "no whole number"),
        ({"env_extras": None, "ids": ["u"]}, "needs env_extras"),
    ],
)
def test_batches_that_are_not_groups_of_named_tasks_are_refused(rows: dict, why: str) -> None:
    ids = [SimpleNamespace(instance_id=i, repetition_id=0) for i in rows["ids"]]
    batch: Any = {
        "prompts": [[]] * len(ids),
        "env_extras": rows["env_extras"],
        "trajectory_ids": ids,
    }
    with pytest.raises(TrainerError, match=why):
        task_groups(batch)


def test_an_unscored_sample_with_trained_tokens_is_refused() -> None:
    columns = {
        "prompt_ids": [[1]],
        "completion_ids": [[2]],
        "logprobs": [[-1.0]],
        "env_mask": [[1]],
        "reward": [None],
    }
    with pytest.raises(TrainerError, match="unscored"):
        generator_output(columns)


def test_the_generator_needs_a_filler_id() -> None:
    with pytest.raises(TrainerError, match="filler_id"):
        ServiceGenerator(GroupRollouts(StandInClient([]), "terminus-2"))  # type: ignore[arg-type]
