"""`harbor-ray compare` on real sweeps' datasets (three stand-in models of known pass
rates), its figures checked against what the test computes from the rows itself."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from harbor_ray.cli.options import Exit
from tests.cli.test_errors import invoke
from tests.report.by_hand import (
    enumerated_pass_at_k,
    jackknife_variance,
    score_test_bounds,
    t_interval,
)
from tests.report.conftest import MODELS

pytestmark = pytest.mark.integration


def task_counts(out: Path) -> dict[str, tuple[int, int]]:
    """(passing, attempts) by task, from the dataset's rollouts/ rows."""
    counts: dict[str, list[int]] = {}
    for row in pq.read_table(out / "rollouts", columns=["task", "reward"]).to_pylist():
        passes, attempts = counts.setdefault(row["task"], [0, 0])
        counts[row["task"]] = [
            passes + (row["reward"] is not None and row["reward"] >= 1.0),
            attempts + 1,
        ]
    return {task: (c, n) for task, (c, n) in counts.items()}


def assert_estimate(got: dict[str, Any], want: tuple[float, float | None, float | None]) -> None:
    value, low, high = want
    assert got["value"] == pytest.approx(value, abs=1e-9)
    assert got["low"] == pytest.approx(low, abs=1e-6)
    assert got["high"] == pytest.approx(high, abs=1e-6)


def compare_json(*outs: Path) -> dict[str, Any]:
    done = invoke("compare", *map(str, outs), "--format", "json")
    assert done.returncode == Exit.ALL_OK, done.output
    return json.loads(done.stdout)


def assert_matches_the_rows(doc: dict[str, Any], outs: list[Path]) -> None:
    counts = [task_counts(out) for out in outs]
    shared = sorted(set.intersection(*(set(c) for c in counts)))
    k_max = min(c[task][1] for c in counts for task in shared)
    assert doc["shared_tasks"] == shared and doc["k_max"] == k_max
    for run, c, out in zip(doc["runs"], counts, outs, strict=True):
        assert run["label"] == out.name  # the served model each sweep's rows name
        passes = sum(c[task][0] for task in shared)
        rollouts = sum(c[task][1] for task in shared)
        assert (run["rollouts"], run["passes"]) == (rollouts, passes)
        assert_estimate(run["pass_rate"], (passes / rollouts, *score_test_bounds(passes, rollouts)))
        for k in range(1, k_max + 1):
            per_task = [enumerated_pass_at_k(c[t][1], c[t][0], k) for t in shared]
            within = [jackknife_variance(c[t][1], c[t][0], k) for t in shared]
            assert_estimate(run["pass_at_k"][k - 1], t_interval(per_task, within))
        assert run["error_types"] == {"none": rollouts}
        assert run["turns"] == {"mean": 1.0, "median": 1.0, "rollouts": rollouts}
    for difference, c in zip(doc["differences"], counts[1:], strict=True):
        base = counts[0]
        for k in range(1, k_max + 1):
            paired = [
                enumerated_pass_at_k(c[t][1], c[t][0], k)
                - enumerated_pass_at_k(base[t][1], base[t][0], k)
                for t in shared
            ]
            within = [
                jackknife_variance(c[t][1], c[t][0], k)
                + jackknife_variance(base[t][1], base[t][0], k)
                for t in shared
            ]
            assert_estimate(difference["pass_at_k"][k - 1], t_interval(paired, within, (-1.0, 1.0)))
        assert difference["solved_only_here"] == [t for t in shared if c[t][0] and not base[t][0]]
        assert difference["solved_only_baseline"] == [
            t for t in shared if base[t][0] and not c[t][0]
        ]


def test_a_trained_model_against_its_base(compared_sweeps: dict[str, Path]) -> None:
    outs = [compared_sweeps["base-model"], compared_sweeps["trained-model"]]
    # The sweeps ran as planned: the stand-ins' pass rates are the known ones.
    for out in outs:
        passes, attempts = MODELS[out.name]
        assert task_counts(out) == {t: (c, attempts) for t, c in passes.items()}
    doc = compare_json(*outs)
    assert_matches_the_rows(doc, outs)
    assert doc["notes"] == []  # same tasks, same attempts: like with like
    [difference] = doc["differences"]
    assert difference["solved_only_here"] == ["count-words"]
    assert difference["better"] == ["count-words", "hello-file"]


def test_runs_that_differ_are_compared_on_what_they_share(compared_sweeps: dict[str, Path]) -> None:
    outs = [compared_sweeps[m] for m in ("base-model", "trained-model", "hosted-model")]
    doc = compare_json(*outs)
    assert_matches_the_rows(doc, outs)
    assert doc["shared_tasks"] == ["count-words", "hello-file"] and doc["k_max"] == 2
    notes = "\n".join(doc["notes"])
    assert "base-model: 1 task(s) not in every dataset, left out (4 rollouts): fix-mean" in notes
    assert (
        "hosted-model: 1 task(s) not in every dataset, left out (2 rollouts): "
        "greet-function" in notes
    )
    assert "attempts per task differ" in notes and "up to k=2" in notes


def test_markdown_and_the_refusals(compared_sweeps: dict[str, Path], tmp_path: Path) -> None:
    base, trained = compared_sweeps["base-model"], compared_sweeps["trained-model"]
    done = invoke(
        "compare",
        str(base),
        str(trained),
        "--format",
        "md",
        "--label",
        "base",
        "--label",
        "step-10",
    )
    assert done.returncode == Exit.ALL_OK, done.output
    assert done.stdout.startswith("# Comparison: base vs step-10\n")
    assert "| k | base | step-10 | step-10 - base |" in done.stdout
    page = tmp_path / "page.html"
    done = invoke("compare", str(base), str(trained), "--to", str(page))
    assert done.returncode == Exit.ALL_OK and f"comparison: {page}" in done.output
    assert page.read_text().startswith("<!doctype html>")
    for args, says in [
        ((str(base),), "at least two"),
        ((str(base), str(base)), "--label"),
        ((str(base), str(trained), "--label", "one"), "1 --label for 2"),
        ((str(base), str(tmp_path)), "is not a dataset"),
    ]:
        done = invoke("compare", *args, "--format", "json")
        assert done.returncode == Exit.COULD_NOT_START, done.output
        assert "error:" in done.output and says in done.output, done.output
        assert "Traceback" not in done.output
