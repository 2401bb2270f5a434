"""Reading a dataset directory with Ray Data.

sequences/ and rollouts/ are read as written. turns/ stores prompts as deltas, and
rebuilding a prompt needs every ancestor of the turn. The writer puts all of a
rollout's turns in one part file (a flush holds whole rollouts), so `read_turns` reads
part by part, one Ray task per part, and rebuilds one rollout at a time: no shuffle,
and memory for one part's deltas plus one rollout's rebuilt prompts. (Grouping a plain
`read_parquet` by rollout would also work for any file layout, but shuffles the whole
table on every read: docs/performance.md, "Reading a dataset".) A part that
broke the rule would fail loudly in `rebuild_prompts`, never yield a wrong prompt.

Ray Data is imported on the first read, not with this package: rollout hosts and the
driver import the encoder and the writer and must not pay for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from harbor_ray.data.rebuild import rebuild_prompts
from harbor_ray.data.schema import MESSAGE_COLUMNS, ROLLOUTS, SEQUENCES, TURNS
from harbor_ray.data.writer import PART_SUFFIX

if TYPE_CHECKING:
    from ray.data import Dataset

__all__ = ["read_rollouts", "read_sequences", "read_turns"]


def read_rollouts(out: str | os.PathLike[str], *, columns: list[str] | None = None) -> Dataset:
    """One row per rollout (see SCHEMA.md); `columns` selects a subset."""
    return _read(Path(out) / "rollouts", ROLLOUTS, columns)


def read_sequences(out: str | os.PathLike[str], *, columns: list[str] | None = None) -> Dataset:
    """One row per training sequence: what a trainer iterates over."""
    return _read(Path(out) / "sequences", SEQUENCES, columns)


def read_turns(out: str | os.PathLike[str], *, messages: bool = False) -> Dataset:
    """One row per model call with its full `prompt_ids` in place of `prompt_delta`.

    The JSON message columns are left out unless `messages` is set: they are the bulk of
    the text and no token consumer needs them.
    """
    import ray.data

    columns = [n for n in TURNS.names if messages or n not in MESSAGE_COLUMNS]
    parts = _parts(Path(out) / "turns")
    if not parts:
        return ray.data.from_arrow(rebuild_prompts(TURNS.empty_table().select(columns)))
    paths = ray.data.from_items([{"path": str(p)} for p in parts], override_num_blocks=len(parts))
    # Ray types `fn` as taking the batch alone; `fn_kwargs` passes it `columns`.
    return paths.map_batches(
        _rebuilt_parts,  # type: ignore[arg-type]
        batch_size=1,
        batch_format="pyarrow",
        fn_kwargs={"columns": columns},
    )


def _rebuilt_parts(paths: pa.Table, columns: list[str]) -> Iterator[pa.Table]:
    """Each rollout of each part in `paths`, prompts rebuilt, one table at a time."""
    for path in paths["path"].to_pylist():
        turns = pq.read_table(path, columns=columns)
        for rollout_id in pc.unique(turns["rollout_id"]).to_pylist():
            yield rebuild_prompts(turns.filter(pc.equal(turns["rollout_id"], rollout_id)))


def _parts(directory: Path) -> list[Path]:
    return sorted(p for p in directory.iterdir() if p.name.endswith(PART_SUFFIX))


def _read(directory: Path, schema: pa.Schema, columns: list[str] | None) -> Dataset:
    import ray.data

    if not _parts(directory):
        # No part yet (e.g. every rollout so far failed before its first model call).
        empty = schema.empty_table()
        return ray.data.from_arrow(empty if columns is None else empty.select(columns))
    dataset = ray.data.read_parquet(str(directory), file_extensions=["parquet"])
    return dataset if columns is None else dataset.select_columns(columns)
