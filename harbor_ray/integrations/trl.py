"""TRL's `GRPOTrainer` trained through the online service.

`task_dataset` (prompts are task names, or task and harness: `harness_prompt`),
`GroupRollouts` (the `rollout_func`: a group of `num_generations` rollouts per prompt,
under the prompt's harness, at TRL's sampling settings, one sample per rollout in TRL's
order), `verifier_reward` (the verifier's reward, never recomputed) and
`WeightSync` (the weights into the engine after every optimizer step, as version
`base + global_step`), and `ServiceGRPOTrainer` with `ServiceGRPOConfig` (TRL's
importance-sampling correction against the recorded logprobs, and the staleness of what
it trains, logged). Staleness, unscored groups, the logprobs and the correction:
docs/trainers.md.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import Any, Literal

from harbor_ray.client import Client, group_samples, mask_stale, trl_columns
from harbor_ray.errors import TrainerError
from harbor_ray.integrations.figures import call_figures, harness_metrics, rollout_metrics
from harbor_ray.integrations.trl_trainer import ServiceGRPOConfig, ServiceGRPOTrainer
from harbor_ray.integrations.trl_weights import WeightSync
from harbor_ray.online.wire import Group, TaskRequest

# The trainer, its weight sync and the figures live in modules of their own
# (trl_trainer, trl_weights, figures); users import all of them from here.
__all__ = [
    "GroupRollouts",
    "ServiceGRPOConfig",
    "ServiceGRPOTrainer",
    "WeightSync",
    "call_figures",
    "harness_metrics",
    "harness_prompt",
    "rollout_metrics",
    "task_dataset",
    "verifier_reward",
]

_log = logging.getLogger(__name__)

# TRL's GRPOConfig fields that shape the sampling distribution, as a submit's `sampling`
# names them; a value TRL leaves unset is left to the engine.
_SAMPLING_ARGS = ("temperature", "top_p", "top_k", "min_p")

# Between a prompt's task and its harness (`harness_prompt`): no agent name or import
# path holds a space, so the last one splits a prompt unambiguously.
_HARNESS_MARK = " @ "


def harness_prompt(task: str, harness: str) -> str:
    """The prompt of `task` run under `harness` (an agent name, e.g. `codex`):
    `"hello-file @ codex"`. `GroupRollouts` submits its group under that harness."""
    if not harness or _HARNESS_MARK.strip() in harness or " " in harness:
        raise TrainerError(f"a harness is an agent name (no spaces, no '@'): got {harness!r}")
    return f"{task}{_HARNESS_MARK}{harness}"


def task_dataset(tasks: Sequence[str], harnesses: Sequence[str] | None = None) -> Any:
    """A TRL train dataset whose prompts are these task names (of the service's
    dataset, or of the one `GroupRollouts` submits to); with `harnesses`, one prompt per
    (task, harness) (`harness_prompt`), so that one policy trains through all of them,
    each GRPO group one task under one harness."""
    from datasets import Dataset

    if harnesses is None:
        return Dataset.from_dict({"prompt": list(tasks)})
    if not harnesses or len(set(harnesses)) != len(harnesses):
        raise TrainerError(
            f"harnesses must be distinct agent names, at least one: got {list(harnesses)}"
        )
    return Dataset.from_dict(
        {"prompt": [harness_prompt(task, harness) for task in tasks for harness in harnesses]}
    )


def verifier_reward(
    completions: list[Any], reward: list[float | None], **_: Any
) -> list[float | None]:
    """The verifier's reward of each sample's rollout (`GroupRollouts` passes it); None
    stays None, which TRL reads as "no reward", not 0."""
    return list(reward)


class GroupRollouts:
    """A `rollout_func`: TRL's prompts (task names, each repeated `num_generations`
    times) become one group per prompt on the online service, and its samples.

    A prompt that names a harness (`harness_prompt`, `task_dataset(tasks, harnesses)`)
    runs its group under that agent, one submit for the whole call (the service refuses
    an agent it does not know, naming those it does, and starts nothing); `agent` is the
    harness of prompts that name none. A group is one prompt, so it is one task under
    one harness, and GRPO's baseline (the group's mean) is that harness's: the service
    runs a replacement group (`drop_no_signal`) under the harness of the group it
    replaces. Each sample carries its `agent`; `last` has per-harness sums
    (`harness/<agent>/...`), which `ServiceGRPOTrainer` logs (docs/trainers.md, "Mixing
    harnesses").

    `agent` and the submit options (`dataset`, `sandbox`, `budget`, `deadline_s`,
    `max_tokens` per model call) are the groups'; the rest of the sampling is TRL's
    (`temperature`, `top_p`, `top_k`, `min_p` of its `GRPOConfig`). `timeout_s` bounds
    the wait for one call's groups; past it they are cancelled and `TrainerError` raised.

    `max_staleness` (policy versions behind the one serving at submit) with
    `stale_policy="drop"` trains nothing of a sample whose oldest turn is older; with
    `"mask"` only its tokens sampled by an older version leave `env_mask`, and the rest
    train (docs/trainers.md, "Staleness"). Each sample carries `policy_versions` (per
    completion token) and `policy_version` (the one serving at submit), which
    `ServiceGRPOTrainer` logs the staleness of trained tokens from.

    `drop_no_signal=True` has the service drop a group whose rewards are all equal (it
    has no GRPO signal) and run a replacement in its place, of one of
    `replacement_tasks` (None: the call's own tasks; pass the trainer's task list so
    that a call of one prompt can be refilled too), at most `max_extra_groups` per call
    (None: the service's defaults); the call still returns one group per
    prompt: past the bound a group without signal comes back flagged, and trains
    nothing (docs/trainers.md, "Groups that carry signal"). `last` holds the call's
    figures (`call_figures`), which `ServiceGRPOTrainer` logs.
    """

    def __init__(
        self,
        client: Client,
        agent: str,
        *,
        dataset: str | None = None,
        sandbox: str | None = None,
        budget: int | None = None,
        deadline_s: float | None = None,
        max_tokens: int | None = None,
        max_staleness: int | None = None,
        stale_policy: Literal["drop", "mask"] = "drop",
        timeout_s: float = 3600.0,
        wait_s: float = 30.0,
        filler_id: int | None = None,
        drop_no_signal: bool | None = None,
        max_extra_groups: int | None = None,
        replacement_tasks: Sequence[str] | None = None,
    ) -> None:
        self.client, self.agent = client, agent
        self.options: dict[str, Any] = {
            key: value
            for key, value in (
                ("dataset", dataset),
                ("sandbox", sandbox),
                ("budget", budget),
                ("deadline_s", deadline_s),
                ("drop_no_signal", drop_no_signal),
                ("max_extra_groups", max_extra_groups),
                (
                    "replacement_tasks",
                    None if replacement_tasks is None else list(replacement_tasks),
                ),
            )
            if value is not None
        }
        self.max_tokens, self.max_staleness = max_tokens, max_staleness
        self.stale_policy = stale_policy
        self.timeout_s, self.wait_s, self.filler_id = timeout_s, wait_s, filler_id
        # What the last call did, for a trainer's logs (`call_figures`).
        self.last: dict[str, float] = {}
        # Groups the service delivered that no call of this object asked for.
        self.unclaimed: list[Group] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        """TRL's `rollout_func`: `collect` at what TRL's trainer says (its group size,
        sampling settings, step and tokenizer)."""
        n = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        sampling = {
            name: value
            for name in _SAMPLING_ARGS
            if (value := getattr(trainer.args, name, None)) is not None
        }
        filler = self.filler_id if self.filler_id is not None else _filler(trainer)
        return self.collect(
            prompts, n, sampling=sampling, step=trainer.state.global_step, filler_id=filler
        )

    def collect(
        self, prompts: list[Any], n: int, *, sampling: dict[str, Any], step: int, filler_id: int
    ) -> dict[str, list[Any]]:
        """One group of `n` rollouts per block of `n` equal prompts, at `sampling` (the
        engine's sampling fields; `max_tokens` is this object's), as TRL's columns, one
        sample per rollout in the prompts' order: the call any trainer makes (SkyRL's
        adapter too). `step`: the trainer's, in the submit's metadata."""
        started = time.monotonic()
        asked = _tasks(prompts, n)
        if self.max_tokens is not None:
            sampling = {**sampling, "max_tokens": self.max_tokens}
        reply = self.client.submit(
            [TaskRequest(task=task, n=n, agent=agent) for task, agent in asked],
            self.agent,
            sampling=sampling,
            **self.options,
            metadata={"trl_global_step": step},
        )
        ids = [ref.group_id for ref in reply.groups]
        groups = self._wait(ids)
        samples = []
        for group_id, (_, agent) in zip(ids, asked, strict=True):
            group_samples = self._samples(groups[group_id], n, reply.policy_version, filler_id)
            for sample in group_samples:
                sample["agent"] = _ran(groups[group_id], agent or self.agent)
            samples += group_samples
        self.last = call_figures(
            [groups[i] for i in ids], samples, time.monotonic() - started, reply.policy_version
        )
        return trl_columns(samples)

    def _wait(self, ids: list[str]) -> dict[str, Group]:
        """The groups in the places of `ids` (each the group itself, or the replacement
        that took its place), acknowledged; others that arrive meanwhile are kept apart.
        One long poll at a time, so that `timeout_s` is checked between polls."""
        deadline = time.monotonic() + self.timeout_s
        got: dict[str, Group] = {}
        while missing := [i for i in ids if i not in got]:
            if time.monotonic() > deadline:
                for group_id in missing:
                    self.client.cancel(group_id)
                raise TrainerError(
                    f"{len(missing)} of {len(ids)} groups did not finish in "
                    f"{self.timeout_s:g} s (cancelled); raise timeout_s, or "
                    "the rollouts' budget or deadline_s"
                )
            batch = self.client.poll(max_groups=len(missing), wait_s=self.wait_s)
            for group in batch:
                if (place := group.replaces or group.group_id) in missing:
                    got[place] = group
                else:
                    _log.warning(
                        "group %s was not asked for here; kept in `unclaimed`", group.group_id
                    )
                    self.unclaimed.append(group)
            if batch:
                self.client.ack([group.group_id for group in batch])
        return got

    def _samples(self, group: Group, n: int, version: int, filler: int) -> list[dict[str, Any]]:
        samples = group_samples([group], filler_id=filler)
        if len(samples) != n:
            raise TrainerError(f"group {group.group_id} has {len(samples)} rollouts, not {n}")
        unscored = any(s["reward"] is None for s in samples)
        for sample in samples:
            sample["policy_version"] = version
            sample["sampled_tokens"] = sum(sample["env_mask"])
            oldest = sample["policy_version_min"]
            stale = (
                self.max_staleness is not None
                and oldest is not None
                and version - oldest > self.max_staleness
            )
            sample["stale_dropped"] = stale and self.stale_policy == "drop"
            sample["stale_masked"] = 0
            if unscored or group.no_signal or not sample["trainable"] or sample["stale_dropped"]:
                _train_nothing(sample)
            elif stale and self.max_staleness is not None:
                kept = mask_stale(
                    sample["env_mask"], sample["policy_versions"], version, self.max_staleness
                )
                sample["stale_masked"] = sum(sample["env_mask"]) - sum(kept)
                sample["env_mask"] = kept
        return samples


def _ran(group: Group, asked: str) -> str:
    """The agent `group`'s rows say ran it: `asked`, or the service broke the harness
    a group was asked under, and its baseline would mix harnesses."""
    ran = {row.get("agent", asked) for row in group.rollouts}
    if ran - {asked}:
        raise TrainerError(
            f"group {group.group_id} was asked of {asked} but its rows name "
            f"{sorted(ran)}: the service runs each group under one agent"
        )
    return asked


def _tasks(prompts: list[Any], n: int) -> list[tuple[str, str | None]]:
    """The task and harness (None: the prompt names none) of each block of `n` prompts
    (TRL repeats each prompt n times in a row: one block is one GRPO group)."""
    if not prompts or len(prompts) % n:
        raise TrainerError(f"{len(prompts)} prompts are no whole number of groups of {n}")
    tasks: list[tuple[str, str | None]] = []
    for start in range(0, len(prompts), n):
        block = prompts[start : start + n]
        if not isinstance(block[0], str) or any(p != block[0] for p in block):
            raise TrainerError(
                "a GroupRollouts prompt is a task name (or `harness_prompt`'s "
                f"task and harness), repeated num_generations ({n}) times; "
                f"got {block[0]!r} (build the dataset with task_dataset)"
            )
        task, mark, harness = block[0].rpartition(_HARNESS_MARK)
        tasks.append((task, harness) if mark else (block[0], None))
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
