"""Datasets on disk to their comparison, and the comparison to a file or text: the edge
of the comparison (comparison.py is its pure core).

Each dataset's committed rows are read as the report reads them (tables.py), so a
dataset a sweep is still writing compares as far as it got.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Literal

import orjson

from harbor_ray.errors import ComparisonError, NotADatasetError
from harbor_ray.report.build import write_atomically
from harbor_ray.report.comparison import Comparison, Run, compare, run_label
from harbor_ray.report.comparison_page import render_comparison_page
from harbor_ray.report.comparison_rows import TURN_COLUMNS
from harbor_ray.report.comparison_tables import markdown
from harbor_ray.report.tables import read_tables

__all__ = ["FORMATS", "Format", "compare_datasets", "render_comparison", "write_comparison"]

Format = Literal["html", "json", "md"]
FORMATS: tuple[Format, ...] = ("html", "json", "md")


def compare_datasets(
    outs: Sequence[str | os.PathLike[str]], *, labels: Sequence[str] = (), pass_reward: float = 1.0
) -> Comparison:
    """The comparison of the datasets at `outs`, the first the baseline. `labels` names
    each (all or none); by default each run is labelled by its model, and runs of one
    model by their directory's name too."""
    if labels and len(labels) != len(outs):
        raise ComparisonError(
            f"{len(labels)} --label for {len(outs)} datasets: give one "
            "for each dataset, in the same order, or none"
        )
    for out in outs:
        if not (Path(out) / "rollouts").is_dir():
            raise NotADatasetError(f"{out} is not a dataset (no rollouts/ in it)")
    tables = [read_tables(out, turn_columns=TURN_COLUMNS) for out in outs]
    names = list(labels) or [
        run_label(t, Path(out).name) for t, out in zip(tables, outs, strict=True)
    ]
    if not labels:
        names = [
            f"{name} ({Path(out).name})" if names.count(name) > 1 else name
            for name, out in zip(names, outs, strict=True)
        ]
    return compare(
        [Run(name, str(out), t) for name, out, t in zip(names, outs, tables, strict=True)],
        pass_reward=pass_reward,
    )


def render_comparison(comparison: Comparison, form: Format) -> str:
    """The comparison as an HTML page, JSON (every figure, full precision) or Markdown."""
    if form == "html":
        return render_comparison_page(comparison)
    if form == "json":
        return orjson.dumps(comparison.to_dict(), option=orjson.OPT_INDENT_2).decode() + "\n"
    return markdown(comparison)


def write_comparison(comparison: Comparison, form: Format, dest: str | os.PathLike[str]) -> Path:
    """Write the comparison to `dest` (whole or not at all: write_atomically); return
    its path."""
    return write_atomically(Path(dest), render_comparison(comparison, form))
