"""`ServiceGRPOTrainer` and `ServiceGRPOConfig`: TRL's `GRPOTrainer` on the service's
samples, with TRL's importance-sampling correction against the recorded logprobs, and
the staleness, rollouts and timing of what it trains logged through TRL's `log`
(docs/trainers.md)."""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch
from accelerate.utils import gather_object  # type: ignore[import-untyped]  # untyped
from trl import GRPOConfig, GRPOTrainer

from harbor_ray.errors import TrainerError
from harbor_ray.integrations.figures import (
    HARNESS_PREFIX,
    SUMMED,
    harness_metrics,
    rollout_metrics,
)

__all__ = ["ServiceGRPOConfig", "ServiceGRPOTrainer"]

_log = logging.getLogger(__name__)

# The trained tokens' staleness buckets (versions behind the one serving at submit), as
# `ServiceGRPOTrainer` logs them: `staleness/tokens_0`, `_1`, `_2+`.
_STALENESS = ("0", "1", "2+")


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
        metadata={
            "help": "How the recorded logprobs' importance ratios are applied: "
            "'token_truncate' (the default here), 'token_mask', 'sequence_truncate' "
            "or 'sequence_mask' (TRL's GRPOConfig)."
        },
    )


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
        self._seconds["train"] += time.monotonic() - started - (self._seconds["rollout"] - rollout)
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
        keys = sorted(k for k in SUMMED if k in figures)
        summed = self.accelerator.reduce(
            torch.tensor([float(figures[k]) for k in keys], device=self.accelerator.device),
            reduction="sum",
        ).tolist()
        for name, value in rollout_metrics(dict(zip(keys, summed, strict=True))).items():
            self._metrics[self._mode()][name].append(value)
        # Processes may have run different harnesses: their sums are gathered by name.
        harnesses: dict[str, float] = {}
        for part in gather_object(
            [{k: v for k, v in figures.items() if k.startswith(HARNESS_PREFIX)}]
        ):
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
        clipped = _clipped(
            ratio,
            self.vllm_importance_sampling_mode,
            self.vllm_importance_sampling_clip_min,
            self.vllm_importance_sampling_clip_max,
        ).expand_as(trained)
        counts = torch.stack([(clipped & trained).sum(), trained.sum()]).float()
        hit, total = self.accelerator.reduce(counts, reduction="sum").tolist()
        self._metrics[self._mode()]["sampling/importance_sampling_ratio/clipped_fraction"].append(
            hit / total if total else 0.0
        )

    def _log_staleness(self, inputs: list[dict[str, Any]], output: dict[str, Any]) -> None:
        """Trained tokens by versions behind the one serving at submit (TRL merged the
        rollout_func's `policy_versions` and `policy_version` columns into `inputs`)."""
        if any("policy_versions" not in x or x.get("policy_version") is None for x in inputs):
            return  # not GroupRollouts' samples: nothing says which version sampled them
        trained = _trained(output)
        behind = _versions_behind(
            [x["policy_versions"] for x in inputs],
            [x["policy_version"] for x in inputs],
            trained.shape[1],
        )
        behind = behind.to(trained.device)
        counts = torch.stack(
            [
                ((behind == 0) & trained).sum(),
                ((behind == 1) & trained).sum(),
                ((behind >= 2) & trained).sum(),
            ]
        )
        summed = self.accelerator.reduce(counts, reduction="sum").tolist()
        for bucket, count in zip(_STALENESS, summed, strict=True):
            self._metrics[self._mode()][f"staleness/tokens_{bucket}"].append(float(count))


def _check_service_setup(config: GRPOConfig | None, rollout_func: Any) -> None:
    if rollout_func is None:
        raise TrainerError(
            "ServiceGRPOTrainer trains on the service's samples: pass "
            "rollout_func=GroupRollouts(client, agent)"
        )
    if config is not None and config.use_vllm:
        raise TrainerError(
            "ServiceGRPOTrainer's samples come from the service, not TRL's "
            "vLLM: set use_vllm=False (or train with TRL's GRPOTrainer)"
        )
    if (
        type(config) is GRPOConfig
        and config.vllm_importance_sampling_correction
        and config.vllm_importance_sampling_mode == "sequence_mask"
    ):
        _log.warning(
            "vllm_importance_sampling_mode is GRPOConfig's default, sequence_mask: "
            "a stale sequence is dropped whole, not weighted per token; pass "
            "ServiceGRPOConfig (token_truncate by default) or set the mode"
        )


def _trained(output: dict[str, Any]) -> torch.Tensor:
    """The tokens TRL's loss counts: the completion's, less `env_mask`'s zeros."""
    mask = output["completion_mask"]
    if "tool_mask" in output:
        mask = mask * output["tool_mask"]
    return mask.bool()


def _clipped(ratio: torch.Tensor, mode: str, low: float | None, high: float | None) -> torch.Tensor:
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


def _versions_behind(
    versions: list[list[int | None]], current: list[int], width: int
) -> torch.Tensor:
    """(samples, width): how many versions each completion token's sampler is behind its
    sample's `current` (0 at least: one serving later counts as fresh); -1 where no
    version sampled it (tool output) and past the completion."""
    rows = [
        [-1 if v is None else max(now - v, 0) for v in tokens] + [-1] * (width - len(tokens))
        for tokens, now in zip(versions, current, strict=True)
    ]
    return torch.tensor(rows, dtype=torch.long)
