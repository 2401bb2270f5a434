"""The rotating level-2 subset: every agent within six days, stable within a day."""

from __future__ import annotations

import math

from tests.qualify.rotation import AT_LEVEL_2, LEVEL_2_SIZE, rotating_subset

AGENTS = tuple(f"agent-{i}" for i in range(10))


def test_every_agent_ci_runs_at_level_2_is_run_within_six_days() -> None:
    """The real list: what rotation.py's docstring promises of today's 21 agents."""
    assert len(AT_LEVEL_2) == 21 and math.ceil(len(AT_LEVEL_2) / LEVEL_2_SIZE) == 6
    for first in range(0, 60):
        days = [rotating_subset(AT_LEVEL_2, day) for day in range(first, first + 6)]
        assert {a for day in days for a in day} == set(AT_LEVEL_2), first
        assert all(len(day) == LEVEL_2_SIZE for day in days)


def test_a_day_runs_four_in_their_order_and_the_same_four_when_rerun() -> None:
    chosen = rotating_subset(AGENTS, 20_425)
    assert len(chosen) == 4 and list(chosen) == sorted(chosen, key=AGENTS.index)
    assert rotating_subset(AGENTS, 20_425) == chosen
    assert rotating_subset(AGENTS, 20_426) != chosen


def test_no_more_agents_than_the_window_runs_them_all() -> None:
    assert rotating_subset(AGENTS[:3], 7) == AGENTS[:3]
