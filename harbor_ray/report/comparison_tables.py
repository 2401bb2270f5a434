"""A comparison's figures as tables of text, and those tables as Markdown: pure.

The HTML page (comparison_page.py) shows the same tables, so the page, `--format md`
and `--format json` carry the same numbers, rounded here to two places for reading.
"""

from __future__ import annotations

from dataclasses import dataclass

from harbor_ray.report.comparison import Comparison, Spread
from harbor_ray.report.comparison_provenance import shown
from harbor_ray.report.stats import Estimate

__all__ = ["METHOD", "Table", "comparison_tables", "markdown", "title"]

METHOD = (
    "A rollout passes when its reward is at least {pass_reward:g} (no reward: does not "
    "pass). Every figure is over the tasks all runs hold. Intervals are {level:.0%}: a "
    "run's pass rate over its rollouts has a Wilson score interval; pass@k (unbiased, "
    "averaged over tasks) and each difference from the baseline ({baseline}) have a "
    "Student-t interval over tasks, the difference paired task by task, never narrower "
    "than the attempts' own noise. Solved: at least one passing attempt."
)


@dataclass(frozen=True)
class Table:
    """One table: a stable id (the page's element id), a title, what it shows, its
    header and its rows, every cell text."""

    id: str
    title: str
    caption: str
    header: list[str]
    rows: list[list[str]]


def title(comparison: Comparison) -> str:
    return "Comparison: " + " vs ".join(run.label for run in comparison.runs)


def _number(value: float | None, signed: bool = False) -> str:
    if value is None or value != value:  # NaN: nothing measured
        return "n/a"
    return f"{value:+.2f}" if signed else f"{value:.2f}"


def _estimate(estimate: Estimate, signed: bool = False) -> str:
    text = _number(estimate.value, signed)
    if estimate.low is None or estimate.high is None:
        return text
    return f"{text} [{_number(estimate.low, signed)}, {_number(estimate.high, signed)}]"


def _spread(spread: Spread) -> str:
    if not spread.rollouts:
        return "n/a"
    return f"{_number(spread.mean)} / {_number(spread.median)} (n={spread.rollouts})"


def _names(tasks: list[str]) -> str:
    return ", ".join(tasks) if tasks else "none"


def comparison_tables(comparison: Comparison) -> list[Table]:
    """The comparison's tables, in page order."""
    runs = comparison.runs
    level = f"{comparison.level:.0%}"
    labels = [run.label for run in runs]
    differences = [f"{d.label} - {d.baseline}" for d in comparison.differences]
    return [
        Table(
            "runs",
            "Runs",
            "Each run on the shared tasks. Turns and sampled tokens per "
            "rollout: mean / median over the rollouts with a capture.",
            [
                "run",
                "models",
                "dataset",
                "rollouts",
                "passed",
                f"pass rate [{level}]",
                "turns per rollout",
                "sampled tokens per rollout",
            ],
            [
                [
                    run.label,
                    ", ".join(run.models) or "none",
                    run.source,
                    str(run.rollouts),
                    str(run.passes),
                    _estimate(run.pass_rate),
                    _spread(run.turns),
                    _spread(run.sampled_tokens),
                ]
                for run in runs
            ],
        ),
        Table(
            "pass-at-k",
            "pass@k",
            f"Unbiased pass@k averaged over the "
            f"{len(comparison.shared_tasks)} shared tasks, then each run minus the "
            f"baseline, paired by task [{level} interval].",
            ["k", *labels, *differences],
            [
                [
                    str(k + 1),
                    *(_estimate(run.pass_at_k[k]) for run in runs),
                    *(_estimate(d.pass_at_k[k], signed=True) for d in comparison.differences),
                ]
                for k in range(comparison.k_max)
            ],
        ),
        Table(
            "where",
            "Where they differ",
            "Tasks each run passes more or less often than "
            "the baseline, and the tasks one solves and the other does not.",
            [
                "run",
                "higher pass rate",
                "lower pass rate",
                "solved only by the run",
                "solved only by the baseline",
            ],
            [
                [
                    f"{d.label} vs {d.baseline}",
                    _names(d.better),
                    _names(d.worse),
                    _names(d.solved_only_here),
                    _names(d.solved_only_baseline),
                ]
                for d in comparison.differences
            ],
        ),
        Table(
            "tasks",
            "By task",
            f"Passing attempts / attempts, and the pass rate [{level} Wilson interval].",
            ["task", *labels],
            [
                [
                    row.task,
                    *(
                        f"{cell.passes}/{cell.attempts}: {_estimate(cell.rate)}"
                        for cell in row.cells
                    ),
                ]
                for row in comparison.tasks
            ],
        ),
        Table(
            "error-types",
            "Error types",
            "Rollouts on the shared tasks by where they failed (none: no error).",
            ["error type", *labels],
            [
                [error, *(str(run.error_types.get(error, 0)) for run in runs)]
                for error in _error_types(comparison)
            ],
        ),
        Table(
            "provenance",
            "Provenance",
            "What each run's rows say they were made with "
            "(the weights, the tokenizer and chat template served, the harness; hashes "
            "by their first 12 digits; unknown: not recorded where the run started). "
            "differs: the runs do not all hold the same values.",
            ["field", *labels, "differs"],
            [
                [
                    row.field,
                    *[", ".join(map(shown, values)) for values in row.values],
                    "yes" if row.differs else "no",
                ]
                for row in comparison.provenance
            ],
        ),
    ]


def _error_types(comparison: Comparison) -> list[str]:
    seen: dict[str, None] = {}
    for run in comparison.runs:
        seen.update(dict.fromkeys(run.error_types))
    return list(seen)


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def markdown(comparison: Comparison) -> str:
    """The comparison as Markdown: its method, its notes, then its tables."""
    lines = [
        f"# {_md_cell(title(comparison))}",
        "",
        METHOD.format(
            pass_reward=comparison.pass_reward, level=comparison.level, baseline=comparison.baseline
        ),
        "",
    ]
    lines += [f"- **Note:** {_md_cell(note)}" for note in comparison.notes]
    for table in comparison_tables(comparison):
        lines += [
            "",
            f"## {table.title}",
            "",
            table.caption,
            "",
            "| " + " | ".join(map(_md_cell, table.header)) + " |",
            "|" + "---|" * len(table.header),
        ]
        lines += ["| " + " | ".join(map(_md_cell, row)) + " |" for row in table.rows]
    return "\n".join(lines) + "\n"
