"""Runs side by side: did training help? Pure (each run's Arrow tables in, one typed
`Comparison` out).

Like with like, or said so. Every figure is computed on the tasks every run holds (the
shared tasks); the tasks only some runs hold are named in a note with the rollouts left
out, never averaged in. pass@k goes up to the fewest attempts any run made at a shared
task (the estimator needs k <= n), and a note says when the attempts differ. Runs made
with different settings (agent, temperature, ...) are compared, and the settings that
differ are listed; so are the rows' provenance fields (comparison_provenance.py), with
a note for each that is not the weights.

A rollout passes when its reward is at least `pass_reward`; a rollout without a reward
(the verifier never ran: an infrastructure or agent error) does not pass, as in the
report, and a note counts them. A lost try that was retried (`<rollout_id>@<host>`,
`partial`) is left out: each attempt counts once, as its retried row (or, when every
try was lost, as one of them).

The first run is the baseline: each other run gets its difference from it ("B minus
A"), the per-task paired difference of pass@k averaged over shared tasks with a
Student-t interval, never narrower than the attempts' own noise (stats.py says why),
and the tasks it solves that the baseline does not and the reverse (solved: at least
one passing attempt).
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import pyarrow as pa

from harbor_ray.errors import ComparisonError
from harbor_ray.report.comparison_provenance import (
    ProvenanceRow,
    provenance_notes,
    provenance_rows,
)
from harbor_ray.report.comparison_rows import Rows, read_rows
from harbor_ray.report.stats import (
    LEVEL,
    Estimate,
    mean_interval,
    pass_at_k,
    pass_at_k_variance,
    wilson,
)
from harbor_ray.report.tables import DatasetTables

__all__ = [
    "NO_ERROR",
    "SETTINGS",
    "Comparison",
    "Difference",
    "Run",
    "RunSummary",
    "Spread",
    "TaskCell",
    "TaskRow",
    "compare",
    "run_label",
]

NO_ERROR = "none"  # the error type of a rollout that did not fail
# The manifest settings that change what a run measures; a comparison lists those that
# differ between its runs (the model is each run's label).
SETTINGS = (
    "agent",
    "sandbox",
    "dataset",
    "temperature",
    "max_tokens",
    "budget",
    "deadline_s",
    "reward_key",
    "host_userland",
)


@dataclass(frozen=True)
class Run:
    """One dataset to compare: its label (the model, or the user's), where it was read,
    and its committed rows."""

    label: str
    source: str
    tables: DatasetTables


@dataclass(frozen=True)
class Spread:
    """A per-rollout count over the rollouts that have it (those with a capture)."""

    mean: float | None
    median: float | None
    rollouts: int


@dataclass(frozen=True)
class RunSummary:
    label: str
    source: str
    models: list[str]
    rollouts: int  # on the shared tasks
    passes: int
    pass_rate: Estimate  # passes / rollouts, Wilson interval
    pass_at_k: list[Estimate]  # k = 1.. k_max: mean over shared tasks, t interval
    turns: Spread
    sampled_tokens: Spread
    error_types: dict[str, int]
    unrewarded: int
    left_out: dict[str, int]  # tasks not shared -> this run's rollouts of them


@dataclass(frozen=True)
class TaskCell:
    passes: int
    attempts: int
    rate: Estimate  # Wilson


@dataclass(frozen=True)
class TaskRow:
    task: str
    cells: list[TaskCell]  # one per run, in run order


@dataclass(frozen=True)
class Difference:
    """`label` minus `baseline`, on the shared tasks."""

    label: str
    baseline: str
    pass_at_k: list[Estimate]  # k = 1.. k_max
    better: list[str]  # tasks with a higher pass rate than the baseline's
    worse: list[str]
    solved_only_here: list[str]
    solved_only_baseline: list[str]


@dataclass(frozen=True)
class Comparison:
    pass_reward: float
    level: float
    baseline: str
    runs: list[RunSummary]
    shared_tasks: list[str]
    k_max: int
    tasks: list[TaskRow]
    differences: list[Difference]
    settings: dict[str, list[Any]] = field(default_factory=dict)  # differing: value per run
    provenance: list[ProvenanceRow] = field(default_factory=list)  # every field, per run
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def run_label(tables: DatasetTables, fallback: str) -> str:
    """A run's model: the certified engine's name, else the models its rows name (joined
    when several), else its agent (a run without a model, such as `oracle`), else
    `fallback`."""
    engine = tables.manifest.get("engine") or {}
    if engine.get("served_model"):
        return str(engine["served_model"])
    models = _models(tables.rollouts)
    if models:
        return "+".join(models)
    agents = sorted({a for a in tables.rollouts["agent"].to_pylist() if a})
    return "+".join(agents) or fallback


def _models(rollouts: pa.Table) -> list[str]:
    return sorted({m for m in rollouts["model"].to_pylist() if m})


@dataclass(frozen=True)
class _TaskK:
    """One task's pass@k in one run, and its variance over the run's attempts."""

    value: float
    variance: float


def _passed(row: Mapping[str, Any], pass_reward: float) -> bool:
    return row["reward"] is not None and row["reward"] >= pass_reward


def _spread(values: list[int]) -> Spread:
    if not values:
        return Spread(None, None, 0)
    return Spread(statistics.fmean(values), float(statistics.median(values)), len(values))


def compare(runs: Sequence[Run], *, pass_reward: float = 1.0) -> Comparison:
    """`runs` side by side, the first as the baseline (see the module's docstring).
    Raises ComparisonError when fewer than two runs, two runs under one label, or no
    task every run holds."""
    if len(runs) < 2:
        raise ComparisonError(
            f"a comparison needs at least two datasets (a baseline and "
            f"one to compare with it), got {len(runs)}"
        )
    labels = [run.label for run in runs]
    if len(set(labels)) < len(labels):
        repeated = sorted({label for label in labels if labels.count(label) > 1})
        raise ComparisonError(
            f"two runs are labelled {', '.join(repeated)}: give each a --label of its own"
        )
    read = [read_rows(run.tables) for run in runs]
    counts: list[dict[str, list[int]]] = []  # task -> [passes, attempts], per run
    for rows in read:
        by_task: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        for row in rows.rows:
            by_task[row["task"]][0] += _passed(row, pass_reward)
            by_task[row["task"]][1] += 1
        counts.append(dict(by_task))
    shared = sorted(set.intersection(*(set(c) for c in counts)))
    if not shared:
        raise ComparisonError(
            "no task is in every dataset: "
            + "; ".join(
                f"{run.label} has {_few(sorted(c)) or 'no rollouts'}"
                for run, c in zip(runs, counts, strict=True)
            )
            + ". Sweep them on the same tasks (--dataset, --task)"
        )
    k_max = min(c[task][1] for c in counts for task in shared)
    ks = range(1, k_max + 1)
    per_task_k = [
        {
            task: [
                _TaskK(
                    pass_at_k(c[task][1], c[task][0], k),
                    pass_at_k_variance(c[task][1], c[task][0], k),
                )
                for k in ks
            ]
            for task in shared
        }
        for c in counts
    ]
    summaries = [
        _summary(run, rows, c, shared, per_task_k[i], k_max, pass_reward)
        for i, (run, rows, c) in enumerate(zip(runs, read, counts, strict=True))
    ]
    tasks = [
        TaskRow(task, [TaskCell(c[task][0], c[task][1], wilson(*c[task])) for c in counts])
        for task in shared
    ]
    differences = [
        _difference(
            runs[i].label,
            runs[0].label,
            counts[i],
            counts[0],
            per_task_k[i],
            per_task_k[0],
            shared,
            k_max,
        )
        for i in range(1, len(runs))
    ]
    settings = _differing_settings(runs)
    provenance = provenance_rows([run.tables.rollouts for run in runs])
    return Comparison(
        pass_reward=pass_reward,
        level=LEVEL,
        baseline=runs[0].label,
        runs=summaries,
        shared_tasks=shared,
        k_max=k_max,
        tasks=tasks,
        differences=differences,
        settings=settings,
        provenance=provenance,
        notes=provenance_notes(labels, provenance)
        + _notes(runs, read, counts, shared, summaries, settings, k_max),
    )


def _summary(
    run: Run,
    rows: Rows,
    counts: Mapping[str, list[int]],
    shared: list[str],
    per_task_k: Mapping[str, list[_TaskK]],
    k_max: int,
    pass_reward: float,
) -> RunSummary:
    kept = set(shared)
    ours = [row for row in rows.rows if row["task"] in kept]
    captured = [row for row in ours if row["counts"]["turns"] is not None]
    passes = sum(_passed(row, pass_reward) for row in ours)
    left_out = {task: n for task, (_, n) in sorted(counts.items()) if task not in shared}
    return RunSummary(
        label=run.label,
        source=run.source,
        models=_models(run.tables.rollouts),
        rollouts=len(ours),
        passes=passes,
        pass_rate=wilson(passes, len(ours)),
        pass_at_k=[
            mean_interval(
                [per_task_k[task][k].value for task in shared],
                [per_task_k[task][k].variance for task in shared],
            )
            for k in range(k_max)
        ],
        turns=_spread([row["counts"]["turns"] for row in captured]),
        sampled_tokens=_spread([rows.sampled.get(row["rollout_id"], 0) for row in captured]),
        error_types=dict(Counter(row["error_type"] or NO_ERROR for row in ours).most_common()),
        unrewarded=sum(row["reward"] is None for row in ours),
        left_out=left_out,
    )


def _difference(
    label: str,
    baseline: str,
    ours: Mapping[str, list[int]],
    theirs: Mapping[str, list[int]],
    ours_k: Mapping[str, list[_TaskK]],
    theirs_k: Mapping[str, list[_TaskK]],
    shared: list[str],
    k_max: int,
) -> Difference:
    def rate(counts: Mapping[str, list[int]], task: str) -> float:
        return counts[task][0] / counts[task][1]

    return Difference(
        label=label,
        baseline=baseline,
        # The runs' attempts are independent: their variances add.
        pass_at_k=[
            mean_interval(
                [ours_k[t][k].value - theirs_k[t][k].value for t in shared],
                [ours_k[t][k].variance + theirs_k[t][k].variance for t in shared],
                bounds=(-1.0, 1.0),
            )
            for k in range(k_max)
        ],
        better=[t for t in shared if rate(ours, t) > rate(theirs, t)],
        worse=[t for t in shared if rate(ours, t) < rate(theirs, t)],
        solved_only_here=[t for t in shared if ours[t][0] and not theirs[t][0]],
        solved_only_baseline=[t for t in shared if theirs[t][0] and not ours[t][0]],
    )


def _differing_settings(runs: Sequence[Run]) -> dict[str, list[Any]]:
    differing = {}
    for key in SETTINGS:
        values = [run.tables.manifest.get(key) for run in runs]
        if any(v != values[0] for v in values):
            differing[key] = values
    return differing


def _notes(
    runs: Sequence[Run],
    read: Sequence[Rows],
    counts: Sequence[Mapping[str, list[int]]],
    shared: list[str],
    summaries: Sequence[RunSummary],
    settings: Mapping[str, list[Any]],
    k_max: int,
) -> list[str]:
    """What keeps the runs from comparing like with like, and what was left out."""
    notes = []
    for summary in summaries:
        if summary.left_out:
            notes.append(
                f"{summary.label}: {len(summary.left_out)} task(s) not in every dataset, left "
                f"out ({sum(summary.left_out.values())} rollouts): " + ", ".join(summary.left_out)
            )
    attempts = {
        run.label: sorted({c[task][1] for task in shared})
        for run, c in zip(runs, counts, strict=True)
    }
    if len({n for values in attempts.values() for n in values}) > 1:
        notes.append(
            "attempts per task differ ("
            + "; ".join(f"{label}: {_span(values)}" for label, values in attempts.items())
            + f"): pass@k is shown up to k={k_max}, the fewest any run made at a shared "
            "task; pass rates use every attempt"
        )
    if len(shared) == 1:
        notes.append(
            "one shared task: pass@k and the differences have no interval "
            "(it needs the spread over two tasks or more)"
        )
    for run, rows, summary in zip(runs, read, summaries, strict=True):
        if summary.unrewarded:
            notes.append(
                f"{run.label}: {summary.unrewarded} rollout(s) without a reward "
                "(the verifier never ran), counted as not passing"
            )
        if rows.retried:
            notes.append(
                f"{run.label}: {rows.retried} row(s) of lost tries left out: their "
                "attempt was retried, and counts once"
            )
        if len(summary.models) > 1:
            notes.append(f"{run.label}: its rows name several models: " + ", ".join(summary.models))
    for key, values in settings.items():
        notes.append(
            f"settings differ: {key}: "
            + ", ".join(f"{run.label} {value!r}" for run, value in zip(runs, values, strict=True))
        )
    return notes


def _few(names: list[str], shown: int = 5) -> str:
    """`names` joined, the first `shown` of a long list and how many in all."""
    if len(names) <= shown:
        return ", ".join(names)
    return ", ".join(names[:shown]) + f", ... ({len(names)} in all)"


def _span(values: list[int]) -> str:
    return str(values[0]) if len(values) == 1 else f"{values[0]} to {values[-1]}"
