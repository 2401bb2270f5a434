"""A host's journal in the cluster, without Ray: sessions tagged with their rollout before
any call, and the partial row a dead host's rollout becomes."""

from __future__ import annotations

from pathlib import Path

from harbor_ray.capture.core.journal import unfinished_turns
from harbor_ray.capture.proxy.journal_file import read_journal
from harbor_ray.capture.proxy.local import LocalCapture
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.cluster.journaling import JournaledCapture, Journaling, partial_record
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import RolloutSpec
from tests.capture.turns_factory import turn


def _spec(tmp_path: Path) -> RolloutSpec:
    [task] = select_tasks(resolve_dataset("samples"), ["hello-file"])
    return RolloutSpec(rollout_id="hello-file__0__t", task=task, agent="terminus-2",
                       trials_dir=tmp_path / "trials")


async def test_a_journaled_capture_tags_each_session_with_its_rollout(tmp_path: Path) -> None:
    journaling = Journaling(tmp_path / "journal", "flush")
    journal = journaling.open("h0")
    assert journal is not None and journal.path == tmp_path / "journal" / "h0.journal"
    store = InMemorySessionStore(owner="h0", journal=journal)
    capture = JournaledCapture(LocalCapture(store, "m", "http://127.0.0.1:1"), journal, "r1")
    session = await capture.open_session(budget=None, sampling=None)
    await store.admit(session.session_id)
    await store.record(session.session_id, turn(0, [1, 2], [3]))
    found = unfinished_turns(read_journal(journal.path).entries)
    assert [t.index for t in found["r1"]] == [0]
    assert Journaling(tmp_path, "off").open("h1") is None


def test_a_partial_row_keeps_its_turns_and_is_trainable_only_when_asked(tmp_path: Path
                                                                        ) -> None:
    turns = (turn(0, [1, 2], [3, 4]), turn(1, [1, 2, 3, 4, 5], [6]))
    for train_partial in (False, True):
        record = partial_record(_spec(tmp_path), turns, rollout_id="x@h0", error="died",
                                seconds=1.0, node="10.0.0.2", host="h0",
                                train_partial=train_partial)
        [row] = record.rollout.to_pylist()
        assert (row["rollout_id"], row["error_type"], row["ok"], row["partial"]) == (
            "x@h0", "infra_lost", False, True)
        assert row["trainable"] is train_partial
        assert row["counts"]["turns"] == 2 and row["reward"] is None
        assert "journal_partial" in [f["code"] for f in row["findings"]]
        assert record.turns.num_rows == 2 and record.sequences.num_rows == 1
