"""SkyRL's trainer driven by the online service: `ServiceGenerator`, a SkyRL
`GeneratorInterface` whose `generate(input_batch)` runs each GRPO group of SkyRL's batch
as one group on the service and returns SkyRL's `GeneratorOutput`: one row per rollout
(the agent's whole conversation, split at its first sampled token), with the ids the
model sampled in `loss_masks` and their recorded logprobs in `rollout_logprobs`, which
SkyRL's off-policy correction (`trainer.algorithm.off_policy_correction`) weighs against.

The groups are `GroupRollouts`' (harbor_ray.integrations.trl): the same submit options,
staleness policy, unscored and no-signal rules and figures; this module only maps SkyRL's
input batch onto them and their samples onto SkyRL's output. docs/trainers.md, "SkyRL".
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from typing import Any

from skyrl.train.generators.base import GeneratorInput, GeneratorInterface, GeneratorOutput

from harbor_ray.errors import TrainerError
from harbor_ray.integrations.figures import rollout_metrics
from harbor_ray.integrations.trl import GroupRollouts

__all__ = ["ServiceGenerator", "generator_output", "task_groups"]

# SkyRL's sampling_params that shape the sampling distribution, as `GroupRollouts` reads
# them off a TRL config. vLLM's "no top-k" is -1, which the service leaves to the engine.
_SAMPLING = ("temperature", "top_p", "top_k", "min_p")


class ServiceGenerator(GeneratorInterface):
    """SkyRL's generator for rollouts of the online service, through `rollouts` (a
    `GroupRollouts`, with its agent, submit options and `max_staleness`).

    Each prompt's `env_extras[task_key]` names its task; SkyRL repeats each prompt
    `n_samples_per_prompt` times in a row with one `trajectory_ids` instance id, and each
    such block becomes one group of that many rollouts. The sampling settings are
    SkyRL's `sampling_params` (temperature, top_p, top_k, min_p); the per-call
    `max_tokens` is `GroupRollouts`'. `rollouts.last` holds the call's figures, and the
    output's `rollout_metrics` their logged form (`rollouts/*`, `groups/*`), which SkyRL
    logs with its own.

    Calls are served one at a time: `GroupRollouts` polls for whatever groups the service
    delivers, so two calls at once (SkyRL's fully async trainer generates per group
    concurrently) would wait on each other's groups; the second waits for the first.
    """

    def __init__(self, rollouts: GroupRollouts, *, task_key: str = "task") -> None:
        if rollouts.filler_id is None:
            raise TrainerError(
                "ServiceGenerator needs GroupRollouts(filler_id=...): an id "
                "of the trainer's tokenizer (its pad_token_id) for rollouts "
                "with nothing to train"
            )
        self.rollouts, self.task_key = rollouts, task_key
        self._one_at_a_time = threading.Lock()

    async def generate(self, input_batch: GeneratorInput) -> GeneratorOutput:
        tasks, n = task_groups(input_batch, self.task_key)
        step = getattr(input_batch.get("batch_metadata"), "global_step", 0)
        sampling = {
            name: value
            for name, value in _sampling(input_batch.get("sampling_params")).items()
            if value is not None
        }
        prompts = [task for task in tasks for _ in range(n)]
        # The client blocks on long polls; SkyRL's trainer awaits this on its event loop.
        columns, figures = await asyncio.to_thread(self._call, prompts, n, sampling, step)
        output = generator_output(columns)
        output["trajectory_ids"] = input_batch.get("trajectory_ids")
        output["rollout_metrics"] = rollout_metrics(figures)
        return output

    def _call(
        self, prompts: list[str], n: int, sampling: dict[str, Any], step: int
    ) -> tuple[dict[str, list[Any]], dict[str, float]]:
        assert self.rollouts.filler_id is not None  # checked in __init__
        with self._one_at_a_time:
            columns = self.rollouts.collect(
                prompts, n, sampling=sampling, step=step, filler_id=self.rollouts.filler_id
            )
            return columns, dict(self.rollouts.last)


def task_groups(input_batch: GeneratorInput, task_key: str = "task") -> tuple[list[str], int]:
    """The task of each group of SkyRL's batch, and the group size: consecutive rows with
    one `trajectory_ids` instance id are one group, all of one size, one task."""
    extras = input_batch.get("env_extras") or []
    ids = input_batch.get("trajectory_ids") or []
    rows = len(input_batch["prompts"])
    if len(extras) != rows or len(ids) != rows:
        raise TrainerError(
            "ServiceGenerator needs env_extras and trajectory_ids for every "
            "prompt (SkyRL's prepare_generator_input sets both)"
        )
    blocks: list[tuple[str, list[str]]] = []
    for extra, trajectory in zip(extras, ids, strict=True):
        task = (extra or {}).get(task_key)
        if not isinstance(task, str):
            raise TrainerError(
                f"a prompt's env_extras has no task name under {task_key!r} "
                f"(got {extra!r}); put the Harbor task's name there"
            )
        if blocks and blocks[-1][0] == trajectory.instance_id:
            blocks[-1][1].append(task)
        else:
            blocks.append((trajectory.instance_id, [task]))
    sizes = {len(block) for _, block in blocks}
    if (
        len(sizes) != 1
        or any(len(set(block)) != 1 for _, block in blocks)
        or len({uid for uid, _ in blocks}) != len(blocks)
    ):
        raise TrainerError(
            "SkyRL's batch is no whole number of groups: each instance id's "
            "rows must be consecutive, of one task, and all groups one size "
            "(n_samples_per_prompt)"
        )
    return [block[0] for _, block in blocks], sizes.pop()


def generator_output(columns: dict[str, list[Any]]) -> GeneratorOutput:
    """`GroupRollouts`' samples (TRL's columns) as SkyRL's `GeneratorOutput`, row for row.

    SkyRL wants a float everywhere TRL takes None: a token the model did not sample (tool
    output, out of `loss_masks`) gets logprob 0.0, and a sample of an unscored group
    reward 0.0; both train nothing (their `loss_masks` are all 0)."""
    rewards = [0.0 if reward is None else float(reward) for reward in columns["reward"]]
    for reward, mask in zip(columns["reward"], columns["env_mask"], strict=True):
        if reward is None and any(mask):
            raise TrainerError(
                "an unscored sample has trained tokens; GroupRollouts masks "
                "every sample of an unscored group"
            )
    return GeneratorOutput(
        prompt_token_ids=list(columns["prompt_ids"]),
        response_ids=list(columns["completion_ids"]),
        rewards=rewards,
        loss_masks=[list(mask) for mask in columns["env_mask"]],
        stop_reasons=None,
        rollout_metrics=None,
        rollout_logprobs=[_floats(logprobs) for logprobs in columns["logprobs"]],
        trajectory_ids=None,
        trajectory_generation_times=None,
        trajectory_time_splits=None,
        rollout_expert_indices=None,
        rollout_sample_support=None,
        is_last_step=None,
        env_metrics=None,
        pixel_values=None,
        image_grid_thw=None,
    )


def _floats(logprobs: Sequence[float | None]) -> list[float]:
    return [0.0 if logprob is None else float(logprob) for logprob in logprobs]


def _sampling(params: dict[str, Any] | None) -> dict[str, Any]:
    sampling = {name: (params or {}).get(name) for name in _SAMPLING}
    if sampling["top_k"] is not None and sampling["top_k"] < 0:
        sampling["top_k"] = None
    return sampling
