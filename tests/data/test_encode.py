from __future__ import annotations

import dataclasses
import pickle

import numpy as np
import pyarrow as pa

from harbor_ray.capture.core.graph import build_graph
from harbor_ray.capture.core.record import close_capture
from harbor_ray.data.encode import encode_record, rollouts_table, with_findings, with_placement
from harbor_ray.data.rebuild import turn_records
from harbor_ray.data.result import FindingRecord, Provenance, RolloutResult
from harbor_ray.data.schema import ROLLOUTS, SCHEMA_VERSION, SEQUENCES, TURNS
from tests.capture.turns_factory import chain, full, turn
from tests.data.rollouts import (
    SEQUENCE_FIELDS,
    assert_same_table,
    assert_same_turns,
    broken_session,
    dead_rollout,
    encode,
    evaluated,
    rich_session,
    rollout,
    sequence_rows,
)


def test_turns_decode_to_exactly_the_captured_records() -> None:
    session = rich_session()
    assert_same_turns(turn_records(encode(session).turns), session)


def test_turns_without_ids_round_trip_as_missing() -> None:
    session = broken_session()
    tables = encode(session)
    row = tables.turns.to_pylist()[-1]
    assert (row["parent"], row["root"], row["prompt_delta"], row["token_ids"]) == (
        None,
        None,
        None,
        None,
    )
    assert_same_turns(turn_records(tables.turns), session)


def test_prompts_are_stored_as_deltas_from_the_parent() -> None:
    session = rich_session()
    rows = {r["index"]: r for r in encode(session).turns.to_pylist()}
    by_index = {t.index: t for t in session}
    for index, row in rows.items():
        prompt = by_index[index].prompt_ids.tolist()
        if row["parent"] is None:
            assert row["prompt_delta"] == prompt
        else:
            assert row["prompt_delta"] == prompt[len(full(by_index[row["parent"]])) :]
    assert rows[3]["prompt_delta"] == [5]
    assert rows[7]["prompt_delta"] == [73]
    assert rows[5]["prompt_delta"] == [1, 2, 3, 12, 4]  # a split root keeps its whole prompt


def test_stored_prompt_ids_are_the_unique_tokens() -> None:
    session = chain(30, reply_len=5, message_len=7)
    stored = pa.compute.list_value_length(encode(session).turns["prompt_delta"])
    # The system prompt once, then each call's new message: not the sum of the prompts.
    assert pa.compute.sum(stored).as_py() == 3 + 29 * 7


def test_sequences_are_the_graph_sequences() -> None:
    session = rich_session()
    sequences = encode(session).sequences
    assert sequences.select(SEQUENCE_FIELDS).to_pylist() == sequence_rows(build_graph(session))
    assert sequences["input_ids"].type.value_type == pa.int32()
    assert sequences["loss_mask"].type.value_type == pa.uint8()
    assert sequences["logprobs"].type.value_type == pa.float32()


def test_rows_carry_the_rollouts_fields() -> None:
    tables = encode(rich_session(), rollout_id="r7", task="fix-bug", reward=0.25, ok=False)
    for table in (tables.turns, tables.sequences):
        assert set(table["rollout_id"].to_pylist()) == {"r7"}
        assert set(table["task"].to_pylist()) == {"fix-bug"}
        assert set(table["reward"].to_pylist()) == {0.25}
        assert set(table["ok"].to_pylist()) == {False}


def test_tables_have_the_versioned_schemas() -> None:
    encoded = rollout("a1", rich_session())
    assert encoded.rollout.schema.equals(ROLLOUTS, check_metadata=True)
    assert encoded.turns.schema.equals(TURNS, check_metadata=True)
    assert encoded.sequences.schema.equals(SEQUENCES, check_metadata=True)


PROVENANCE = Provenance(
    model_source="/models/step-40",
    weights_sha256="0a" * 32,
    chat_template_sha256="1b" * 32,
    tokenizer_sha256=None,
    harness_version="harbor 0.25.0",
    harness_config_sha256="2c" * 32,
)


def test_the_rollout_row() -> None:
    record = rollout("a1", rich_session(), provenance=PROVENANCE)
    result = record.result
    (row,) = record.rollout.to_pylist()
    assert row == {
        "rollout_id": "a1",
        "task": "task-a",
        "attempt": 1,
        "agent": "terminus-2",
        "sandbox": "bwrap",
        "model": "test-model",
        "ok": True,
        "error_type": None,
        "error": None,
        "reward": 1.0,
        "reward_key": "reward",
        "rewards": [("reward", 1.0), ("length", 3.0)],
        "findings": [f.model_dump() for f in result.findings],
        "counts": {
            "model_calls": 9,
            "turns": 9,
            "roots": 4,
            "agent_roots": 3,
            "sequences": 6,
            "discarded": 1,
            "engine_errors": 1,
            "budget_stops": 0,
            "retried_calls": 0,
        },
        "timings": [("agent_execution", 9.5), ("total", 12.25)],
        "trial_dir": "/trials/a1",
        "node": None,  # not placed yet: its host stamps it (`with_placement`)
        "host": None,
        "policy_version_min": None,  # the session's turns recorded no version
        "policy_version_max": None,
        "capture_level": "tokens",
        "trainable": True,
        "partial": False,
        "environment": "image",
        "image_digest": "sha256:" + "ab" * 32,
        "provenance": PROVENANCE.model_dump(),  # a null field stays null
        "schema_version": SCHEMA_VERSION,
    }
    assert {"code": "retokenization_split", "severity": "warn", "turn": 5}.items() <= (
        row["findings"][3].items()
    )


def test_with_placement_stamps_the_row_only() -> None:
    record = rollout("a1", rich_session())
    stamped = with_placement(record, node="10.0.0.3", host="ab12h0")
    (row,) = stamped.rollout.to_pylist()
    assert (row["node"], row["host"]) == ("10.0.0.3", "ab12h0")
    assert (stamped.result.node, stamped.result.host) == ("10.0.0.3", "ab12h0")
    # Everything else in the row, and the token rows, unchanged.
    (before,) = record.rollout.to_pylist()
    assert {k: v for k, v in row.items() if k not in ("node", "host")} == {
        k: v for k, v in before.items() if k not in ("node", "host")
    }
    assert stamped.turns is record.turns and stamped.sequences is record.sequences


def test_a_missing_reward_stays_null_and_zero_stays_zero() -> None:
    missing = rollout("a1", rich_session(), reward=None)
    zero = rollout("a2", rich_session(), reward=0.0)
    for table in (missing.rollout, missing.sequences, missing.turns):
        assert table["reward"].null_count == table.num_rows > 0
    for table in (zero.rollout, zero.sequences, zero.turns):
        assert table["reward"].null_count == 0
        assert set(table["reward"].to_pylist()) == {0.0}


def test_a_rollout_without_capture_still_has_its_row() -> None:
    encoded = dead_rollout("d1")
    (row,) = encoded.rollout.to_pylist()
    assert (row["ok"], row["error_type"], row["reward"]) == (False, "sandbox_start", None)
    # Unknown, not zero: there was no capture to count.
    assert row["counts"] == dict.fromkeys(row["counts"], None) | {"model_calls": 0}
    assert encoded.turns.num_rows == encoded.sequences.num_rows == 0
    assert encoded.turns.schema.equals(TURNS, check_metadata=True)


def test_a_record_crosses_processes_compressed_and_comes_back_exact() -> None:
    record = rollout("a1", rich_session())
    wire = pickle.dumps(record, protocol=5)
    back = pickle.loads(wire)
    assert back.result == record.result
    for name in ("rollout", "turns", "sequences"):
        assert_same_table(getattr(back, name), getattr(record, name))
    long = encode(chain(40, reply_len=50, message_len=400))
    # zstd on the wire: the ids' int32 bytes would otherwise travel as they are.
    assert len(pickle.dumps(long, protocol=5)) < 0.5 * long.nbytes


def _stream_bytes(table: pa.Table) -> int:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema) as stream:
        stream.write_table(table)
    return sink.getvalue().size


def test_a_small_record_is_smaller_on_the_wire_than_its_plain_streams() -> None:
    # Compression of each buffer on its own framed every column separately: a record of
    # a few turns came out larger compressed than as plain IPC streams.
    record = rollout("a1", rich_session())
    plain = _stream_bytes(record.turns) + _stream_bytes(record.sequences)
    assert len(pickle.dumps(record, protocol=5)) < plain


def test_rows_made_together_are_the_rows_made_alone() -> None:
    records = [
        with_placement(rollout("a1", rich_session()), node="10.0.0.1", host="h0"),
        dead_rollout("d1"),
        with_findings(
            rollout("a2", rich_session()),
            [FindingRecord(code="infra_retries", severity="info", message="1 retries")],
        ),
    ]
    together = rollouts_table(records)
    assert together.schema.equals(ROLLOUTS, check_metadata=True)
    rows = together.to_pylist()
    assert rows == [row for r in records for row in r.rollout.to_pylist()]
    assert [r["rollout_id"] for r in rows] == ["a1", "d1", "a2"]
    assert (rows[0]["node"], rows[0]["host"], rows[1]["node"]) == ("10.0.0.1", "h0", None)
    assert rows[1]["counts"]["model_calls"] == 0 and rows[1]["error_type"] == "sandbox_start"
    assert rows[2]["findings"][-1]["code"] == "infra_retries"
    assert rows[0]["findings"] == rows[2]["findings"][:-1]


def test_findings_added_later_reach_the_row_and_leave_the_tokens() -> None:
    record = rollout("a1", rich_session())
    extra = FindingRecord(code="infra_retries", severity="info", message="1 retries")
    later = with_findings(record, [extra])
    (row,) = later.rollout.to_pylist()
    assert row["findings"][-1] == extra.model_dump()
    assert later.result.findings[-1] == extra and record.result.findings[-1] != extra
    assert later.turns is record.turns and later.sequences is record.sequences


def test_one_long_sequence_is_wrapped_without_a_copy() -> None:
    capture = close_capture(chain(3))
    result = RolloutResult(rollout_id="r", task="t", agent="a", sandbox="s", ok=True, reward=None)
    tables = encode_record(result, capture)
    values = tables.sequences["input_ids"].chunk(0).values
    assert values.buffers()[1].address == capture.graph.sequences[0].input_ids.ctypes.data
    assert np.array_equal(values.to_numpy(), capture.graph.sequences[0].input_ids)


def test_policy_versions_reach_every_table_and_come_back() -> None:
    # A chain of three calls and a side root; a weight update (1 -> 2) landed during
    # turn 1, and the side call ran wholly at version 3.
    versions = {0: (1, 1), 1: (1, 2), 2: (2, 2), 3: (3, 3)}
    turns = [*chain(3, reply_len=2, message_len=2), turn(3, [90, 91], [92])]
    # Turn 1's first sampled token is version 1's, its second version 2's.
    segments = {0: None, 1: ((1, 0), (2, 1)), 2: None, 3: None}
    turns = [
        dataclasses.replace(
            t,
            policy_version_start=versions[t.index][0],
            policy_version_end=versions[t.index][1],
            policy_segments=segments[t.index],
        )
        for t in turns
    ]
    record = rollout("v1", turns)
    # Stored in full, the one-version turns' too.
    assert [
        [(s["version"], s["offset"]) for s in row]
        for row in record.turns["policy_segments"].to_pylist()
    ] == [[(1, 0)], [(1, 0), (2, 1)], [(2, 0)], [(3, 0)]]
    stored = record.turns.select(["index", "policy_version_start", "policy_version_end"])
    assert {
        r["index"]: (r["policy_version_start"], r["policy_version_end"]) for r in stored.to_pylist()
    } == versions
    spans = {
        tuple(r["turns"]): (r["policy_version_min"], r["policy_version_max"])
        for r in record.sequences.to_pylist()
    }
    assert spans == {(0, 1, 2): (1, 2), (3,): (3, 3)}
    (row,) = record.rollout.to_pylist()
    assert (row["policy_version_min"], row["policy_version_max"]) == (1, 3)
    assert_same_turns(turn_records(record.turns), turns)
    kept = with_findings(record, []).rollout.to_pylist()[0]
    assert (kept["policy_version_min"], kept["policy_version_max"]) == (1, 3)


def test_an_evaluation_is_ok_untrainable_and_has_no_sequences() -> None:
    record = rollout("e1", evaluated(chain(3)))
    (row,) = record.rollout.to_pylist()
    assert row["ok"] and row["reward"] == 1.0
    assert (row["capture_level"], row["trainable"]) == ("text", False)
    assert record.sequences.num_rows == 0
    turns = record.turns.to_pylist()
    assert [(t["prompt_delta"], t["token_ids"], t["logprobs"]) for t in turns] == [
        (None, None, None)
    ] * 3
    assert {(t["capture_level"], t["prompt_tokens"], t["completion_tokens"]) for t in turns} == {
        ("text", 7, 3)
    }
    assert all(t["request_messages"] and t["response_message"] for t in turns)
    assert [(t.capture_level, t.completion_tokens) for t in turn_records(record.turns)] == [
        ("text", 3)
    ] * 3


def test_version_4_turns_read_back_as_tokens() -> None:
    new = ("capture_level", "prompt_tokens", "completion_tokens")
    old = rollout("a1", chain(2)).turns.drop_columns(list(new))
    assert [(t.capture_level, t.prompt_tokens) for t in turn_records(old)] == [("tokens", 0)] * 2
