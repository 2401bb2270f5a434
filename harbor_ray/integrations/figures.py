"""What one call for rollouts did, as a trainer logs it: `call_figures` (sums over a
call's groups and samples, which a trainer adds up over its processes) and their logged
forms, `rollout_metrics` (`rollouts/*`, `groups/*`) and `harness_metrics`
(`harness/<agent>/*`). Shared by the TRL and SkyRL integrations; pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from harbor_ray.online.wire import Group

__all__ = ["HARNESS_PREFIX", "SUMMED", "call_figures", "harness_metrics", "rollout_metrics"]

# `call_figures` that add up over processes (the rest: the call's own, not logged).
SUMMED = (
    "rollouts",
    "scored",
    "reward_sum",
    "reward_sq_sum",
    "turns",
    "sampled_tokens",
    "stale_dropped",
    "stale_masked_tokens",
    "no_signal_dropped",
    "no_signal_kept",
    "extra_rollouts",
)


# `call_figures`' per-harness sums, and the per-harness figures `ServiceGRPOTrainer` logs.
HARNESS_PREFIX = "harness/"


def harness_metrics(figures: dict[str, float]) -> dict[str, float]:
    """The logged form of `call_figures`' per-harness sums (summed over processes):
    `harness/<agent>/` `reward_mean`, `reward_std`, `turns_mean`, `sampled_tokens_mean`
    and `unscored` as `rollout_metrics` makes them of that harness's rollouts alone, and
    its `rollouts`."""
    by_harness: dict[str, dict[str, float]] = {}
    for key, value in figures.items():
        if key.startswith(HARNESS_PREFIX):
            agent, _, name = key[len(HARNESS_PREFIX) :].rpartition("/")
            by_harness.setdefault(agent, {})[name] = value
    metrics: dict[str, float] = {}
    for agent, sums in sorted(by_harness.items()):
        prefix = f"{HARNESS_PREFIX}{agent}/"
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
            max(figures["reward_sq_sum"] / scored - mean * mean, 0.0)
        )
    if rollouts:
        metrics["rollouts/turns_mean"] = figures.get("turns", 0.0) / rollouts
        metrics["rollouts/sampled_tokens_mean"] = figures.get("sampled_tokens", 0.0) / rollouts
        metrics["rollouts/unscored"] = rollouts - scored
    for key, name in (
        ("stale_dropped", "rollouts/stale_dropped"),
        ("stale_masked_tokens", "rollouts/stale_masked_tokens"),
        ("no_signal_dropped", "groups/no_signal_dropped"),
        ("no_signal_kept", "groups/no_signal_kept"),
        ("extra_rollouts", "groups/extra_rollouts"),
    ):
        if key in figures:
            metrics[name] = figures[key]
    return metrics


def call_figures(
    groups: Sequence[Group], samples: Sequence[dict[str, Any]], seconds: float, version: int
) -> dict[str, float]:
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
    turns = {
        row["rollout_id"]: (row.get("counts") or {}).get("turns") or 0
        for group in groups
        for row in group.rollouts
    }
    by_harness: dict[str, list[dict[str, Any]]] = {}
    for sample in samples:
        if (agent := sample.get("agent")) is not None:
            by_harness.setdefault(agent, []).append(sample)
    return {
        "groups": float(len(groups)),
        **_sums(samples, turns),
        "trainable": float(sum(bool(s["trainable"]) for s in samples)),
        "stale_dropped": float(sum(bool(s["stale_dropped"]) for s in samples)),
        "stale_masked_tokens": float(
            sum(s["stale_masked"] for s in samples) + sum(g.masked_tokens for g in groups)
        ),
        "no_signal_dropped": float(sum(g.no_signal_dropped for g in groups)),
        "no_signal_kept": float(sum(g.no_signal for g in groups)),
        "extra_rollouts": float(sum(g.no_signal_dropped * g.n for g in groups)),
        "seconds": seconds,
        "policy_version": float(version),
        **{
            f"{HARNESS_PREFIX}{agent}/{key}": value
            for agent, mine in by_harness.items()
            for key, value in _sums(mine, turns).items()
        },
    }


def _sums(samples: Sequence[dict[str, Any]], turns: dict[str, int]) -> dict[str, float]:
    """Rollouts, their rewards (over the scored ones), turns and sampled tokens."""
    rewards = [s["reward"] for s in samples if s["reward"] is not None]
    return {
        "rollouts": float(len(samples)),
        "scored": float(len(rewards)),
        "reward_sum": float(sum(rewards)),
        "reward_sq_sum": float(sum(r * r for r in rewards)),
        "turns": float(sum(turns.get(s["rollout_id"], 0) for s in samples)),
        "sampled_tokens": float(sum(s["sampled_tokens"] for s in samples)),
    }
