"""A host's journal in the cluster, without Ray: sessions tagged with their rollout before
any call, and the partial row a dead host's rollout becomes."""

from __future__ import annotations

from pathlib import Path

import httpx
import orjson
import pyarrow.parquet as pq

from harbor_ray.capture.core.journal import unfinished_turns
from harbor_ray.capture.proxy.fake_engine import FakeEngine
from harbor_ray.capture.proxy.journal_file import read_journal
from harbor_ray.capture.proxy.local import LocalCapture, serve_capture
from harbor_ray.capture.proxy.session import InMemorySessionStore
from harbor_ray.capture.proxy.upstream import HttpEngine
from harbor_ray.cluster.journaling import JournaledCapture, Journaling, partial_record
from harbor_ray.data.writer import DatasetWriter
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import RolloutSpec
from tests.capture.turns_factory import turn
from tests.fixtures.threaded import fake_engine_in_thread


def _spec(tmp_path: Path) -> RolloutSpec:
    [task] = select_tasks(resolve_dataset("samples"), ["hello-file"])
    return RolloutSpec(
        rollout_id="hello-file__0__t", task=task, agent="terminus-2", trials_dir=tmp_path / "trials"
    )


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


def test_a_partial_row_keeps_its_turns_and_is_trainable_only_when_asked(tmp_path: Path) -> None:
    turns = (turn(0, [1, 2], [3, 4]), turn(1, [1, 2, 3, 4, 5], [6]))
    for train_partial in (False, True):
        record = partial_record(
            _spec(tmp_path),
            turns,
            rollout_id="x@h0",
            error="died",
            seconds=1.0,
            node="10.0.0.2",
            host="h0",
            train_partial=train_partial,
        )
        [row] = record.rollout.to_pylist()
        assert (row["rollout_id"], row["error_type"], row["ok"], row["partial"]) == (
            "x@h0",
            "infra_lost",
            False,
            True,
        )
        assert row["trainable"] is train_partial
        assert row["counts"]["turns"] == 2 and row["reward"] is None
        assert "journal_partial" in [f["code"] for f in row["findings"]]
        assert record.turns.num_rows == 2 and record.sequences.num_rows == 1


async def test_calls_through_the_proxy_reach_the_dataset_once_from_the_journal(
    tmp_path: Path,
) -> None:
    """A host's proxy journals each call before its reply; the host then "dies" (its
    session never closes), and the row rebuilt from the journal holds every answered
    call exactly once."""
    journal = Journaling(tmp_path / "journal", "fsync").open("h0")
    assert journal is not None
    store = InMemorySessionStore(owner="h0", journal=journal)
    with fake_engine_in_thread(FakeEngine()) as (engine, url):
        upstream = HttpEngine(url)
        async with serve_capture(store, upstream, "fake-model") as local:
            capture = JournaledCapture(local, journal, "r1")
            session = await capture.open_session(budget=None, sampling=None)
            messages = [{"role": "user", "content": "begin"}]
            async with httpx.AsyncClient() as http:
                for step in range(3):
                    reply = await http.post(
                        f"{local.host_url}/v1/chat/completions",
                        headers={"authorization": f"Bearer {session.key}"},
                        json={"model": "fake-model", "messages": messages, "max_tokens": 8},
                    )
                    assert reply.status_code == 200
                    messages += [
                        reply.json()["choices"][0]["message"],
                        {"role": "user", "content": f"step {step} done"},
                    ]
        await upstream.aclose()
    [turns] = unfinished_turns(read_journal(journal.path).entries).values()
    record = partial_record(
        _spec(tmp_path),
        turns,
        rollout_id="r1",
        error="died",
        seconds=1.0,
        node=None,
        host="h0",
        train_partial=False,
    )
    writer = DatasetWriter(tmp_path / "out", {})
    writer.add(record)
    writer.close(0.0)
    rows = pq.read_table(tmp_path / "out" / "turns").to_pylist()
    assert [r["index"] for r in rows] == [0, 1, 2] and len(engine.calls) == 3
    answers = [m["content"] for m in messages if m["role"] == "assistant"]
    assert [orjson.loads(r["response_message"])["content"] for r in rows] == answers
