from __future__ import annotations

import dataclasses
import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from harbor_ray.capture.core.graph import build_graph
from harbor_ray.data import writer as writer_module
from harbor_ray.data.rebuild import rebuild_prompts, turn_records
from harbor_ray.data.schema import ROLLOUTS, SCHEMA_VERSION, TABLES
from harbor_ray.data.writer import DatasetWriter
from tests.capture.turns_factory import chain
from tests.data.rollouts import (
    assert_same_turns,
    broken_session,
    dead_rollout,
    rich_session,
    rollout,
    sequence_rows,
)

MANIFEST = {
    "engine": {"model": "test-model", "token_ids": True, "logprobs": True},
    "model": "test-model",
    "agent": "terminus-2",
    "sandbox": "bwrap",
    "config": {"concurrency": 4, "tasks": ["task-a", "task-b"]},
    "started_at": "2026-01-01T00:00:00Z",
}


def sessions() -> dict[str, list | None]:
    return {
        "a1": rich_session(),
        "b1": chain(5),
        "b2": broken_session(),
        "d1": None,  # the sandbox never started
        "a2": rich_session(),
    }


def results():
    for rollout_id, turns in sessions().items():
        if turns is None:
            yield dead_rollout(rollout_id)
        elif rollout_id == "a2":
            yield rollout(rollout_id, turns, reward=None)  # the verifier never ran
        else:
            yield rollout(rollout_id, turns)


def read(out: Path, table: str) -> pa.Table:
    return pq.read_table(out / table)


def rows_per_rollout(out: Path, table: str) -> Counter[str]:
    return Counter(read(out, table)["rollout_id"].to_pylist())


@pytest.fixture
def out(tmp_path: Path) -> Path:
    return tmp_path / "run"


@pytest.fixture
def written(out: Path) -> Path:
    writer = DatasetWriter(out, MANIFEST, flush_rollouts=2)
    for result in results():
        writer.add(result)
    writer.close(ended_at="2026-01-01T01:00:00Z")
    return out


def test_turns_read_from_disk_are_the_captured_ones(written: Path) -> None:
    turns = rebuild_prompts(read(written, "turns"))
    for rollout_id, session in sessions().items():
        mine = turns.filter(pc.equal(turns["rollout_id"], rollout_id))
        if session is None:
            assert mine.num_rows == 0
        else:
            assert_same_turns(turn_records(mine), session)


def test_sequences_read_from_disk_are_the_graph_sequences(written: Path) -> None:
    sequences = read(written, "sequences")
    for rollout_id, session in sessions().items():
        mine = sequences.filter(pc.equal(sequences["rollout_id"], rollout_id))
        if session is None:
            assert mine.num_rows == 0
            continue
        expected = sequence_rows(build_graph(session))
        assert mine.select(list(expected[0])).to_pylist() == expected


def test_every_rollout_has_one_row_failed_or_not(written: Path) -> None:
    rows = {r["rollout_id"]: r for r in read(written, "rollouts").to_pylist()}
    assert sorted(rows) == sorted(sessions())
    assert (rows["d1"]["ok"], rows["d1"]["error_type"]) == (False, "sandbox_start")
    assert (rows["b2"]["ok"], rows["a1"]["ok"]) == (False, True)
    # None is not 0.0, after Parquet too.
    assert rows["a2"]["reward"] is None
    assert rows["d1"]["reward"] is None
    assert rows["a1"]["reward"] == 1.0
    sequences = read(written, "sequences")
    rewards = sequences.filter(pc.equal(sequences["rollout_id"], "a2"))["reward"]
    assert rewards.null_count == len(rewards) == len(build_graph(rich_session()).sequences)


def test_files_keep_the_versioned_schemas(written: Path) -> None:
    for name, schema in TABLES:
        for path in sorted((written / name).iterdir()):
            stored = pq.read_schema(path)
            # Not check_metadata=True: Parquet renames a map's entries after its column.
            assert stored.equals(schema), path
            assert stored.metadata == schema.metadata


def test_one_flush_is_one_part_per_table_under_one_name(written: Path) -> None:
    # 5 rollouts, 2 per flush: parts of 2, 2 and 1 rollouts.
    rollouts = sorted(p.name for p in (written / "rollouts").iterdir())
    assert len(rollouts) == 3
    for name in ("sequences", "turns"):
        # A flush whose rollouts have no rows here (d1 alone would) writes no empty part.
        assert {p.name for p in (written / name).iterdir()} <= set(rollouts)
    assert [pq.read_metadata(written / "rollouts" / n).num_rows for n in rollouts] == [2, 2, 1]


def test_pandas_reads_every_table(written: Path) -> None:
    import pandas as pd

    rollouts = pd.read_parquet(written / "rollouts")
    sequences = pd.read_parquet(written / "sequences")
    turns = pd.read_parquet(written / "turns")
    assert sorted(rollouts["rollout_id"]) == sorted(sessions())
    assert rollouts.set_index("rollout_id")["reward"].isna()["a2"]
    assert len(sequences) == read(written, "sequences").num_rows
    assert len(turns) == sum(len(s) for s in sessions().values() if s is not None)


def test_the_manifest(written: Path) -> None:
    manifest = json.loads((written / "_manifest.json").read_text())
    assert manifest == {
        **MANIFEST,
        "schema_version": SCHEMA_VERSION,
        "ended_at": "2026-01-01T01:00:00Z",
    }


def test_a_reopened_directory_keeps_the_first_start_and_drops_the_end(written: Path) -> None:
    DatasetWriter(written, {**MANIFEST, "started_at": "2026-02-02T00:00:00Z"})
    manifest = json.loads((written / "_manifest.json").read_text())
    assert manifest["started_at"] == MANIFEST["started_at"]
    assert "ended_at" not in manifest


def test_a_directory_of_another_schema_version_is_refused(written: Path) -> None:
    manifest = json.loads((written / "_manifest.json").read_text())
    manifest["schema_version"] = SCHEMA_VERSION + 1
    (written / "_manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="schema version"):
        DatasetWriter(written, MANIFEST)


def test_rollouts_are_buffered_until_a_flush(out: Path) -> None:
    writer = DatasetWriter(out, MANIFEST, flush_rollouts=3)
    writer.add(rollout("a1", chain(2)))
    writer.add(rollout("a2", chain(2)))
    assert writer.finished_ids() == set()
    assert list((out / "rollouts").iterdir()) == []
    writer.add(rollout("a3", chain(2)))
    assert writer.finished_ids() == {"a1", "a2", "a3"}
    writer.add(rollout("a4", chain(2)))
    writer.flush()
    assert DatasetWriter(out, MANIFEST).finished_ids() == {"a1", "a2", "a3", "a4"}


def test_a_large_rollout_flushes_by_size(out: Path) -> None:
    writer = DatasetWriter(out, MANIFEST, flush_bytes=1)
    writer.add(rollout("a1", chain(2)))
    assert writer.finished_ids() == {"a1"}


def test_a_rollout_is_written_once(out: Path) -> None:
    writer = DatasetWriter(out, MANIFEST, flush_rollouts=2)
    writer.add(rollout("a1", chain(2)))
    with pytest.raises(ValueError, match="'a1' is already"):
        writer.add(rollout("a1", chain(2)))  # buffered
    writer.flush()
    with pytest.raises(ValueError, match="'a1' is already"):
        writer.add(rollout("a1", chain(2)))  # on disk
    writer.close(ended_at=None)
    with pytest.raises(AssertionError, match="after close"):
        writer.add(rollout("a2", chain(2)))


def test_rows_of_another_schema_are_refused(out: Path) -> None:
    writer = DatasetWriter(out, MANIFEST)
    encoded = rollout("a1", chain(2))
    stray = encoded.turns.replace_schema_metadata({b"harbor_ray.schema_version": b"0"})
    writer.add(dataclasses.replace(encoded, turns=stray))
    with pytest.raises(ValueError, match="schema version"):
        writer.flush()


class Crash(Exception):
    """The process died here."""


def crash_before(table: str, monkeypatch: pytest.MonkeyPatch) -> None:
    real = writer_module._write_atomically

    def write(path: Path, rows: pa.Table, schema: pa.Schema) -> None:
        if path.parent.name == table:
            raise Crash(path)
        real(path, rows, schema)

    monkeypatch.setattr(writer_module, "_write_atomically", write)


@pytest.mark.parametrize("dies_before", ["turns", "rollouts"])
def test_resume_after_a_crash_between_parts(
    out: Path, dies_before: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = DatasetWriter(out, MANIFEST, flush_rollouts=2)
    for result in (rollout("a1", rich_session()), rollout("b1", chain(3))):
        first.add(result)
    crash_before(dies_before, monkeypatch)
    first.add(rollout("a2", rich_session()))
    with pytest.raises(Crash):
        first.add(rollout("b2", chain(4)))
    monkeypatch.undo()
    # Rows of the dead flush are on disk, but the rollouts are not finished.
    assert rows_per_rollout(out, "sequences")["a2"] > 0
    # A crash inside a write leaves a temporary file behind, which no reader sees.
    (out / "turns" / ".part-000009-00000000.parquet.tmp").write_bytes(b"PAR1 half a file")
    assert ("a2" in rows_per_rollout(out, "turns")) == (dies_before == "rollouts")

    # The rerun: skip what is finished, write the rest.
    second = DatasetWriter(out, MANIFEST, flush_rollouts=2)
    assert second.finished_ids() == {"a1", "b1"}
    todo = [rollout("a1", rich_session()), rollout("b1", chain(3))]
    todo += [rollout("a2", rich_session()), rollout("b2", chain(4))]
    for result in todo:
        if result.rollout_id not in second.finished_ids():
            second.add(result)
    second.close(ended_at="later")

    assert sorted(DatasetWriter(out, MANIFEST).finished_ids()) == ["a1", "a2", "b1", "b2"]
    assert not any(p.name.startswith(".") for name, _ in TABLES for p in (out / name).iterdir())
    expected_turns = {"a1": 9, "a2": 9, "b1": 3, "b2": 4}
    assert rows_per_rollout(out, "turns") == expected_turns
    assert rows_per_rollout(out, "rollouts") == dict.fromkeys(expected_turns, 1)
    expected_sequences = {"a1": 6, "a2": 6, "b1": 1, "b2": 1}
    assert rows_per_rollout(out, "sequences") == expected_sequences


def test_parquet_settings_hold_for_every_table(tmp_path: Path) -> None:
    encoded = rollout("a1", rich_session())
    tables = {"rollouts": encoded.rollout, "sequences": encoded.sequences, "turns": encoded.turns}
    for name, schema in TABLES:
        path = tmp_path / f"{name}.parquet"
        pq.write_table(tables[name], path, **writer_module.parquet_options(schema))
        metadata = pq.read_metadata(path).row_group(0)
        columns = [metadata.column(i) for i in range(metadata.num_columns)]
        assert {c.compression for c in columns} == {"ZSTD"}
        floats = [c for c in columns if c.path_in_schema.endswith("logprobs.list.element")]
        assert all("BYTE_STREAM_SPLIT" in c.encodings for c in floats)
        assert len(floats) == (0 if schema is ROLLOUTS else 1)
