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

import inspect
import logging
import math
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from accelerate.utils import gather_object  # type: ignore[import-untyped]  # untyped
from transformers import TrainerCallback
from trl import GRPOConfig, GRPOTrainer

from harbor_ray.client import Client, group_samples, mask_stale, trl_columns
from harbor_ray.errors import TrainerError
from harbor_ray.online.wire import Group, TaskRequest

__all__ = ["GroupRollouts", "ServiceGRPOConfig", "ServiceGRPOTrainer", "WeightSync",
           "call_figures", "harness_metrics", "harness_prompt", "rollout_metrics", "task_dataset",
           "verifier_reward"]

_log = logging.getLogger(__name__)

# TRL's GRPOConfig fields that shape the sampling distribution, as a submit's `sampling`
# names them; a value TRL leaves unset is left to the engine.
_SAMPLING_ARGS = ("temperature", "top_p", "top_k", "min_p")

# The trained tokens' staleness buckets (versions behind the one serving at submit), as
# `ServiceGRPOTrainer` logs them: `staleness/tokens_0`, `_1`, `_2+`.
_STALENESS = ("0", "1", "2+")


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
        raise TrainerError(f"harnesses must be distinct agent names, at least one: got "
                           f"{list(harnesses)}")
    return Dataset.from_dict({"prompt": [harness_prompt(task, harness) for task in tasks
                                         for harness in harnesses]})


def verifier_reward(completions: list[Any], reward: list[float | None],
                    **_: Any) -> list[float | None]:
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

    def __init__(self, client: Client, agent: str, *, dataset: str | None = None,
                 sandbox: str | None = None, budget: int | None = None,
                 deadline_s: float | None = None, max_tokens: int | None = None,
                 max_staleness: int | None = None,
                 stale_policy: Literal["drop", "mask"] = "drop", timeout_s: float = 3600.0,
                 wait_s: float = 30.0, filler_id: int | None = None,
                 drop_no_signal: bool | None = None,
                 max_extra_groups: int | None = None,
                 replacement_tasks: Sequence[str] | None = None) -> None:
        self.client, self.agent = client, agent
        self.options: dict[str, Any] = {
            key: value for key, value in (("dataset", dataset), ("sandbox", sandbox),
                                          ("budget", budget), ("deadline_s", deadline_s),
                                          ("drop_no_signal", drop_no_signal),
                                          ("max_extra_groups", max_extra_groups),
                                          ("replacement_tasks", None if replacement_tasks
                                           is None else list(replacement_tasks)))
            if value is not None}
        self.max_tokens, self.max_staleness = max_tokens, max_staleness
        self.stale_policy = stale_policy
        self.timeout_s, self.wait_s, self.filler_id = timeout_s, wait_s, filler_id
        # What the last call did, for a trainer's logs (`call_figures`).
        self.last: dict[str, float] = {}
        # Groups the service delivered that no call of this object asked for.
        self.unclaimed: list[Group] = []

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        started = time.monotonic()
        n = trainer.num_generations if trainer.model.training else trainer.num_generations_eval
        asked = _tasks(prompts, n)
        reply = self.client.submit(
            [TaskRequest(task=task, n=n, agent=agent) for task, agent in asked], self.agent,
            sampling=self._sampling(trainer.args), **self.options,
            metadata={"trl_global_step": trainer.state.global_step})
        ids = [ref.group_id for ref in reply.groups]
        groups = self._wait(ids)
        filler = self.filler_id if self.filler_id is not None else _filler(trainer)
        samples = []
        for group_id, (_, agent) in zip(ids, asked, strict=True):
            group_samples = self._samples(groups[group_id], n, reply.policy_version, filler)
            for sample in group_samples:
                sample["agent"] = _ran(groups[group_id], agent or self.agent)
            samples += group_samples
        self.last = call_figures([groups[i] for i in ids], samples,
                                 time.monotonic() - started, reply.policy_version)
        return trl_columns(samples)

    def _sampling(self, args: Any) -> dict[str, Any]:
        sampling = {name: value for name in _SAMPLING_ARGS
                    if (value := getattr(args, name, None)) is not None}
        if self.max_tokens is not None:
            sampling["max_tokens"] = self.max_tokens
        return sampling

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
                raise TrainerError(f"{len(missing)} of {len(ids)} groups did not finish in "
                                   f"{self.timeout_s:g} s (cancelled); raise timeout_s, or "
                                   "the rollouts' budget or deadline_s")
            batch = self.client.poll(max_groups=len(missing), wait_s=self.wait_s)
            for group in batch:
                if (place := group.replaces or group.group_id) in missing:
                    got[place] = group
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
            sample["policy_version"] = version
            sample["sampled_tokens"] = sum(sample["env_mask"])
            oldest = sample["policy_version_min"]
            stale = (self.max_staleness is not None and oldest is not None
                     and version - oldest > self.max_staleness)
            sample["stale_dropped"] = stale and self.stale_policy == "drop"
            sample["stale_masked"] = 0
            if (unscored or group.no_signal or not sample["trainable"]
                    or sample["stale_dropped"]):
                _train_nothing(sample)
            elif stale and self.max_staleness is not None:
                kept = mask_stale(sample["env_mask"], sample["policy_versions"], version,
                                  self.max_staleness)
                sample["stale_masked"] = sum(sample["env_mask"]) - sum(kept)
                sample["env_mask"] = kept
        return samples


def _ran(group: Group, asked: str) -> str:
    """The agent `group`'s rows say ran it: `asked`, or the service broke the harness
    a group was asked under, and its baseline would mix harnesses."""
    ran = {row.get("agent", asked) for row in group.rollouts}
    if ran - {asked}:
        raise TrainerError(f"group {group.group_id} was asked of {asked} but its rows name "
                           f"{sorted(ran)}: the service runs each group under one agent")
    return asked


def call_figures(groups: Sequence[Group], samples: Sequence[dict[str, Any]], seconds: float,
                 version: int) -> dict[str, float]:
    """What one `GroupRollouts` call did, as sums (so that a trainer can add them over
    processes before taking means): rollouts and their rewards (`reward_sum`,
    `reward_sq_sum` over the `scored` ones), turns recorded (`turns`: the rollouts/
    row's `counts.turns`, one per model call answered), tokens the model
    sampled (`sampled_tokens`, before any was masked), samples that train nothing as
    too stale (`stale_dropped`) and tokens masked as too stale (`stale_masked_tokens`:
    here, and by the service's `mask` policy), groups dropped for no signal by the
    service (`no_signal_dropped`, each replaced: `extra_rollouts`) and delivered
    flagged at the bound (`no_signal_kept`), and the call's wall `seconds`.

    Samples that carry their `agent` (`GroupRollouts`') add the first six sums per
    harness, as `harness/<agent>/<sum>` (`harness/codex/reward_sum`)."""
    turns = {row["rollout_id"]: (row.get("counts") or {}).get("turns") or 0
             for group in groups for row in group.rollouts}
    by_harness: dict[str, list[dict[str, Any]]] = {}
    for sample in samples:
        if (agent := sample.get("agent")) is not None:
            by_harness.setdefault(agent, []).append(sample)
    return {
        "groups": float(len(groups)), **_sums(samples, turns),
        "trainable": float(sum(bool(s["trainable"]) for s in samples)),
        "stale_dropped": float(sum(bool(s["stale_dropped"]) for s in samples)),
        "stale_masked_tokens": float(sum(s["stale_masked"] for s in samples)
                                     + sum(g.masked_tokens for g in groups)),
        "no_signal_dropped": float(sum(g.no_signal_dropped for g in groups)),
        "no_signal_kept": float(sum(g.no_signal for g in groups)),
        "extra_rollouts": float(sum(g.no_signal_dropped * g.n for g in groups)),
        "seconds": seconds, "policy_version": float(version),
        **{f"{_HARNESS_PREFIX}{agent}/{key}": value for agent, mine in by_harness.items()
           for key, value in _sums(mine, turns).items()},
    }


def _sums(samples: Sequence[dict[str, Any]], turns: dict[str, int]) -> dict[str, float]:
    """Rollouts, their rewards (over the scored ones), turns and sampled tokens."""
    rewards = [s["reward"] for s in samples if s["reward"] is not None]
    return {
        "rollouts": float(len(samples)), "scored": float(len(rewards)),
        "reward_sum": float(sum(rewards)), "reward_sq_sum": float(sum(r * r for r in rewards)),
        "turns": float(sum(turns.get(s["rollout_id"], 0) for s in samples)),
        "sampled_tokens": float(sum(s["sampled_tokens"] for s in samples)),
    }


class WeightSync(TrainerCallback):
    """After every optimizer step: the model saved under `checkpoint_dir` and loaded into
    the engine as policy version `base + global_step` (`base`: the version serving when
    training began), before the next rollouts are submitted. Keeps the `keep` newest
    checkpoints (the engine reads the one it serves on a restart of a replica).

    A peft model (TRL's `peft_config`, or a `PeftModel` handed to the trainer) is saved
    as its adapter alone (`adapter_config.json`, `adapter_model.safetensors`: megabytes,
    not the whole model), which an engine with `lora:` loads as the new version
    (docs/trainers.md, "LoRA updates")."""

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
        if _is_peft(model) and not (path / "adapter_config.json").is_file():
            raise TrainerError(f"the peft model saved no adapter_config.json in {path}: "
                               "train it as a peft PeftModel (TRL's peft_config)")
        self.client.update_weights(str(path.resolve()), version)
        self.updates.append((version, time.monotonic() - started))
        self.saved.append(path)
        while len(self.saved) > self.keep:
            shutil.rmtree(self.saved.pop(0), ignore_errors=True)


def _is_peft(model: Any) -> bool:
    """Whether `model` trains peft adapters (a `PeftModel`, or a transformers model
    with adapters attached): its `save_pretrained` then writes only the adapter."""
    return bool(getattr(model, "peft_config", None))


@dataclass
class ServiceGRPOConfig(GRPOConfig):
    """TRL's `GRPOConfig`, with its importance-sampling correction per token by default
    (`vllm_importance_sampling_mode="token_truncate"`: each trained token's ratio to the
    recorded logprob, truncated at `vllm_importance_sampling_clip_max`, 3 by default).

    TRL's own default, `sequence_mask`, zeroes a whole sequence whose product of ratios
    leaves the bounds: a multi-turn sample from a policy a version or two behind would
    mostly be dropped instead of down-weighted token by token.
    """

    vllm_importance_sampling_mode: str = field(
        default="token_truncate",
        metadata={"help": "How the recorded logprobs' importance ratios are applied: "
                  "'token_truncate' (the default here), 'token_mask', 'sequence_truncate' "
                  "or 'sequence_mask' (TRL's GRPOConfig)."})


class ServiceGRPOTrainer(GRPOTrainer):
    """TRL's `GRPOTrainer` for samples from the service (`rollout_func=GroupRollouts`):
    TRL's importance-sampling correction against the recorded logprobs, which TRL runs
    only for samples of its own vLLM (`use_vllm=True`), and the trained tokens'
    staleness logged.

    The correction is TRL's, with TRL's settings (`vllm_importance_sampling_correction`,
    `_mode`, `_clip_min`, `_clip_max`; `ServiceGRPOConfig` defaults to `token_truncate`):
    each trained token's loss is weighted by `exp(logp_model - logp_recorded)`, where the
    model is the policy before this step's update and a token with no recorded logprob
    (None, NaN: not sampled by the model) gets 1. TRL logs the ratio
    (`sampling/importance_sampling_ratio/{mean,min,max}`); this adds
    `sampling/importance_sampling_ratio/clipped_fraction` (trained tokens whose ratio
    left the bounds: truncated or masked) and `staleness/tokens_{0,1,2+}` (trained tokens
    by versions behind the one serving at submit, from `GroupRollouts`' columns).

    It also logs what the rollouts were (`rollouts/*`, `groups/*`: `rollout_metrics` of
    `GroupRollouts.last`, summed over processes) and where the time went (`timing/
    rollout_s`, `timing/train_s`: seconds since the last log), all through TRL's `log`,
    so `report_to` sends them wherever the rest goes (docs/trainers.md, "What the
    trainer logs").
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Checked before TRL's __init__, which with use_vllm would start connecting to a
        # vLLM server that does not exist here.
        bound = inspect.signature(GRPOTrainer.__init__).bind(self, *args, **kwargs)
        config = bound.arguments.get("args")
        _check_service_setup(config, bound.arguments.get("rollout_func"))
        if config is None:
            bound.arguments["args"] = ServiceGRPOConfig()
        super().__init__(*bound.args[1:], **bound.kwargs)
        # Seconds since the last log: in the rollout_func, and in training steps less it.
        self._seconds = {"rollout": 0.0, "train": 0.0}

    # TRL computes, logs and applies the ratio only where `self.use_vllm` is set; the three
    # overrides below set it while TRL scores the samples and computes the loss (its code
    # path, unchanged), and clear it while TRL collects them, where it would sync weights
    # into a vLLM engine this trainer does not have.

    def _generate_and_score_completions(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        with self._trl_correction(True):
            output: dict[str, Any] = super()._generate_and_score_completions(inputs)
        self._log_correction(output)
        self._log_staleness(inputs, output)
        return output

    def _generate(self, prompts: list[Any]) -> Any:
        started = time.monotonic()
        with self._trl_correction(False):
            generated = super()._generate(prompts)
        self._seconds["rollout"] += time.monotonic() - started
        self._log_rollouts()
        return generated

    def training_step(self, *args: Any, **kwargs: Any) -> Any:
        started, rollout = time.monotonic(), self._seconds["rollout"]
        loss = super().training_step(*args, **kwargs)  # type: ignore[no-untyped-call]  # untyped in trl
        # The step's rollouts (TRL collects them inside it, once per generation batch)
        # are rollout time, not training time.
        self._seconds["train"] += (time.monotonic() - started
                                   - (self._seconds["rollout"] - rollout))
        return loss

    def log(self, logs: dict[str, float], start_time: float | None = None) -> None:
        metrics = self._metrics[self._mode()]
        for name, seconds in self._seconds.items():
            metrics[f"timing/{name}_s"] = [seconds]
            self._seconds[name] = 0.0
        super().log(logs, start_time)

    def _log_rollouts(self) -> None:
        """`GroupRollouts.last` (the call just made), summed over processes, as
        `rollout_metrics`; nothing for a rollout_func that keeps no such figures."""
        figures = getattr(self.rollout_func, "last", None)
        if not isinstance(figures, dict) or not figures:
            return
        keys = sorted(k for k in _SUMMED if k in figures)
        summed = self.accelerator.reduce(
            torch.tensor([float(figures[k]) for k in keys], device=self.accelerator.device),
            reduction="sum").tolist()
        for name, value in rollout_metrics(dict(zip(keys, summed, strict=True))).items():
            self._metrics[self._mode()][name].append(value)
        # Processes may have run different harnesses: their sums are gathered by name.
        harnesses: dict[str, float] = {}
        for part in gather_object([{k: v for k, v in figures.items()
                                    if k.startswith(_HARNESS_PREFIX)}]):
            for key, value in part.items():
                harnesses[key] = harnesses.get(key, 0.0) + value
        for name, value in harness_metrics(harnesses).items():
            self._metrics[self._mode()][name].append(value)

    def _compute_loss(self, model: Any, inputs: dict[str, Any]) -> Any:
        with self._trl_correction(True):
            return super()._compute_loss(model, inputs)  # type: ignore[no-untyped-call]  # untyped in trl

    @contextmanager
    def _trl_correction(self, on: bool) -> Iterator[None]:
        saved = self.use_vllm
        self.use_vllm = on and self.vllm_importance_sampling_correction
        try:
            yield
        finally:
            self.use_vllm = saved

    def _mode(self) -> str:
        return "train" if self.model.training else "eval"

    def _log_correction(self, output: dict[str, Any]) -> None:
        """The fraction of trained tokens whose ratio TRL truncated or masked."""
        ratio = output.get("importance_sampling_ratio")
        if ratio is None:
            return
        trained = _trained(output)
        clipped = _clipped(ratio, self.vllm_importance_sampling_mode,
                           self.vllm_importance_sampling_clip_min,
                           self.vllm_importance_sampling_clip_max).expand_as(trained)
        counts = torch.stack([(clipped & trained).sum(), trained.sum()]).float()
        hit, total = self.accelerator.reduce(counts, reduction="sum").tolist()
        self._metrics[self._mode()]["sampling/importance_sampling_ratio/clipped_fraction"].append(
            hit / total if total else 0.0)

    def _log_staleness(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> None:
        """Trained tokens by versions behind the one serving at submit (TRL merged the
        rollout_func's `policy_versions` and `policy_version` columns into `inputs`)."""
        if any("policy_versions" not in x or x.get("policy_version") is None for x in inputs):
            return  # not GroupRollouts' samples: nothing says which version sampled them
        trained = _trained(output)
        behind = _versions_behind([x["policy_versions"] for x in inputs],
                                  [x["policy_version"] for x in inputs], trained.shape[1])
        behind = behind.to(trained.device)
        counts = torch.stack([((behind == 0) & trained).sum(), ((behind == 1) & trained).sum(),
                              ((behind >= 2) & trained).sum()])
        summed = self.accelerator.reduce(counts, reduction="sum").tolist()
        for bucket, count in zip(_STALENESS, summed, strict=True):
            self._metrics[self._mode()][f"staleness/tokens_{bucket}"].append(float(count))


# `call_figures` that add up over processes (the rest: the call's own, not logged).
_SUMMED = ("rollouts", "scored", "reward_sum", "reward_sq_sum", "turns", "sampled_tokens",
           "stale_dropped", "stale_masked_tokens", "no_signal_dropped", "no_signal_kept",
           "extra_rollouts")


# `call_figures`' per-harness sums, and the per-harness figures `ServiceGRPOTrainer` logs.
_HARNESS_PREFIX = "harness/"


def harness_metrics(figures: dict[str, float]) -> dict[str, float]:
    """The logged form of `call_figures`' per-harness sums (summed over processes):
    `harness/<agent>/` `reward_mean`, `reward_std`, `turns_mean`, `sampled_tokens_mean`
    and `unscored` as `rollout_metrics` makes them of that harness's rollouts alone, and
    its `rollouts`."""
    by_harness: dict[str, dict[str, float]] = {}
    for key, value in figures.items():
        if key.startswith(_HARNESS_PREFIX):
            agent, _, name = key[len(_HARNESS_PREFIX):].rpartition("/")
            by_harness.setdefault(agent, {})[name] = value
    metrics: dict[str, float] = {}
    for agent, sums in sorted(by_harness.items()):
        prefix = f"{_HARNESS_PREFIX}{agent}/"
        metrics[f"{prefix}rollouts"] = sums.get("rollouts", 0.0)
        for name, value in rollout_metrics(sums).items():
            metrics[prefix + name.removeprefix("rollouts/")] = value
    return metrics


def rollout_metrics(figures: dict[str, float]) -> dict[str, float]:
    """The logged form of `call_figures` sums: per-rollout means and the counts.
    `rollouts/reward_mean` and `_std` are over the scored rollouts (population std;
    absent when none was scored); `turns_mean` and `sampled_tokens_mean` per rollout."""
    rollouts, scored = figures.get("rollouts", 0.0), figures.get("scored", 0.0)
    metrics: dict[str, float] = {}
    if scored:
        mean = figures["reward_sum"] / scored
        metrics["rollouts/reward_mean"] = mean
        metrics["rollouts/reward_std"] = math.sqrt(
            max(figures["reward_sq_sum"] / scored - mean * mean, 0.0))
    if rollouts:
        metrics["rollouts/turns_mean"] = figures.get("turns", 0.0) / rollouts
        metrics["rollouts/sampled_tokens_mean"] = figures.get("sampled_tokens", 0.0) / rollouts
        metrics["rollouts/unscored"] = rollouts - scored
    for key, name in (("stale_dropped", "rollouts/stale_dropped"),
                      ("stale_masked_tokens", "rollouts/stale_masked_tokens"),
                      ("no_signal_dropped", "groups/no_signal_dropped"),
                      ("no_signal_kept", "groups/no_signal_kept"),
                      ("extra_rollouts", "groups/extra_rollouts")):
        if key in figures:
            metrics[name] = figures[key]
    return metrics


def _check_service_setup(config: GRPOConfig | None, rollout_func: Any) -> None:
    if rollout_func is None:
        raise TrainerError("ServiceGRPOTrainer trains on the service's samples: pass "
                           "rollout_func=GroupRollouts(client, agent)")
    if config is not None and config.use_vllm:
        raise TrainerError("ServiceGRPOTrainer's samples come from the service, not TRL's "
                           "vLLM: set use_vllm=False (or train with TRL's GRPOTrainer)")
    if (type(config) is GRPOConfig and config.vllm_importance_sampling_correction
            and config.vllm_importance_sampling_mode == "sequence_mask"):
        _log.warning("vllm_importance_sampling_mode is GRPOConfig's default, sequence_mask: "
                     "a stale sequence is dropped whole, not weighted per token; pass "
                     "ServiceGRPOConfig (token_truncate by default) or set the mode")


def _trained(output: dict[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss counts: the completion's, less `env_mask`'s zeros."""
    mask = output["completion_mask"]
    if "tool_mask" in output:
        mask = mask * output["tool_mask"]
    return mask.bool()


def _clipped(ratio: torch.Tensor, mode: str, low: float | None,
             high: float | None) -> torch.Tensor:
    """Where TRL's final ratio shows the raw one left [low, high]: zeroed in the `*_mask`
    modes, pinned to a bound in the `*_truncate` ones."""
    if mode.endswith("_mask"):
        return ratio == 0
    hit = torch.zeros_like(ratio, dtype=torch.bool)
    if high is not None:
        hit |= ratio >= high
    if low is not None:
        hit |= ratio <= low
    return hit


def _versions_behind(versions: list[list[int | None]], current: list[int],
                     width: int) -> torch.Tensor:
    """(samples, width): how many versions each completion token's sampler is behind its
    sample's `current` (0 at least: one serving later counts as fresh); -1 where no
    version sampled it (tool output) and past the completion."""
    rows = [[-1 if v is None else max(now - v, 0) for v in tokens] + [-1] * (width - len(tokens))
            for tokens, now in zip(versions, current, strict=True)]
    return torch.tensor(rows, dtype=torch.long)


def _tasks(prompts: list[Any], n: int) -> list[tuple[str, str | None]]:
    """The task and harness (None: the prompt names none) of each block of `n` prompts
    (TRL repeats each prompt n times in a row: one block is one GRPO group)."""
    if not prompts or len(prompts) % n:
        raise TrainerError(f"{len(prompts)} prompts are no whole number of groups of {n}")
    tasks: list[tuple[str, str | None]] = []
    for start in range(0, len(prompts), n):
        block = prompts[start:start + n]
        if not isinstance(block[0], str) or any(p != block[0] for p in block):
            raise TrainerError("a GroupRollouts prompt is a task name (or `harness_prompt`'s "
                               f"task and harness), repeated num_generations ({n}) times; "
                               f"got {block[0]!r} (build the dataset with task_dataset)")
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
