"""The level-2 rotation over the real cells: every cell CI should run at level 2 within
the period rotation.py promises, four a day, stable within a day."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.qualify.rotation import (
    CELLS_AT_LEVEL_2,
    LEVEL_2_SIZE,
    PERIOD_DAYS,
    rotating_subset,
    today,
)

MODEL_REPORT = (
    Path(__file__).resolve().parents[2] / "docs" / "qualification" / "qualification-model.json"
)
# What rotation.py's docstring promises, written out here rather than derived from it.
PROMISED_PERIOD_DAYS = 13
PROMISED_CELLS_A_DAY = 4


def test_the_rotation_s_cells_are_every_cell_the_level_2_report_ran() -> None:
    """Independent of how rotation.py lists them: the cells of the checked-in level-2
    run (`qualify --profile all`, every cell of every qualified agent)."""
    report = json.loads(MODEL_REPORT.read_text())
    ran = {(row["agent"], row["profile"]) for row in report["rows"]}
    assert len(CELLS_AT_LEVEL_2) == len(set(CELLS_AT_LEVEL_2))
    assert set(CELLS_AT_LEVEL_2) == ran


def test_the_promised_period_and_daily_cost_are_the_rotation_s() -> None:
    assert (PERIOD_DAYS, LEVEL_2_SIZE) == (PROMISED_PERIOD_DAYS, PROMISED_CELLS_A_DAY)


@pytest.mark.parametrize("first", [*range(2 * PROMISED_PERIOD_DAYS), today()])
def test_every_cell_runs_within_the_period_from_any_day(first: int) -> None:
    days = [
        rotating_subset(CELLS_AT_LEVEL_2, day) for day in range(first, first + PROMISED_PERIOD_DAYS)
    ]
    assert {cell for day in days for cell in day} == set(CELLS_AT_LEVEL_2), first
    assert all(len(day) == PROMISED_CELLS_A_DAY for day in days)


def test_a_day_runs_its_cells_in_order_and_the_same_ones_when_rerun() -> None:
    chosen = rotating_subset(CELLS_AT_LEVEL_2, today())
    assert list(chosen) == sorted(chosen, key=CELLS_AT_LEVEL_2.index)
    assert rotating_subset(CELLS_AT_LEVEL_2, today()) == chosen
    assert rotating_subset(CELLS_AT_LEVEL_2, today() + 1) != chosen


def test_no_more_cells_than_the_window_runs_them_all() -> None:
    assert rotating_subset(CELLS_AT_LEVEL_2[:3], 7) == CELLS_AT_LEVEL_2[:3]
