from __future__ import annotations

import dataclasses
import math

import pyarrow as pa

from harbor_ray.capture.core.graph import build_graph
from harbor_ray.data.rebuild import rebuild_prompts
from harbor_ray.data.trl import call_records, call_records_from_rows, rollout_samples, trl_columns
from tests.capture.turns_factory import chain, turn
from tests.data.rollouts import broken_session, encode, rich_session

NAN = float("nan")


def stored(turns, *, rollout_id: str = "r", reward: float | None = 1.0, ok: bool = True):
    return encode(turns, rollout_id=rollout_id, task="fix-bug", reward=reward, ok=ok).turns


def by_turn(records) -> dict[int, dict]:
    return {r["turn"]: r for r in records}


def test_one_record_per_trainable_call_with_trls_keys() -> None:
    session = rich_session()
    records = by_turn(call_records(stored(session)))
    assert sorted(records) == [0, 2, 3, 4, 5, 6, 7, 8]  # turn 1 is an abandoned retry
    for t in session:
        if t.index in records:
            record = records[t.index]
            assert record["prompt_ids"] == t.prompt_ids.tolist()
            assert record["completion_ids"] == t.token_ids.tolist()
            assert len(record["logprobs"]) == len(record["env_mask"]) == len(t.token_ids)
    assert records[3] == {
        "prompt_ids": [1, 2, 3, 10, 11, 4, 21, 22, 5],
        "completion_ids": [23, 24],
        # The engine gave no logprob for the first token: 0.0 and masked, never NaN.
        "logprobs": [0.0, -0.75],
        "env_mask": [0, 1],
        "reward": 1.0,
        "rollout_id": "r",
        "task": "fix-bug",
        "turn": 3,
        "role": "agent",
    }
    assert records[6]["role"] == "auxiliary"


def test_masks_match_the_sequences_loss_mask() -> None:
    session = rich_session()
    graph = build_graph(session)
    records = by_turn(call_records(stored(session)))
    for sequence in graph.sequences:
        if sequence.role.value == "discarded":
            continue
        leaf = records[sequence.leaf]
        tail = sequence.loss_mask[len(leaf["prompt_ids"]) :].tolist()
        assert tail == leaf["env_mask"]
        logprobs = sequence.logprobs[len(leaf["prompt_ids"]) :].tolist()
        assert logprobs == leaf["logprobs"]


def test_discarded_calls_on_request() -> None:
    records = by_turn(call_records(stored(rich_session()), include_discarded=True))
    assert records[1]["role"] == "discarded"
    assert records[1]["completion_ids"] == [20]


def test_calls_without_ids_are_skipped_and_unusable_rollouts_on_request() -> None:
    table = stored(broken_session(), ok=False)
    assert call_records(table) == []
    assert sorted(by_turn(call_records(table, only_ok=False))) == [0, 1, 2]


def test_a_missing_reward_stays_none() -> None:
    records = call_records(stored(chain(2), reward=None))
    assert [r["reward"] for r in records] == [None, None]


def test_logprobs_absent_or_misaligned_train_nothing() -> None:
    absent = turn(0, [1, 2], [3, 4], None)
    misaligned = turn(1, [5], [6, 7], [-0.5])
    records = by_turn(call_records(stored([absent, misaligned]), only_ok=False))
    for record in records.values():
        assert record["logprobs"] == [0.0, 0.0]
        assert record["env_mask"] == [0, 0]
        assert not any(math.isnan(x) for x in record["logprobs"])


def test_stored_and_rebuilt_tables_give_the_same_records() -> None:
    table = pa.concat_tables([stored(rich_session(), rollout_id="a"), stored(chain(3))])
    assert call_records(table) == call_records(rebuild_prompts(table))


def test_rows_as_dicts_give_the_same_records_as_the_table() -> None:
    # An online group carries turns/ rows as JSON dicts (a NaN logprob arrives as None).
    table = pa.concat_tables([stored(rich_session(), rollout_id="a"), stored(chain(3))])
    rows = rebuild_prompts(table).to_pylist()
    for row in rows:
        if row["logprobs"] is not None:
            row["logprobs"] = [None if math.isnan(x) else x for x in row["logprobs"]]
    assert call_records_from_rows(rows) == call_records(table)
    assert call_records_from_rows(rows, include_discarded=True) == call_records(
        table, include_discarded=True
    )
    assert trl_columns(call_records(table))["turn"] == [r["turn"] for r in call_records(table)]
    assert trl_columns([]) == {}


# --- one sample per rollout (GRPO's) ---------------------------------------------------


def rollout_row(rollout_id: str, *, reward: float | None = 1.0, ok: bool = True) -> dict:
    return {
        "rollout_id": rollout_id,
        "task": "fix-bug",
        "reward": reward,
        "ok": ok,
        "policy_version_min": 0,
        "policy_version_max": 0,
    }


def sequences_of(turns, rollout_id: str) -> pa.Table:
    return encode(turns, rollout_id=rollout_id, task="fix-bug", reward=1.0, ok=True).sequences


def test_one_sample_per_rollout_splits_the_agent_sequence_at_its_first_sampled_id() -> None:
    [sequence] = sequences_of(chain(3), "a").to_pylist()
    [sample] = rollout_samples([rollout_row("a")], [sequence])
    first = sequence["loss_mask"].index(1)
    assert sample["prompt_ids"] == sequence["input_ids"][:first]
    assert sample["prompt_ids"] + sample["completion_ids"] == sequence["input_ids"]
    assert sample["env_mask"] == sequence["loss_mask"][first:]
    assert 0 in sample["env_mask"]  # the later turns' prompts sit inside the completion
    assert sample["logprobs"] == [
        lp if m else None
        for lp, m in zip(sequence["logprobs"][first:], sample["env_mask"], strict=True)
    ]
    assert (sample["reward"], sample["trainable"], sample["task"]) == (1.0, True, "fix-bug")


def test_a_sample_says_which_version_sampled_each_completion_token() -> None:
    # Two calls: the first crossed an update (its second token is version 2's).
    first, second = chain(2)
    turns = [
        dataclasses.replace(first, policy_version_start=1, policy_segments=((1, 0), (2, 1))),
        dataclasses.replace(second, policy_version_start=2),
    ]
    record = encode(turns, rollout_id="a", task="fix-bug")
    [sample] = rollout_samples([rollout_row("a")], record.sequences, turns=record.turns)
    sampled = [v for v, m in zip(sample["policy_versions"], sample["env_mask"], strict=True) if m]
    assert sampled == [1] + [2] * (sum(sample["env_mask"]) - 1)
    assert {
        v for v, m in zip(sample["policy_versions"], sample["env_mask"], strict=True) if not m
    } == {None}  # the second call's own prompt, inside the completion
    [unknown] = rollout_samples([rollout_row("a")], record.sequences)
    assert set(unknown["policy_versions"]) == {None}


def test_the_agent_sequence_with_most_trained_ids_is_the_rollouts_sample() -> None:
    sequences = sequences_of(rich_session(), "r")
    agent = [s for s in sequences.to_pylist() if s["role"] == "agent"]
    assert len(agent) > 1
    best = max(agent, key=lambda s: sum(s["loss_mask"]))
    [sample] = rollout_samples(pa.Table.from_pylist([rollout_row("r")]), sequences)
    assert sample["prompt_ids"] + sample["completion_ids"] == best["input_ids"]


def test_every_rollout_gives_a_sample_in_order_even_with_nothing_to_train() -> None:
    rollouts = [rollout_row("b"), rollout_row("lost", reward=None, ok=False), rollout_row("a")]
    sequences = pa.concat_tables([sequences_of(chain(2), "a"), sequences_of(chain(3), "b")])
    samples = rollout_samples(rollouts, sequences, filler_id=7)
    assert [s["rollout_id"] for s in samples] == ["b", "lost", "a"]
    lost = samples[1]
    assert (lost["prompt_ids"], lost["completion_ids"], lost["env_mask"]) == ([7], [7], [0])
    assert (lost["reward"], lost["trainable"]) == (None, False)
    assert [s["trainable"] for s in samples] == [True, False, True]
    unscored = rollout_samples([rollout_row("a", reward=None)], sequences)
    assert not unscored[0]["trainable"] and any(unscored[0]["env_mask"])


def test_an_untrainable_row_gives_an_untrainable_sample_and_old_rows_read_ok() -> None:
    """A version-5 row says `trainable` (an evaluation is ok and not trainable); a
    version-4 row has none, and is trainable exactly when ok."""
    sequences = sequences_of(chain(2), "a")
    evaluation = {**rollout_row("a"), "capture_level": "text", "trainable": False}
    assert [s["trainable"] for s in rollout_samples([evaluation], sequences)] == [False]
    assert [s["trainable"] for s in rollout_samples([rollout_row("a")], sequences)] == [True]


def test_calls_captured_below_tokens_are_skipped() -> None:
    """Even were an evaluation's turn to hold ids, no record is made of it."""
    turns = stored(chain(2))
    levels = pa.array(["text", "tokens"])
    marked = turns.set_column(
        turns.schema.get_field_index("capture_level"), "capture_level", levels
    )
    assert [r["turn"] for r in call_records(marked)] == [1]
    assert [r["turn"] for r in call_records(turns.drop_columns(["capture_level"]))] == [0, 1]
