from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq

from harbor_ray.data.writer import DatasetWriter
from harbor_ray.report.tables import dataset_version, read_tables
from tests.data.rollouts import rich_session, rollout
from tests.report.datasets import sample_records, write_dataset


def test_only_committed_flushes_are_read(tmp_path: Path) -> None:
    out = write_dataset(tmp_path / "out", sample_records())
    before = dataset_version(out)
    # A flush caught between its turns/ part and its rollouts/ part, and a temporary file.
    orphan = rollout("z1", rich_session())
    pq.write_table(orphan.turns, out / "turns" / "part-000009-feedbeef.parquet")
    pq.write_table(orphan.rollout, out / "rollouts" / ".part-000009-feedbeef.parquet.tmp")
    tables = read_tables(out)
    assert tables.rollouts["rollout_id"].to_pylist() == ["a1", "b1", "c1"]
    assert "z1" not in tables.turns["rollout_id"].to_pylist()
    assert dataset_version(out) == before
    assert tables.manifest["agent"] == "terminus-2"


def test_the_version_changes_with_each_commit(tmp_path: Path) -> None:
    out = write_dataset(tmp_path / "out", sample_records())
    before = dataset_version(out)
    writer = DatasetWriter(out, {"agent": "terminus-2"})
    writer.add(rollout("d1", rich_session()))
    writer.flush()
    after = dataset_version(out)
    assert after != before
    assert read_tables(out).rollouts.num_rows == 4


def test_an_empty_or_missing_dataset_reads_as_empty_tables(tmp_path: Path) -> None:
    tables = read_tables(tmp_path / "nothing")
    assert (tables.rollouts.num_rows, tables.turns.num_rows, tables.manifest) == (0, 0, {})


def test_a_reader_of_counts_reads_only_the_turn_columns_it_names(tmp_path: Path) -> None:
    out = write_dataset(tmp_path / "out", sample_records())
    whole = read_tables(out)
    columns = ("rollout_id", "token_ids", "completion_tokens")
    lean = read_tables(out, turn_columns=columns)
    assert lean.turns.column_names == list(columns)
    assert lean.turns == whole.turns.select(list(columns))
    assert lean.sequences.num_rows == 0 < whole.sequences.num_rows
    assert lean.rollouts == whole.rollouts
    assert read_tables(tmp_path / "empty", turn_columns=columns).turns.column_names == list(columns)
