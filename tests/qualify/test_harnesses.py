"""Every harness Harbor knows is in the table: qualified, or with its reason."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from harbor_ray.qualify.harnesses import (
    LEVEL_2_BLOCKED,
    LEVEL_2_SEEN,
    NOT_QUALIFIED,
    QUALIFIED,
    UNASSESSED,
    Harness,
    harbor_harnesses,
    harness_table,
)
from harbor_ray.qualify.report import QualifyReport

MODEL_REPORT = (
    Path(__file__).resolve().parents[2] / "docs" / "qualification" / "qualification-model.json"
)


def test_the_table_covers_every_harness_harbor_knows() -> None:
    # Fails when a Harbor upgrade adds a harness: give it its reason in NOT_QUALIFIED.
    known = set(harbor_harnesses())
    assert known - set(QUALIFIED) - NOT_QUALIFIED.keys() == set()
    assert all(h.reason != UNASSESSED for h in harness_table(known))


def test_the_table_names_no_harness_harbor_does_not_know() -> None:
    known = set(harbor_harnesses())
    assert NOT_QUALIFIED.keys() - known == set()
    assert set(QUALIFIED) <= known
    assert not NOT_QUALIFIED.keys() & set(QUALIFIED)


def test_twenty_one_qualified_the_rest_each_with_a_reason() -> None:
    table = harness_table(harbor_harnesses())
    assert [h.name for h in table if h.qualified] == sorted(QUALIFIED)
    assert len(QUALIFIED) == 21
    assert all(h.reason for h in table if not h.qualified)
    assert all(h.reason == "" for h in table if h.qualified)


def seen_at_level_2() -> set[str]:
    """The evidence, independent of the table and of LEVEL_2_SEEN: the agents of the
    level-2 (real model) report checked in under docs/ whose every row qualified."""
    report = QualifyReport.model_validate_json(MODEL_REPORT.read_text())
    assert report.level == "model"
    rows: defaultdict[str, list[bool]] = defaultdict(list)
    for row in report.rows:
        rows[row.agent].append(row.qualified)
    return {agent for agent, qualified in rows.items() if all(qualified)}


def test_level_2_is_claimed_for_exactly_the_agents_the_checked_in_run_qualified() -> None:
    assert seen_at_level_2() == LEVEL_2_SEEN


def test_the_table_shows_level_2_for_exactly_the_agents_the_checked_in_run_qualified() -> None:
    # Level 2 is counted only where its run was seen: an agent added later waits for its.
    table = harness_table(harbor_harnesses())
    assert {h.name for h in table if h.level_2} == seen_at_level_2()
    assert {h.name for h in table if h.level_2} <= {h.name for h in table if h.qualified}


def test_a_harness_the_table_does_not_name_is_shown_unassessed() -> None:
    assert harness_table(["codex", "brand-new", "codex"]) == (
        Harness("brand-new", False, UNASSESSED),
        Harness("codex", True, "", level_2=True),
    )


def test_a_harness_is_at_level_2_or_says_why_not_only_after_its_run_there() -> None:
    table = {h.name: h for h in harness_table(harbor_harnesses())}
    assert not LEVEL_2_BLOCKED.keys() & LEVEL_2_SEEN
    assert LEVEL_2_BLOCKED.keys() <= set(QUALIFIED)
    for name, reason in LEVEL_2_BLOCKED.items():
        assert table[name].qualified and not table[name].level_2
        assert table[name].level_2_reason == reason
    assert all(h.level_2_reason == "" for h in table.values() if h.name not in LEVEL_2_BLOCKED)
