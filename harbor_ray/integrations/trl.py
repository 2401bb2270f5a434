"""TRL's `GRPOTrainer` trained through the online service.

`task_dataset` (prompts are task names), `GroupRollouts` (the `rollout_func`: a group
of `num_generations` rollouts per prompt, at TRL's sampling settings, one sample per
rollout in TRL's order), `verifier_reward` (the verifier's reward, never recomputed) and
`WeightSync` (the weights into the engine after every optimizer step, as version
`base + global_step`). Staleness, unscored groups and the logprobs: docs/trainers.md.
"""

from __future__ import annotations

import logging
import shutil
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from transformers import TrainerCallback

from harbor_ray.client import Client, group_samples, mask_stale, trl_columns
from harbor_ray.errors import TrainerError
from harbor_ray.online.wire import Group, TaskRequest

__all__ = ["GroupRollouts", "WeightSync", "task_dataset", "verifier_reward"]

_log = logging.getLogger(__name__)

# TRL's GRPOConfig fields that shape the sampling distribution, as a submit's `sampling`
# names them; a value TRL leaves unset is left to the engine.
_SAMPLING_ARGS = ("temperature", "top_p", "top_k", "min_p")


def task_dataset(tasks: Sequence[str]) -> Any:
    """A TRL train dataset whose prompts are these task names (of the service's
    dataset, or of the one `GroupRollouts` submits to)."""
    from datasets import Dataset

    return Dataset.from_dict({"prompt": list(tasks)})


def verifier_reward(completions: list[Any], reward: list[float | None],
                    **_: Any) -> list[float | None]:
    """The verifier's reward of each sample's rollout (`GroupRollouts` passes it); None
    stays None, which TRL reads as "no reward", not 0."""
    return list(reward)


class GroupRollouts:
    """A `rollout_func`: TRL's prompts (task names, each repeated `num_generations`
    times) become one group per prompt on the online service, and its samples.

    `agent` and the submit options (`dataset`, `sandbox`, `budget`, `deadline_s`,
    `max_tokens` per model call) are the groups'; the rest of the sampling is TRL's
    (`temperature`, `top_p`, `top_k`, `min_p` of its `GRPOConfig`). `timeout_s` bounds
    the wait for one call's groups; past it they are cancelled and `TrainerError` raised.

    `max_staleness` (policy versions behind the one serving at submit) with
    `stale_policy="drop"` trains nothing of a sample whose oldest turn is older; with
    `"mask"` only its tokens sampled by an older version leave `env_mask`, and the rest
    train (docs/trainers.md, "Staleness").
    """

    def __init__(self, client: Client, agent: str, *, dataset: str | None = None,
                 sandbox: str | None = None, budget: int | None = None,
                 deadline_s: float | None = None, max_tokens: int | None = None,
                 max_staleness: int | None = None,
                 stale_policy: Literal["drop", "mask"] = "drop", timeout_s: float = 3600.0,
                 wait_s: float = 30.0, filler_id: int | None = None) -> None:
        self.client, self.agent = client, agent
        self.options: dict[str, Any] = {
            key: value for key, value in (("dataset", dataset), ("sandbox", sandbox),
                                          ("budget", budget), ("deadline_s", deadline_s))
            if value is not None}
        self.max_tokens, self.max_staleness = max_tokens, max_staleness
        self.stale_policy = stale_policy
        self.timeout_s, self.wait_s, self.filler_id = timeout_s, wait_s, filler_id
        # What the last call did, for a trainer's logs.
        self.last: dict[str, Any] = {}
        # Groups the service delivered that no call of this object asked for.
        self.unclaimed: list[Group] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        started = time.monotonic()
        n = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        tasks = _tasks(prompts, n)
        reply = self.client.submit(
            [TaskRequest(task=task, n=n) for task in tasks], self.agent,
            sampling=self._sampling(trainer.args), **self.options,
            metadata={"trl_global_step": trainer.state.global_step})
        ids = [ref.group_id for ref in reply.groups]
        groups = self._wait(ids)
        filler = self.filler_id if self.filler_id is not None else _filler(trainer)
        samples = [sample for group_id in ids for sample in self._samples(
            groups[group_id], n, reply.policy_version, filler)]
        self.last = {"groups": len(ids), "seconds": time.monotonic() - started,
                     "policy_version": reply.policy_version,
                     "trainable": sum(s["trainable"] for s in samples)}
        return trl_columns(samples)

    def _sampling(self, args: Any) -> dict[str, Any]:
        sampling = {name: value for name in _SAMPLING_ARGS
                    if (value := getattr(args, name, None)) is not None}
        if self.max_tokens is not None:
            sampling["max_tokens"] = self.max_tokens
        return sampling

    def _wait(self, ids: list[str]) -> dict[str, Group]:
        """The groups `ids`, acknowledged; others that arrive meanwhile are kept apart.
        One long poll at a time, so that `timeout_s` is checked between polls."""
        deadline = time.monotonic() + self.timeout_s
        got: dict[str, Group] = {}
        while missing := [i for i in ids if i not in got]:
            if time.monotonic() > deadline:
                for group_id in missing:
                    self.client.cancel(group_id)
                raise TrainerError(f"{len(missing)} of {len(ids)} groups did not finish in "
                                   f"{self.timeout_s:g} s (cancelled); raise timeout_s, or "
                                   "the rollouts' budget or deadline_s")
            batch = self.client.poll(max_groups=len(missing), wait_s=self.wait_s)
            for group in batch:
                if group.group_id in missing:
                    got[group.group_id] = group
                else:
                    _log.warning("group %s was not asked for here; kept in `unclaimed`",
                                 group.group_id)
                    self.unclaimed.append(group)
            if batch:
                self.client.ack([group.group_id for group in batch])
        return got

    def _samples(self, group: Group, n: int, version: int, filler: int
                 ) -> list[dict[str, Any]]:
        samples = group_samples([group], filler_id=filler)
        if len(samples) != n:
            raise TrainerError(f"group {group.group_id} has {len(samples)} rollouts, not {n}")
        unscored = any(s["reward"] is None for s in samples)
        for sample in samples:
            oldest = sample["policy_version_min"]
            stale = (self.max_staleness is not None and oldest is not None
                     and version - oldest > self.max_staleness)
            if unscored or not sample["trainable"] or (stale and self.stale_policy == "drop"):
                _train_nothing(sample)
            elif stale and self.max_staleness is not None:
                sample["env_mask"] = mask_stale(sample["env_mask"], sample["policy_versions"],
                                                version, self.max_staleness)
        return samples


class WeightSync(TrainerCallback):
    """After every optimizer step: the model saved under `checkpoint_dir` and loaded into
    the engine as policy version `base + global_step` (`base`: the version serving when
    training began), before the next rollouts are submitted. Keeps the `keep` newest
    checkpoints (the engine reads the one it serves on a restart of a replica)."""

    def __init__(self, client: Client, checkpoint_dir: str | Path, *, keep: int = 2) -> None:
        if keep < 1:
            raise TrainerError("WeightSync keeps at least the checkpoint the engine serves")
        self.client, self.dir, self.keep = client, Path(checkpoint_dir), keep
        self.base: int | None = None
        self.saved: list[Path] = []
        # (version, seconds) of every update, for a trainer's logs.
        self.updates: list[tuple[int, float]] = []

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.base = self.client.policy().version - state.global_step

    def on_step_end(self, args: Any, state: Any, control: Any, model: Any = None,
                    **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        if model is None or self.base is None:
            raise TrainerError("WeightSync needs the trainer's model and on_train_begin")
        started = time.monotonic()
        version = self.base + state.global_step
        path = self.dir / f"version-{version}"
        model.save_pretrained(path, safe_serialization=True)
        self.client.update_weights(str(path.resolve()), version)
        self.updates.append((version, time.monotonic() - started))
        self.saved.append(path)
        while len(self.saved) > self.keep:
            shutil.rmtree(self.saved.pop(0), ignore_errors=True)


def _tasks(prompts: list[Any], n: int) -> list[str]:
    """The task of each block of `n` prompts (TRL repeats each prompt n times in a row)."""
    if not prompts or len(prompts) % n:
        raise TrainerError(f"{len(prompts)} prompts are no whole number of groups of {n}")
    tasks = []
    for start in range(0, len(prompts), n):
        block = prompts[start:start + n]
        if not isinstance(block[0], str) or any(p != block[0] for p in block):
            raise TrainerError("a GroupRollouts prompt is a task name, repeated "
                               f"num_generations ({n}) times; got {block[0]!r} "
                               "(build the dataset with task_dataset)")
        tasks.append(block[0])
    return tasks


def _filler(trainer: Any) -> int:
    """An id the trainer's tokenizer has, for a rollout with nothing to train."""
    tokenizer = getattr(trainer, "processing_class", None)
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
    for name in ("pad_token_id", "eos_token_id"):
        if isinstance(value := getattr(tokenizer, name, None), int):
            return value
    return 0


def _train_nothing(sample: dict[str, Any]) -> None:
    sample["env_mask"] = [0] * len(sample["completion_ids"])
    sample["logprobs"] = [None] * len(sample["completion_ids"])
    sample["trainable"] = False
