"""Where compared runs differ in what made them: their rows' provenance (the weights,
tokenizer and chat template served, the harness), field by field. Pure.

Warned, never refused. Runs of different models are what a comparison is for, and a
hosted model, another family or another checkpoint has other weights and often another
tokenizer: refusing would forbid the comparisons the command exists for. What must not
happen is a difference nobody sees, so every differing field is a row of the provenance
table and, when it is not the weights (a template, a tokenizer, a harness version or
configuration), a note that the pass rates measure it too. A run whose rows disagree
among themselves (a resumed sweep on another engine) is named as well.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from harbor_ray.data.result import ENGINE_FIELDS, Provenance

__all__ = ["FIELDS", "UNLIKE", "ProvenanceRow", "provenance_notes", "provenance_rows", "shown"]

FIELDS = tuple(Provenance.model_fields)
# What differs between runs that a model comparison did not mean to vary: the weights
# (`model_source`, `weights_sha256`) are what it compares, these are not.
UNLIKE = tuple(name for name in FIELDS if name not in ENGINE_FIELDS[:2])


@dataclass(frozen=True)
class ProvenanceRow:
    """One provenance field across the runs: per run, the distinct values its rows hold
    (None: not recorded or not known), and whether the runs differ in it."""

    field: str
    values: list[list[str | None]]
    differs: bool


def provenance_rows(rollouts: Sequence[pa.Table]) -> list[ProvenanceRow]:
    """Each field's values per run (one rollouts/ table per run, in run order)."""
    per_run = [_values(table) for table in rollouts]
    rows = []
    for name in FIELDS:
        values = [sorted(run[name], key=lambda v: (v is None, v or "")) for run in per_run]
        rows.append(ProvenanceRow(name, values, any(v != values[0] for v in values)))
    return rows


def _values(rollouts: pa.Table) -> dict[str, set[str | None]]:
    """The distinct values of each field in one run's rows; a dataset written before
    version 9 has no column: every field unknown."""
    if "provenance" not in rollouts.column_names:
        records: list[Any] = [None] * max(rollouts.num_rows, 1)
    else:
        records = rollouts["provenance"].to_pylist() or [None]
    return {
        name: {None if record is None else record.get(name) for record in records}
        for name in FIELDS
    }


def shown(value: str | None) -> str:
    """A value for reading: a hash by its first 12 digits, None as `unknown`."""
    if value is None:
        return "unknown"
    return value[:12] if value.isalnum() and len(value) == 64 else value


def provenance_notes(labels: Sequence[str], rows: Sequence[ProvenanceRow]) -> list[str]:
    """What keeps the runs from comparing like with like, in their provenance."""
    notes = []
    for row in rows:
        for label, values in zip(labels, row.values, strict=True):
            if len(values) > 1:
                notes.append(
                    f"{label}: its rows differ in {row.field} ("
                    + ", ".join(map(shown, values))
                    + ")"
                )
        if row.differs and row.field in UNLIKE:
            notes.append(
                f"not like with like: {row.field} differs ("
                + "; ".join(
                    f"{label} {', '.join(map(shown, values))}"
                    for label, values in zip(labels, row.values, strict=True)
                )
                + "): the differences measure it too, not the weights alone"
            )
    return notes
