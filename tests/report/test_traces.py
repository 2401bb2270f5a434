from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson
import pyarrow as pa

from harbor_ray.report.tables import DatasetTables, read_tables
from harbor_ray.report.traces import summaries, traces
from tests.capture.turns_factory import chain, follow, turn
from tests.data.rollouts import evaluated, rollout
from tests.report.datasets import sample_tables, write_dataset


def _turns(tables: DatasetTables, rollout_id: str) -> dict[int, dict]:
    return {t["index"]: t for t in traces(tables)[rollout_id]["turns"]}


def test_mask_and_logprobs_per_sampled_id_come_from_the_stored_rows(tmp_path: Path) -> None:
    turns = _turns(sample_tables(tmp_path), "a1")
    # rich_session: turn 0 samples [10, 11] with logprobs [-0.5, NaN]; turn 1 is the
    # abandoned retry; turn 3's first id has no logprob; turn 6 is an auxiliary root.
    assert turns[0]["token_ids"] == [10, 11]
    assert turns[0]["logprobs"] == [-0.5, None]
    masks = {i: t["mask"] for i, t in turns.items()}
    assert masks == {
        0: [1, 0],
        1: [0],
        2: [1, 1],
        3: [0, 1],
        4: [1],
        5: [1],
        6: [1],
        7: [1],
        8: [1],
    }
    assert turns[1]["role"] == "discarded" and turns[6]["role"] == "auxiliary"
    assert turns[2]["prompt_delta"] == [4]  # stored ids, as written


def test_mask_is_unknown_when_no_sequence_vouches_for_the_ids(tmp_path: Path) -> None:
    tables = sample_tables(tmp_path)
    no_sequences = dataclasses.replace(tables, sequences=tables.sequences.slice(0, 0))
    assert {t["mask"] for t in _turns(no_sequences, "a1").values()} == {None}
    # A sequence whose ids differ from the turn's: not shown as the turn's mask.
    ids = tables.sequences["input_ids"].to_pylist()
    ids = [[i + 1 for i in row] for row in ids]
    column = tables.sequences.schema.get_field_index("input_ids")
    forged = tables.sequences.set_column(
        column,
        tables.sequences.schema.field(column),
        pa.array(ids, tables.sequences.schema.field(column).type),
    )
    assert {
        t["mask"] for t in _turns(dataclasses.replace(tables, sequences=forged), "a1").values()
    } == {None}


def test_a_turn_keeps_only_the_messages_after_its_parents_request(tmp_path: Path) -> None:
    def asking(record, messages):
        return dataclasses.replace(record, request_messages_json=orjson.dumps(messages))

    system, task = {"role": "system", "content": "be brief"}, {"role": "user", "content": "go"}
    reply = {"role": "assistant", "content": "ok"}
    first = asking(turn(0, [1, 2], [3]), [system, task])
    second = asking(
        follow(first, 1, [4], [5]), [system, task, reply, {"role": "tool", "content": "</b>"}]
    )
    rewritten = asking(follow(second, 2, [6], [7]), [{"role": "user", "content": "new"}])
    out = write_dataset(tmp_path / "out", [rollout("a1", [first, second, rewritten])])
    turns = _turns(read_tables(out), "a1")
    assert (turns[0]["messages"], turns[0]["messages_skipped"]) == ([system, task], 0)
    assert turns[1]["messages_skipped"] == 2
    assert turns[1]["messages"] == [reply, {"role": "tool", "content": "</b>"}]
    # A request that does not start with its parent's is kept whole.
    assert (turns[2]["messages_skipped"], len(turns[2]["messages"])) == (0, 1)


def test_summaries_and_traces_cover_every_rollout(tmp_path: Path) -> None:
    tables = sample_tables(tmp_path)
    rows = summaries(tables.rollouts)
    assert [(r["rollout_id"], r["ok"], r["error_type"], r["reward"], r["turns"]) for r in rows] == [
        ("a1", True, None, 1.0, 9),
        ("b1", False, None, 0.0, 4),
        ("c1", False, "sandbox_start", None, None),
    ]
    found = traces(tables)
    assert found["c1"]["turns"] == [] and found["c1"]["reward"] is None
    assert [s["role"] for s in found["a1"]["sequences"]].count("discarded") == 1


def test_an_evaluation_shows_its_capture_level_and_text_only_turns(tmp_path: Path) -> None:
    tables = read_tables(write_dataset(tmp_path, [rollout("e1", evaluated(chain(2)))]))
    (row,) = summaries(tables.rollouts)
    assert row["capture_level"] == "text"
    trace = traces(tables)["e1"]
    assert (trace["capture_level"], trace["trainable"], trace["sequences"]) == ("text", False, [])
    assert [
        (t["capture_level"], t["token_ids"], t["completion_tokens"], bool(t["messages"]))
        for t in trace["turns"]
    ] == [("text", None, 3, True)] * 2


def test_an_older_dataset_reads_as_tokens(tmp_path: Path) -> None:
    tables = sample_tables(tmp_path)
    old = dataclasses.replace(
        tables,
        rollouts=tables.rollouts.drop_columns(["capture_level", "trainable"]),
        turns=tables.turns.drop_columns(["capture_level", "prompt_tokens", "completion_tokens"]),
    )
    assert {r["capture_level"] for r in summaries(old.rollouts)} == {"tokens"}
    assert {t["capture_level"] for t in traces(old)["a1"]["turns"]} == {"tokens"}
