"""A landed rollout's outcome as the run view shows it: why it stopped (its calls'
finish reasons, labelled, and its budget stops), its phase timings, and pass or fail by
its reward. `ok` alone says only that nothing broke: a rollout that ran cleanly to a
reward of 0 is `ok` and failed its task, and the page must not read it as a pass.
Plain data, no I/O."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any, Literal

from harbor_ray.data.result import RolloutResult

__all__ = ["FINISH_LABELS", "Verdict", "all_errored", "finishes", "outcome_view", "verdict"]

Verdict = Literal["pass", "partial", "fail", "error", "no reward"]

# What each finish reason means to someone reading a run; others are shown as they are.
FINISH_LABELS = {
    "length": "cut off at max tokens",
    "stop": "ended its reply",
    "tool_calls": "called a tool",
    "content_filter": "stopped by the engine's content filter",
    "abort": "aborted by the engine",
}


def verdict(reward: float | None, error_type: str | None) -> Verdict:
    """Pass (the full reward, 1 or more), partial (between 0 and 1), fail (0 or less),
    error (the rollout broke), or no reward (the verifier never ran)."""
    if error_type is not None:
        return "error"
    if reward is None:
        return "no reward"
    if reward >= 1:
        return "pass"
    return "fail" if reward <= 0 else "partial"


def finishes(reasons: Iterable[str]) -> list[dict[str, Any]]:
    """Each finish reason with how many calls ended so, most first, and its label."""
    return [
        {"reason": reason, "count": count, "label": FINISH_LABELS.get(reason)}
        for reason, count in Counter(reasons).most_common()
    ]


def outcome_view(
    result: RolloutResult, finish_reasons: Sequence[str], verifier_output: str | None
) -> dict[str, Any]:
    """What the page shows of a landed rollout. `finish_reasons`: its recorded calls'."""
    reasons = finishes(finish_reasons)
    return {
        "rollout_id": result.rollout_id,
        "task": result.task,
        "ok": result.ok,
        "reward": result.reward,
        "rewards": result.rewards,
        "verdict": verdict(result.reward, result.error_type),
        "error_type": result.error_type,
        "error": result.error,
        "model": result.model,
        "model_calls": result.model_calls,
        "finishes": reasons,
        "truncated": sum(r["count"] for r in reasons if r["reason"] == "length"),
        "budget_stops": None if result.counts is None else result.counts.budget_stops,
        "timings": result.timings,
        "duration_s": result.timings.get("total"),
        "verifier_output": verifier_output,
    }


def all_errored(outcomes: Sequence[dict[str, Any]]) -> str | None:
    """A run's error when every one of its rollouts broke (the first one's), else None:
    such a run did not do what it was started for, whatever its code returned."""
    if not outcomes or any(o["error_type"] is None for o in outcomes):
        return None
    first = outcomes[0]
    return (
        f"every rollout failed ({len(outcomes)}); the first: "
        f"{first['error_type']}: {first['error'] or 'no message'}"
    )
