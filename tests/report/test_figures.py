from __future__ import annotations

import math
from pathlib import Path

from harbor_ray.report.figures import plots
from tests.report.datasets import sample_tables, with_policy_versions

OFFLINE = [
    "reward-by-task",
    "pass-at-k",
    "error-types",
    "findings",
    "turns-tokens",
    "phase-times",
    "engine-over-time",
]


def _by_id(tables, **kwargs):
    return {p.id: p for p in plots(tables, **kwargs)}


def test_an_offline_dataset_has_every_plot_but_the_policy_one(tmp_path: Path) -> None:
    assert list(_by_id(sample_tables(tmp_path))) == OFFLINE


def test_policy_plot_appears_with_nullable_policy_columns(tmp_path: Path) -> None:
    # Rows: a1 (reward 1), b1 (reward 0), c1 (no reward, no version).
    tables = with_policy_versions(sample_tables(tmp_path), [3, 3, None], [5, 3, None])
    found = _by_id(tables)
    assert list(found) == [*OFFLINE, "policy"]
    traces = found["policy"].figure.data
    reward, staleness = traces[0], traces[1]
    assert reward.name == "3" and sorted(reward.y) == [0.0, 1.0]
    assert sorted(staleness.y) == [0, 2]
    assert len(traces) == 2  # the rollout without a version is in neither


def test_rewards_stay_unknown_and_pass_needs_the_threshold(tmp_path: Path) -> None:
    found = _by_id(sample_tables(tmp_path), pass_reward=0.5)
    rewards = {t.name: list(t.y) for t in found["reward-by-task"].figure.data}
    assert rewards == {"task-a": [1.0], "task-b": [0.0]}  # task-c's rollout has none
    assert "1 rollouts without one" in found["reward-by-task"].caption
    passes = {t.name: list(t.y) for t in found["pass-at-k"].figure.data}
    assert passes == {"task-a": [1.0], "task-b": [0.0], "task-c": [0.0]}


def test_engine_plot_counts_every_sampled_token(tmp_path: Path) -> None:
    tables = sample_tables(tmp_path)
    rate, in_flight = _by_id(tables)["engine-over-time"].figure.data
    width = rate.x[1] - rate.x[0]
    sampled = sum(len(t or []) for t in tables.turns["token_ids"].to_pylist())
    assert math.isclose(sum(rate.y) * width, sampled)
    assert max(in_flight.y) >= 1 and in_flight.y[-1] == 0
