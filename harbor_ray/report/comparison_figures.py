"""A comparison's plots: pure (a `Comparison` in, plotly figures out), each with its
interval drawn as error bars."""

from __future__ import annotations

import plotly.graph_objects as go

from harbor_ray.report.comparison import Comparison
from harbor_ray.report.figures import LAYOUT, Plot
from harbor_ray.report.stats import Estimate

__all__ = ["comparison_plots"]


def _bars(estimates: list[Estimate]) -> dict[str, object]:
    """Plotly's asymmetric error bars of `estimates` (0 where there is no interval)."""
    return {
        "type": "data",
        "symmetric": False,
        "visible": True,
        "array": [e.high - e.value if e.high is not None else 0 for e in estimates],
        "arrayminus": [e.value - e.low if e.low is not None else 0 for e in estimates],
    }


def comparison_plots(comparison: Comparison) -> list[Plot]:
    """pass@k per run, each run's difference from the baseline, and pass rate by task."""
    level = f"{comparison.level:.0%}"
    ks = list(range(1, comparison.k_max + 1))
    pass_k = go.Figure(
        layout={
            **LAYOUT,
            "xaxis_title": "k (attempts drawn)",
            "yaxis_title": "pass@k",
            "yaxis_range": [-0.05, 1.05],
            "xaxis_dtick": 1,
        }
    )
    for run in comparison.runs:
        pass_k.add_trace(
            go.Scatter(
                x=ks,
                y=[e.value for e in run.pass_at_k],
                name=run.label,
                mode="lines+markers",
                error_y=_bars(run.pass_at_k),
            )
        )
    difference = go.Figure(
        layout={
            **LAYOUT,
            "xaxis_title": "k (attempts drawn)",
            "yaxis_title": "pass@k minus the baseline's",
            "yaxis_range": [-1.05, 1.05],
            "xaxis_dtick": 1,
        }
    )
    difference.add_hline(y=0, line_color="#888")
    for d in comparison.differences:
        difference.add_trace(
            go.Scatter(
                x=ks,
                y=[e.value for e in d.pass_at_k],
                name=f"{d.label} - {d.baseline}",
                mode="lines+markers",
                error_y=_bars(d.pass_at_k),
            )
        )
    by_task = go.Figure(
        layout={
            **LAYOUT,
            "xaxis_title": "task",
            "yaxis_title": "pass rate",
            "yaxis_range": [0, 1.05],
            "barmode": "group",
        }
    )
    tasks = [row.task for row in comparison.tasks]
    for index, run in enumerate(comparison.runs):
        rates = [row.cells[index].rate for row in comparison.tasks]
        by_task.add_trace(
            go.Bar(x=tasks, y=[e.value for e in rates], name=run.label, error_y=_bars(rates))
        )
    return [
        Plot(
            "pass-at-k",
            "pass@k",
            f"Unbiased pass@k averaged over the "
            f"{len(tasks)} shared tasks, with its {level} Student-t interval over tasks.",
            pass_k,
        ),
        Plot(
            "difference",
            f"Difference from {comparison.baseline}",
            f"Each run's pass@k minus the baseline's, paired task by task, with its {level} "
            "interval: above 0 is better; an interval that crosses 0 is not a clear "
            "difference.",
            difference,
        ),
        Plot(
            "by-task",
            "Pass rate by task",
            f"Passing attempts over attempts per shared task, with its {level} Wilson interval.",
            by_task,
        ),
    ]
