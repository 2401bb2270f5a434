"""The Ray Data readers, on one small dataset and one single-CPU local Ray."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pytest
import ray

from harbor_ray.capture.core.graph import build_graph
from harbor_ray.data.readers import read_rollouts, read_sequences, read_turns
from harbor_ray.data.rebuild import turn_records
from harbor_ray.data.schema import MESSAGE_COLUMNS
from harbor_ray.data.writer import DatasetWriter
from tests.capture.turns_factory import chain
from tests.data.rollouts import (
    SEQUENCE_FIELDS,
    assert_same_turns,
    dead_rollout,
    rich_session,
    rollout,
    sequence_rows,
)

pytestmark = pytest.mark.integration

SESSIONS = {"a1": rich_session, "b1": lambda: chain(6), "a2": rich_session}


@pytest.fixture(scope="module", autouse=True)
def local_ray() -> Iterator[None]:
    """A light local Ray for this module, unless the session already runs one (kept)."""
    if ray.is_initialized():
        yield
        return
    # A short temp dir: Ray's socket paths must fit in 107 bytes.
    temp = tempfile.mkdtemp(prefix="hrd", dir="/tmp")
    ray.init(
        address="local",
        num_cpus=1,
        include_dashboard=False,
        object_store_memory=100 << 20,
        _temp_dir=temp,
        log_to_driver=False,
    )
    try:
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def quiet_progress() -> Iterator[None]:
    context = ray.data.DataContext.get_current()
    shown, context.enable_progress_bars = context.enable_progress_bars, False
    yield
    context.enable_progress_bars = shown


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("dataset")
    writer = DatasetWriter(out, {"model": "test-model"}, flush_rollouts=2)
    for rollout_id, session in SESSIONS.items():
        reward = None if rollout_id == "a2" else 1.0
        writer.add(rollout(rollout_id, session(), reward=reward))
    writer.add(dead_rollout("d1"))
    writer.close(ended_at=None)
    return out


def arrow(dataset: ray.data.Dataset) -> pa.Table:
    return pa.concat_tables(ray.get(dataset.to_arrow_refs()))


def of(table: pa.Table, rollout_id: str) -> pa.Table:
    return table.filter(pc.equal(table["rollout_id"], rollout_id))


# Each read runs once per module: Ray Data executions cost seconds on a shared machine.
@pytest.fixture(scope="module")
def turns(out: Path) -> pa.Table:
    return arrow(read_turns(out, messages=True))


@pytest.fixture(scope="module")
def lean_turns(out: Path) -> pa.Table:
    return arrow(read_turns(out))


def test_read_rollouts(out: Path) -> None:
    rows = {r["rollout_id"]: r for r in read_rollouts(out).take_all()}
    assert sorted(rows) == ["a1", "a2", "b1", "d1"]
    assert rows["a2"]["reward"] is None  # not 0.0
    assert rows["d1"]["error_type"] == "sandbox_start"


def test_read_sequences(out: Path) -> None:
    sequences = arrow(read_sequences(out, columns=["rollout_id", *SEQUENCE_FIELDS]))
    for rollout_id, session in SESSIONS.items():
        mine = of(sequences, rollout_id).sort_by("sequence").select(SEQUENCE_FIELDS)
        assert mine.to_pylist() == sequence_rows(build_graph(session()))


def test_read_turns_rebuilds_every_prompt_exactly(turns: pa.Table) -> None:
    assert sorted(set(turns["rollout_id"].to_pylist())) == ["a1", "a2", "b1"]
    for rollout_id, session in SESSIONS.items():
        assert_same_turns(turn_records(of(turns, rollout_id)), session())
    assert of(turns, "a2")["reward"].null_count == of(turns, "a2").num_rows


def test_read_turns_leaves_the_messages_out_unless_asked(
    turns: pa.Table, lean_turns: pa.Table
) -> None:
    assert set(MESSAGE_COLUMNS) <= set(turns.column_names)
    assert lean_turns.column_names == [c for c in turns.column_names if c not in MESSAGE_COLUMNS]
    key = [("rollout_id", "ascending"), ("index", "ascending")]
    assert lean_turns.sort_by(key)["prompt_ids"].equals(turns.sort_by(key)["prompt_ids"])


def test_an_empty_table_reads_as_an_empty_dataset(tmp_path: Path) -> None:
    writer = DatasetWriter(tmp_path, {})
    writer.add(dead_rollout("d1"))
    writer.close(ended_at=None)
    assert read_turns(tmp_path).count() == 0
