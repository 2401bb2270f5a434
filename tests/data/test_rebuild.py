from __future__ import annotations

import random

import pyarrow as pa
import pytest

from harbor_ray.data import rebuild
from harbor_ray.data.rebuild import rebuild_prompts, turn_records
from harbor_ray.data.schema import TURNS
from harbor_ray.errors import BrokenRowsError
from tests.capture.turns_factory import chain
from tests.data.rollouts import assert_same_table, assert_same_turns, encode, rich_session


def stored(turns, rollout_id: str = "r") -> pa.Table:
    return encode(turns, rollout_id=rollout_id, reward=None).turns


def prompts_by_turn(table: pa.Table) -> dict[tuple[str, int], list[int] | None]:
    rows = table.select(["rollout_id", "index", "prompt_ids"]).to_pylist()
    return {(r["rollout_id"], r["index"]): r["prompt_ids"] for r in rows}


def expected_prompts(turns, rollout_id: str = "r") -> dict[tuple[str, int], list[int] | None]:
    return {
        (rollout_id, t.index): None if t.prompt_ids is None else t.prompt_ids.tolist()
        for t in turns
    }


def test_prompt_ids_replace_the_deltas_in_place() -> None:
    table = stored(rich_session())
    rebuilt = rebuild_prompts(table)
    position = table.schema.get_field_index("prompt_delta")
    assert rebuilt.schema.field(position).name == "prompt_ids"
    assert rebuilt["prompt_ids"].type == TURNS.field("prompt_delta").type
    assert_same_table(rebuilt.drop_columns(["prompt_ids"]), table.drop_columns(["prompt_delta"]))
    assert prompts_by_turn(rebuilt) == expected_prompts(rich_session())


def test_rows_in_any_order_and_mixed_rollouts() -> None:
    # Ray Data and pandas may hand rows over in any order; two rollouts reuse indices.
    a, b = rich_session(), chain(4)
    table = pa.concat_tables([stored(a, "a"), stored(b, "b")])
    order = list(range(table.num_rows))
    random.Random(7).shuffle(order)
    rebuilt = rebuild_prompts(table.take(order))
    assert prompts_by_turn(rebuilt) == expected_prompts(a, "a") | expected_prompts(b, "b")


def test_a_missing_parent_is_refused() -> None:
    table = stored(chain(3))
    with pytest.raises(BrokenRowsError, match="parent turn 0 is not in the table"):
        rebuild_prompts(table.slice(1))


def test_an_empty_table() -> None:
    rebuilt = rebuild_prompts(stored([]))
    assert rebuilt.num_rows == 0
    assert rebuilt["prompt_ids"].type == TURNS.field("prompt_delta").type


def test_prompts_beyond_one_list_arrays_offsets_are_split_into_chunks(monkeypatch) -> None:
    # Rebuilt prompts of long rollouts outgrow 32-bit offsets; a small limit shows the split.
    monkeypatch.setattr(rebuild, "_MAX_LIST_VALUES", 20)
    session = chain(6)  # prompts of 3, 7, 11, 15, 19 and 23 ids
    rebuilt = rebuild_prompts(stored(session))
    assert rebuilt["prompt_ids"].num_chunks > 1
    assert max(len(chunk.values) for chunk in rebuilt["prompt_ids"].chunks) <= 23
    assert prompts_by_turn(rebuilt) == expected_prompts(session)


def test_turn_records_from_deltas_or_from_rebuilt_prompts() -> None:
    session = rich_session()
    table = stored(session)
    assert_same_turns(turn_records(table), session)
    assert_same_turns(turn_records(rebuild_prompts(table)), session)


def test_turn_records_take_one_rollout() -> None:
    table = pa.concat_tables([stored(chain(2), "a"), stored(chain(2), "b")])
    with pytest.raises(AssertionError, match="one rollout"):
        turn_records(table)
