"""The comparison's core on datasets written by the real writer: what it counts, what
it leaves out and says so, and what it refuses."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.result import ErrorType
from harbor_ray.errors import ComparisonError
from harbor_ray.report.compare import compare_datasets
from harbor_ray.report.comparison import Run, compare
from harbor_ray.report.comparison_tables import comparison_tables, markdown
from harbor_ray.report.tables import read_tables
from tests.data.rollouts import chain, evaluated, rollout
from tests.report.datasets import write_dataset


def _record(
    task: str, attempt: int, reward: float | None, model: str, **fields: Any
) -> RolloutRecord:
    return rollout(
        f"{task}__{attempt}__{model}",
        chain(2),
        task=task,
        attempt=attempt,
        reward=reward,
        model=model,
        **fields,
    )


def _run(
    tmp_path: Path,
    label: str,
    passes: dict[str, tuple[int, int]],
    extra: list[RolloutRecord] = (),
    manifest: dict[str, Any] | None = None,
) -> Run:
    """A run of `label` with passes[task] = (passing, attempts)."""
    records = [
        _record(task, attempt, 1.0 if attempt < c else 0.0, label)
        for task, (c, n) in passes.items()
        for attempt in range(n)
    ]
    out = write_dataset(tmp_path / label, [*records, *extra])
    tables = read_tables(out)
    if manifest:
        tables = type(tables)(
            tables.rollouts, tables.turns, tables.sequences, {**tables.manifest, **manifest}
        )
    return Run(label, str(out), tables)


def test_two_runs_on_the_same_tasks(tmp_path: Path) -> None:
    base = _run(tmp_path, "base", {"a": (1, 4), "b": (0, 4), "c": (4, 4)})
    trained = _run(tmp_path, "trained", {"a": (3, 4), "b": (2, 4), "c": (4, 4)})
    comparison = compare([base, trained])
    assert comparison.shared_tasks == ["a", "b", "c"] and comparison.k_max == 4
    assert comparison.notes == []  # like with like: nothing to say
    base_s, trained_s = comparison.runs
    assert (base_s.rollouts, base_s.passes, trained_s.passes) == (12, 5, 9)
    assert base_s.pass_rate.value == 5 / 12
    # pass@1 is the mean of the per-task rates; pass@4 the share of tasks solved.
    assert math.isclose(base_s.pass_at_k[0].value, (0.25 + 0 + 1) / 3)
    assert math.isclose(base_s.pass_at_k[3].value, 2 / 3)
    [difference] = comparison.differences
    assert math.isclose(difference.pass_at_k[0].value, (0.5 + 0.5 + 0) / 3)
    assert difference.better == ["a", "b"] and difference.worse == []
    assert difference.solved_only_here == ["b"] and difference.solved_only_baseline == []
    assert base_s.error_types == {"none": 12}
    assert base_s.turns.mean == 2 and base_s.turns.rollouts == 12


def test_tasks_and_attempts_that_differ_are_said_and_left_out(tmp_path: Path) -> None:
    base = _run(tmp_path, "base", {"a": (1, 4), "b": (2, 4), "only-base": (1, 4)})
    hosted = _run(tmp_path, "hosted", {"a": (2, 2), "b": (0, 3), "only-hosted": (1, 2)})
    comparison = compare([base, hosted])
    assert comparison.shared_tasks == ["a", "b"]
    assert comparison.k_max == 2  # the fewest attempts at a shared task
    assert [len(run.pass_at_k) for run in comparison.runs] == [2, 2]
    assert comparison.runs[0].rollouts == 8 and comparison.runs[1].rollouts == 5
    assert comparison.runs[0].left_out == {"only-base": 4}
    assert comparison.runs[1].left_out == {"only-hosted": 2}
    notes = "\n".join(comparison.notes)
    assert "base: 1 task(s) not in every dataset, left out (4 rollouts): only-base" in notes
    assert "hosted: 1 task(s) not in every dataset, left out (2 rollouts): only-hosted" in notes
    assert "attempts per task differ (base: 4; hosted: 2 to 3): pass@k is shown up to k=2" in notes
    # The same notes head the Markdown, so a table pasted into a paper carries them.
    text = markdown(comparison)
    assert "only-base" in text and "only-hosted" in text and "k=2" in text


def test_unrewarded_and_retried_rows(tmp_path: Path) -> None:
    lost = rollout(
        "a__0__base@host-1",
        None,
        task="a",
        attempt=0,
        reward=None,
        ok=False,
        partial=True,
        error_type=ErrorType.INFRA_LOST,
        error="host died",
        model="base",
    )
    dead = _record("a", 4, None, "base", error_type=ErrorType.SANDBOX_START, error="slow")
    # Attempt 5 was lost on every try: the retry's row is partial too.
    lost_twice = [
        rollout(
            rollout_id,
            None,
            task="a",
            attempt=5,
            reward=None,
            ok=False,
            partial=True,
            error_type=ErrorType.INFRA_LOST,
            error="host died",
            model="base",
        )
        for rollout_id in ("a__5__base@host-2", "a__5__base")
    ]
    base = _run(tmp_path, "base", {"a": (1, 4)}, extra=[lost, dead, *lost_twice])
    other = _run(tmp_path, "other", {"a": (1, 6)})
    comparison = compare([base, other])
    summary = comparison.runs[0]
    # A lost try that was retried is not an attempt of its own; the dead rollout is one,
    # and so is attempt 5, once.
    assert summary.rollouts == 6 and summary.passes == 1 and summary.unrewarded == 2
    assert summary.error_types == {"none": 4, "sandbox_start": 1, "infra_lost": 1}
    assert (
        "base: 2 rollout(s) without a reward (the verifier never ran), counted as not "
        "passing" in comparison.notes
    )
    assert any("2 row(s) of lost tries left out" in note for note in comparison.notes)
    assert "one shared task" in " ".join(comparison.notes)
    assert comparison.runs[0].pass_at_k[0].low is None  # one task: no interval


def test_sampled_tokens_count_usage_where_no_ids_were_recorded(tmp_path: Path) -> None:
    text = rollout("a__0__hosted", evaluated(chain(2)), task="a", attempt=0, model="hosted")
    hosted = Run("hosted", "h", read_tables(write_dataset(tmp_path / "h", [text])))
    base = _run(tmp_path, "base", {"a": (1, 1)})
    comparison = compare([base, hosted])
    assert comparison.runs[1].sampled_tokens.mean == 2 * 3  # two turns, usage says 3 each
    assert comparison.runs[0].sampled_tokens.mean == sum(
        len(ids) for ids in read_tables(base.source).turns["token_ids"].to_pylist()
    )


def test_settings_that_differ_are_listed(tmp_path: Path) -> None:
    base = _run(tmp_path, "base", {"a": (1, 2)}, manifest={"temperature": 0.7})
    other = _run(tmp_path, "other", {"a": (1, 2)}, manifest={"temperature": 1.0})
    comparison = compare([base, other])
    assert comparison.settings == {"temperature": [0.7, 1.0]}
    assert "settings differ: temperature: base 0.7, other 1.0" in comparison.notes


def test_what_cannot_be_compared_is_refused(tmp_path: Path) -> None:
    base = _run(tmp_path, "base", {"a": (1, 2)})
    other = _run(tmp_path, "other", {"b": (1, 2)})
    with pytest.raises(
        ComparisonError, match="no task is in every dataset: base has a; other has b"
    ):
        compare([base, other])
    many = _run(tmp_path, "many", {f"t{i}": (1, 1) for i in range(7)})
    with pytest.raises(
        ComparisonError,
        match=r"many has t0, t1, t2, t3, t4, \.\.\. \(7 in "
        r"all\)\. Sweep them on the same tasks",
    ):
        compare([base, many])
    with pytest.raises(ComparisonError, match="--label"):
        compare([base, Run("base", "x", base.tables)])
    with pytest.raises(ComparisonError, match="at least two"):
        compare([base])


def test_the_tables_carry_the_figures(tmp_path: Path) -> None:
    base = _run(tmp_path, "base", {"a": (1, 4), "b": (0, 4)})
    trained = _run(tmp_path, "trained", {"a": (3, 4), "b": (2, 4)})
    tables = {t.id: t for t in comparison_tables(compare([base, trained]))}
    assert list(tables) == ["runs", "pass-at-k", "where", "tasks", "error-types", "provenance"]
    assert tables["pass-at-k"].header == ["k", "base", "trained", "trained - base"]
    assert tables["pass-at-k"].rows[0][3].startswith("+0.50 [")
    assert tables["tasks"].rows[0][:2] == ["a", "1/4: 0.25 [0.05, 0.70]"]
    assert tables["where"].rows == [["trained vs base", "a, b", "none", "b", "none"]]


def test_runs_of_one_model_are_told_apart_by_their_directory(tmp_path: Path) -> None:
    for name in ("before", "after"):
        write_dataset(tmp_path / name, [_record("a", 0, 1.0, "smol")])
    comparison = compare_datasets([tmp_path / "before", tmp_path / "after"])
    assert [run.label for run in comparison.runs] == ["smol (before)", "smol (after)"]
    labelled = compare_datasets(
        [tmp_path / "before", tmp_path / "after"], labels=["base", "step-3"]
    )
    assert [run.label for run in labelled.runs] == ["base", "step-3"]
