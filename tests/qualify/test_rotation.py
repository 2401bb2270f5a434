"""The rotating level-2 subset: every agent within three days, stable within a day."""

from __future__ import annotations

from tests.qualify.rotation import rotating_subset

AGENTS = tuple(f"agent-{i}" for i in range(10))


def test_every_agent_is_run_within_three_days() -> None:
    for first in range(0, 30):
        seen = {a for day in range(first, first + 3) for a in rotating_subset(AGENTS, day)}
        assert seen == set(AGENTS), first


def test_a_day_runs_four_in_their_order_and_the_same_four_when_rerun() -> None:
    chosen = rotating_subset(AGENTS, 20_425)
    assert len(chosen) == 4 and list(chosen) == sorted(chosen, key=AGENTS.index)
    assert rotating_subset(AGENTS, 20_425) == chosen
    assert rotating_subset(AGENTS, 20_426) != chosen


def test_no_more_agents_than_the_window_runs_them_all() -> None:
    assert rotating_subset(AGENTS[:3], 7) == AGENTS[:3]
