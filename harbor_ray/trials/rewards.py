"""Choosing the one reward a rollout is trained on, from the verifier's rewards as written.

Rewards are forwarded, never recomputed: the verifier's dict travels verbatim, each key
judged on its own (finite numbers only, the rest dropped and named), and the scalar is
the named key, else the only key, else `reward`, else refused. `raw=None` (the verifier
never ran) gives reward None, never 0.0. The rules and why: docs/rollouts.md, "The
reward".
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from numbers import Real
from typing import Any

from harbor_ray.capture.core.findings import Severity
from harbor_ray.data.result import FindingRecord

__all__ = ["REWARD_KEY", "RewardChoice", "RewardCode", "findings_for", "select_reward"]

# The conventional name a multi-key verifier gives its scalar; reward.txt becomes it too.
REWARD_KEY = "reward"


class RewardCode(StrEnum):
    """Finding codes of this module. Written to datasets: never rename."""

    KEY_DROPPED = "reward_key_dropped"  # WARN: a key not trained on is unusable
    EMPTY = "reward_empty"  # FATAL: the verifier wrote a dict with no keys
    AMBIGUOUS = "reward_ambiguous"  # FATAL: several keys, none named and no `reward`
    KEY_MISSING = "reward_key_missing"  # FATAL: the named key is not there
    UNUSABLE = "reward_unusable"  # FATAL: the chosen key's value is not a finite number


@dataclass(frozen=True)
class RewardChoice:
    """The outcome of the rule. `reward` is None whenever `error` is set.

    `reward_key` is the key the rule designated (named, only, or `reward`), also when
    its value turned out unusable or absent; None when no key could be designated.
    `rewards` holds every usable key as a float; `dropped` names the others, in the
    verifier's order, with the reason.
    """

    reward: float | None
    reward_key: str | None
    rewards: dict[str, float] = field(default_factory=dict)
    dropped: tuple[tuple[str, str], ...] = ()
    error: str | None = None
    problem: RewardCode | None = None  # the FATAL code matching `error`


def select_reward(raw: Mapping[str, Any] | None, *, key: str | None = None) -> RewardChoice:
    """Apply the rule above to the verifier's rewards. Never raises on bad values."""
    if raw is None:
        return RewardChoice(reward=None, reward_key=None)
    rewards: dict[str, float] = {}
    dropped: dict[str, str] = {}
    for name, value in raw.items():
        number, reason = _coerce(value)
        if number is None:
            dropped[name] = reason
        else:
            rewards[name] = number
    chosen, problem, error = _verdict(raw, key, dropped)
    return RewardChoice(
        reward=rewards[chosen] if chosen is not None and problem is None else None,
        reward_key=chosen,
        rewards=rewards,
        dropped=tuple(dropped.items()),
        error=error,
        problem=problem,
    )


def findings_for(choice: RewardChoice) -> list[FindingRecord]:
    """The choice as findings: a WARN per dropped side key, a FATAL if no scalar.

    The trained-on key is not reported as dropped as well: its FATAL finding already
    names it and says why.
    """
    findings = [
        FindingRecord(
            code=RewardCode.KEY_DROPPED,
            severity=Severity.WARN,
            message=f"reward key {name!r} dropped: {reason}",
        )
        for name, reason in choice.dropped
        if name != choice.reward_key
    ]
    if choice.problem is not None:
        findings.append(
            FindingRecord(code=choice.problem, severity=Severity.FATAL, message=choice.error or "")
        )
    return findings


def _coerce(value: Any) -> tuple[float | None, str]:
    """A usable reward as a float, or None and the reason it is not one."""
    # bool is an int subclass: it must be refused before the number check admits it.
    if isinstance(value, bool):
        return None, f"a boolean ({str(value).lower()}) is not a reward; write 1 or 0"
    if value is None:
        return None, "null"
    if isinstance(value, str):
        return None, f"text ({value!r}), not a number"
    if isinstance(value, Mapping | list | tuple):
        return None, f"a nested {type(value).__name__}, not a number"
    if not isinstance(value, Real):
        return None, f"a {type(value).__name__}, not a number"
    try:
        number = float(value)
    except OverflowError:  # an int too large for a float
        return None, "too large for a float"
    if not math.isfinite(number):
        return None, f"not finite ({number})"
    return number, ""


def _verdict(
    raw: Mapping[str, Any], key: str | None, dropped: Mapping[str, str]
) -> tuple[str | None, RewardCode | None, str | None]:
    """The key the rule designates, and what is wrong with it (None: nothing)."""
    chosen = key
    if chosen is None:
        if not raw:
            return None, RewardCode.EMPTY, "the verifier wrote no reward keys"
        if len(raw) == 1:
            chosen = next(iter(raw))
        elif REWARD_KEY in raw:
            chosen = REWARD_KEY
        else:
            return (
                None,
                RewardCode.AMBIGUOUS,
                f"cannot choose among reward keys ({_names(raw)}): name the key to train "
                f"on, or have the verifier write one named {REWARD_KEY!r}",
            )
    if chosen not in raw:
        return (
            chosen,
            RewardCode.KEY_MISSING,
            f"reward key {chosen!r} is not among the verifier's keys ({_names(raw)})",
        )
    if chosen in dropped:
        return chosen, RewardCode.UNUSABLE, f"reward key {chosen!r} is unusable: {dropped[chosen]}"
    return chosen, None, None


def _names(raw: Mapping[str, Any]) -> str:
    return ", ".join(repr(name) for name in raw) or "none"
