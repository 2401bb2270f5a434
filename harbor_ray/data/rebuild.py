"""Full prompt ids from the stored deltas, and the turn records: the encoding's inverse.

turns/ stores each turn's prompt as the ids after its parent's prompt + sampled ids
(`encode`), so prompt(turn) = prompt(parent) + sampled(parent) + prompt_delta(turn),
and a root's delta is its whole prompt. Rebuilding needs every ancestor of a turn in the
same table: a whole rollout at a time (the writer keeps each rollout in one part).

Parents are rebuilt before children by depth, not by index: the graph links by prefix,
whatever the arrival order, so a parent's index need not be the smaller one. Each
prompt is written once into one output buffer, its parent's part copied from the
parent's already rebuilt slice, so the work is one copy of the output and no Python
loop runs over tokens.
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pyarrow as pa

from harbor_ray.capture.core.continuation import Continuation, Fallback
from harbor_ray.capture.core.export import render_export
from harbor_ray.capture.core.policy_segments import compact
from harbor_ray.capture.core.record import close_capture
from harbor_ray.capture.core.sampling import TurnSampling
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.schema import IDS
from harbor_ray.errors import BrokenRowsError

__all__ = ["export_document", "rebuild_prompts", "turn_records"]

_MAX_LIST_VALUES = np.iinfo(np.int32).max


def rebuild_prompts(turns: pa.Table) -> pa.Table:
    """`turns` (rows of turns/) with `prompt_delta` replaced by the full `prompt_ids`.

    Rows keep their order. Raises ValueError when a turn's parent is not in `turns` or
    its parent has no ids: the table does not hold whole rollouts, or was not written
    by `encode`.
    """
    parents = _parent_rows(turns)
    delta_values, delta_offsets, delta_null = _lists(turns.column("prompt_delta"))
    token_values, token_offsets, token_null = _lists(turns.column("token_ids"))
    # Python ints for bounds: numpy scalars as slice bounds make each copy ~10x slower.
    d_off, t_off = delta_offsets.tolist(), token_offsets.tolist()
    order = [row for row in _parents_first(parents) if not delta_null[row]]

    length = [0] * len(parents)
    for row in order:
        parent = parents[row]
        if parent is not None:
            if delta_null[parent] or token_null[parent]:
                raise BrokenRowsError(f"row {row}: parent row {parent} lacks prompt or sampled ids")
            length[row] = length[parent] + t_off[parent + 1] - t_off[parent]
        length[row] += d_off[row + 1] - d_off[row]

    starts = [0, *itertools.accumulate(length)]
    out = np.empty(starts[-1], np.int32)
    for row in order:
        at = starts[row]
        parent = parents[row]
        if parent is not None:
            inherited = length[parent]
            out[at : at + inherited] = out[starts[parent] : starts[parent] + inherited]
            at += inherited
            sampled = token_values[t_off[parent] : t_off[parent + 1]]
            out[at : at + len(sampled)] = sampled
            at += len(sampled)
        out[at : starts[row + 1]] = delta_values[d_off[row] : d_off[row + 1]]

    position = turns.schema.get_field_index("prompt_delta")
    prompts = _chunked_lists(out, np.asarray(starts, np.int64), delta_null)
    return turns.set_column(position, pa.field("prompt_ids", prompts.type), prompts)


def turn_records(turns: pa.Table) -> list[TurnRecord]:
    """The `TurnRecord`s one rollout's turns/ rows were encoded from, exactly.

    So stored data can be linked and validated again by later graph code (as
    `turns_from_export` does for the export document). `turns` holds one rollout, with
    `prompt_ids` (rebuilt) or `prompt_delta` (rebuilt here), and its message columns.
    """
    assert len(set(turns.column("rollout_id").to_pylist())) <= 1, (
        "turn_records takes the turns of one rollout"
    )
    if "prompt_ids" not in turns.column_names:
        turns = rebuild_prompts(turns)
    rows = turns.drop_columns(["prompt_ids", "token_ids", "logprobs"]).to_pydict()
    return [
        TurnRecord(
            index=rows["index"][row],
            dialect=rows["dialect"][row],
            prompt_ids=_array(turns["prompt_ids"][row], np.int32),
            token_ids=_array(turns["token_ids"][row], np.int32),
            logprobs=_array(turns["logprobs"][row], np.float32),
            logprobs_mode=rows["logprobs_mode"][row],
            sampling=TurnSampling(**rows["sampling"][row]),
            finish_reason=rows["finish_reason"][row],
            request_messages_json=rows["request_messages"][row].encode(),
            response_message_json=rows["response_message"][row].encode(),
            request_model=rows["request_model"][row],
            started_at=rows["started_at"][row],
            ended_at=rows["ended_at"][row],
            auxiliary=rows["auxiliary"][row],
            policy_version_start=rows["policy_version_start"][row],
            policy_version_end=rows["policy_version_end"][row],
            policy_segments=compact(_segments(rows, row), rows["policy_version_start"][row]),
            continuation=_continuation(rows, row),
            # Null or absent in rows written before version 5: those were all `tokens`.
            capture_level=_since_v5(rows, "capture_level", row) or "tokens",
            prompt_tokens=_since_v5(rows, "prompt_tokens", row) or 0,
            completion_tokens=_since_v5(rows, "completion_tokens", row) or 0,
            # Schema version 8 (the same reading: absent before it).
            upstream_retries=_since_v5(rows, "upstream_retries", row) or 0,
        )
        for row in range(turns.num_rows)
    ]


def _since_v5(rows: dict[str, list[Any]], column: str, row: int) -> Any:
    """A turns/ column schema version 5 added; None in a table without it."""
    values = rows.get(column)
    return None if values is None else values[row]


def _segments(rows: dict[str, list[Any]], row: int) -> tuple[tuple[int, int], ...] | None:
    """A turn's `policy_segments` (schema version 6); None in a table without them."""
    values = rows.get("policy_segments")
    segments = None if values is None else values[row]
    return None if segments is None else tuple((s["version"], s["offset"]) for s in segments)


def _continuation(rows: dict[str, list[Any]], row: int) -> Continuation | None:
    turn, fallback = rows["continues"][row], rows["stitch_fallback"][row]
    if turn is None:
        return None
    return Continuation(
        turn, bool(rows["stitched"][row]), None if fallback is None else Fallback(fallback)
    )


def export_document(record: RolloutRecord) -> dict[str, Any] | None:
    """The capture export document of a rollout, rendered from its record's turns/ rows
    (None for a rollout without a capture): e.g. `harbor-ray rollout`'s results.jsonl."""
    counts = record.result.counts
    if counts is None:
        return None
    closed = close_capture(
        turn_records(record.turns),
        engine_errors=counts.engine_errors,
        budget_stops=counts.budget_stops,
    )
    return render_export(closed)


def _array(value: pa.ListScalar, dtype: type[np.generic]) -> np.ndarray | None:
    values = value.values
    return None if values is None else values.to_numpy(zero_copy_only=False).astype(dtype)


def _parent_rows(turns: pa.Table) -> list[int | None]:
    """Each row's parent as a row number, found by (rollout_id, index)."""
    rollouts = turns.column("rollout_id").to_pylist()
    indices = turns.column("index").to_pylist()
    row_of = {key: row for row, key in enumerate(zip(rollouts, indices, strict=True))}
    parents: list[int | None] = []
    for rollout, parent in zip(rollouts, turns.column("parent").to_pylist(), strict=True):
        if parent is None:
            parents.append(None)
        elif (rollout, parent) in row_of:
            parents.append(row_of[rollout, parent])
        else:
            raise BrokenRowsError(
                f"rollout {rollout!r}: parent turn {parent} is not in the table; "
                "rebuilding needs every turn of a rollout"
            )
    return parents


def _parents_first(parents: list[int | None]) -> list[int]:
    """Rows ordered by depth, so every parent precedes its children."""
    depth = [-1] * len(parents)
    for row in range(len(parents)):
        chain: list[int] = []
        at: int | None = row
        while at is not None and depth[at] < 0:
            chain.append(at)
            if len(chain) > len(parents):
                raise BrokenRowsError(f"row {row}: parent links form a cycle")
            at = parents[at]
        known = -1 if at is None else depth[at]
        for step, link in enumerate(reversed(chain), start=1):
            depth[link] = known + step
    return sorted(range(len(parents)), key=depth.__getitem__)


def _lists(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray, list[bool]]:
    """A list column as (flat values, row offsets into them, which rows are null)."""
    array = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
    if len(array) == 0:
        return np.empty(0, np.int32), np.zeros(1, np.int64), []
    offsets = array.offsets.to_numpy().astype(np.int64)
    values = array.values.to_numpy()
    null = array.is_null().to_numpy(zero_copy_only=False).tolist()
    return values, offsets, null


def _chunked_lists(values: np.ndarray, starts: np.ndarray, null: list[bool]) -> pa.ChunkedArray:
    """Lists over `values` split into chunks whose offsets fit in 32 bits.

    Rebuilt prompts hold the sum of all prompts, which for long rollouts outgrows one
    list array; splitting keeps the column's type the same as the other id columns.
    """
    chunks: list[pa.Array] = []
    first, rows = 0, len(starts) - 1
    while first < rows or not chunks:
        # The last row boundary within 2**31 - 1 values of this chunk's first value.
        end = int(np.searchsorted(starts, starts[first] + _MAX_LIST_VALUES, side="right")) - 1
        last = min(max(end, first + 1), rows)
        offsets = (starts[first : last + 1] - starts[first]).astype(np.int32)
        chunks.append(
            pa.ListArray.from_arrays(
                pa.array(offsets),
                pa.array(values[starts[first] : starts[last]]),
                type=IDS,
                mask=pa.array(null[first:last], pa.bool_()),
            )
        )
        first = last
    return pa.chunked_array(chunks, type=IDS)
