"""A dataset directory's committed rows as three Arrow tables: what the report reads.

Only committed flushes are read: a part counts once its rollouts/ part exists (the
writer writes sequences/ and turns/ first and rollouts/ last), so a report made while a
sweep writes never shows a rollout whose token rows are still on their way. Hidden
files (unfinished writes) are never read.

`dataset_version` names what is committed, cheaply (a directory listing and the
manifest's mtime): the live view rebuilds the report only when it changes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harbor_ray.data.schema import ROLLOUTS, SEQUENCES, TURNS
from harbor_ray.data.writer import MANIFEST, PART_SUFFIX

__all__ = [
    "POLICY_PREFIX",
    "DatasetTables",
    "dataset_version",
    "policy_columns",
    "read_tables",
    "served_model",
    "token_ids_used",
]

# Online runs add nullable columns named so (another part of the project writes them).
POLICY_PREFIX = "policy_version"


@dataclass(frozen=True)
class DatasetTables:
    """The rows of one dataset: whole rollouts only (every rollouts/ row has its rows
    of turns/ and sequences/ here), and the manifest ({} when there is none yet)."""

    rollouts: pa.Table
    turns: pa.Table
    sequences: pa.Table
    manifest: dict[str, Any] = field(default_factory=dict)


def policy_columns(table: pa.Table) -> list[str]:
    """The table's policy-version columns (none in an offline sweep's dataset)."""
    return [name for name in table.column_names if name.startswith(POLICY_PREFIX)]


def served_model(tables: DatasetTables) -> str | None:
    """The model the rows were sampled from: the certified engine's name in the
    manifest, else the first one a rollout row names (None when none does)."""
    engine = tables.manifest.get("engine") or {}
    if engine.get("served_model"):
        return str(engine["served_model"])
    return next((m for m in tables.rollouts["model"].to_pylist() if m), None)


def token_ids_used(turns: pa.Table) -> list[int]:
    """Every distinct id the turns hold, sampled or in a prompt delta."""
    flat = [pc.list_flatten(turns[name]) for name in ("token_ids", "prompt_delta")]
    chunks = [chunk for column in flat for chunk in column.chunks]
    ids: list[int] = pc.unique(pa.chunked_array(chunks, type=pa.int32())).to_pylist()
    return ids


def _committed(root: Path) -> list[str]:
    """Names of the parts whose flush reached rollouts/."""
    directory = root / "rollouts"
    if not directory.is_dir():
        return []
    return sorted(
        p.name
        for p in directory.iterdir()
        if p.name.endswith(PART_SUFFIX) and not p.name.startswith(".")
    )


def dataset_version(out: str | os.PathLike[str]) -> str:
    """A token that changes whenever a flush is committed or the manifest is rewritten."""
    root = Path(out)
    manifest = root / MANIFEST
    stamp = manifest.stat().st_mtime_ns if manifest.exists() else 0
    parts = _committed(root)
    return f"{len(parts)}:{parts[-1] if parts else ''}:{stamp}"


def read_tables(
    out: str | os.PathLike[str], *, turn_columns: Sequence[str] | None = None
) -> DatasetTables:
    """Every committed row of the dataset at `out` (empty tables for an empty one).

    `turn_columns`: read only these columns of turns/ (those a part holds: a column
    added later is absent from older parts) and none of sequences/, for a reader that
    needs no tokens or messages (a comparison of large datasets)."""
    root = Path(out)
    parts = _committed(root)
    manifest_path = root / MANIFEST
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    return DatasetTables(
        rollouts=_read(root / "rollouts", parts, ROLLOUTS),
        turns=_read(root / "turns", parts, TURNS, turn_columns),
        sequences=_read(root / "sequences", [] if turn_columns is not None else parts, SEQUENCES),
        manifest=manifest,
    )


def _read(
    directory: Path, parts: list[str], schema: pa.Schema, columns: Sequence[str] | None = None
) -> pa.Table:
    # A flush with no rows for a table (rollouts that never called a model) writes no
    # part there, so a committed name may be absent from turns/ and sequences/.
    paths = [directory / name for name in parts if (directory / name).exists()]
    tables = [
        pq.read_table(
            path,
            columns=None
            if columns is None
            else [c for c in columns if c in pq.read_schema(path).names],
        )
        for path in paths
    ]
    if not tables:
        empty = schema.empty_table()
        return empty if columns is None else empty.select(list(columns))
    # Columns added later (nullable, e.g. policy versions) may be in newer parts only.
    return pa.concat_tables(tables, promote_options="default")
