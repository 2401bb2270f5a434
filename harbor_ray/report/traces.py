"""What the trace viewer shows of each rollout, from a dataset's tables: pure, JSON out.

Token text: the dataset stores the engine's ids, not their text, and a local
re-tokenisation could show text the engine never produced. So each turn keeps its ids
(sampled ones with their logprob and loss mask); the viewer shows each id as its text
when the report has the served model's tokenizer (tokenizer.py, token_text.py: id by
id, never re-tokenised), and the turn's text as the stored messages carry it.

The loss mask is read from sequences/, never recomputed: a turn's sampled ids sit in a
sequence's `input_ids` right after its full prompt, so its mask is that slice of the
sequence's `loss_mask`. A turn on several paths is shown trained (1) where any of its
sequences trains the id; discarded retries are on all-zero paths only.

Messages: each turn's request repeats the whole conversation so far; when it starts
with its parent's request, only what follows is kept (the count of the rest is kept
too), so a trace costs about one copy of the conversation instead of one per turn.
"""

from __future__ import annotations

import math
from collections import defaultdict
from typing import Any

import orjson
import pyarrow as pa
import pyarrow.compute as pc

from harbor_ray.data.schema import MESSAGE_COLUMNS
from harbor_ray.report.tables import POLICY_PREFIX, DatasetTables, policy_columns

__all__ = ["TOKEN_TEXT_NOTE", "summaries", "traces"]

TOKEN_TEXT_NOTE = (
    "The dataset stores the engine's ids, not their text: each id is shown with its "
    "logprob and loss mask, as its text when a tokenizer is at hand (decoded id by id "
    "for display, never re-tokenised), else as the id."
)

_SUMMARY = ("rollout_id", "task", "attempt", "ok", "error_type", "reward")
_TURN_SCALARS = (
    "index",
    "parent",
    "root",
    "role",
    "auxiliary",
    "dialect",
    "finish_reason",
    "request_model",
    "started_at",
    "ended_at",
)


# Written from schema version 5 on: an older dataset's rows were all `tokens`.
_SINCE_V5 = {"capture_level": "tokens", "prompt_tokens": None, "completion_tokens": None}


def summaries(rollouts: pa.Table) -> list[dict[str, Any]]:
    """One small record per rollout: what the viewer lists and filters on."""
    rows = rollouts.select(list(_SUMMARY)).to_pylist()
    turns = pc.struct_field(rollouts["counts"], "turns").to_pylist()
    levels = _column(rollouts, "capture_level")
    return [
        {**row, "turns": n, "capture_level": level}
        for row, n, level in zip(rows, turns, levels, strict=True)
    ]


def _column(table: pa.Table, name: str) -> list[Any]:
    """A column added in schema version 5, or its older meaning in every row."""
    if name in table.column_names:
        values: list[Any] = table[name].to_pylist()
        return values
    return [_SINCE_V5[name]] * table.num_rows


def traces(tables: DatasetTables) -> dict[str, dict[str, Any]]:
    """Every rollout's trace by rollout id: its row, turns (ids, logprobs, mask,
    messages) and sequences, JSON-ready (NaN logprobs are null)."""
    turns_by = _rows_by_rollout(tables.turns, tables.turns.column_names)
    sequences_by = _rows_by_rollout(
        tables.sequences,
        ["rollout_id", "sequence", "role", "root", "leaf", "turns", "input_ids", "loss_mask"],
    )
    policy = policy_columns(tables.rollouts)
    out: dict[str, dict[str, Any]] = {}
    for row in tables.rollouts.to_pylist():
        rollout_id = row["rollout_id"]
        turns = sorted(turns_by.get(rollout_id, []), key=lambda t: t["index"])
        sequences = sequences_by.get(rollout_id, [])
        out[rollout_id] = {
            **{k: v for k, v in row.items() if k not in policy},
            "rewards": dict(row["rewards"]),
            "timings": dict(row["timings"]),
            "policy": {c: row[c] for c in policy},
            "turns": _turns(turns, sequences),
            "sequences": [
                {
                    "sequence": s["sequence"],
                    "role": s["role"],
                    "root": s["root"],
                    "leaf": s["leaf"],
                    "turns": s["turns"],
                    "length": len(s["input_ids"]),
                    "trained": sum(s["loss_mask"]),
                }
                for s in sorted(sequences, key=lambda s: s["sequence"])
            ],
        }
    return out


def _rows_by_rollout(table: pa.Table, columns: list[str]) -> dict[str, list[dict[str, Any]]]:
    grouped: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in table.select(columns).to_pylist():
        grouped[row["rollout_id"]].append(row)
    return grouped


def _prompt_lengths(turns: list[dict[str, Any]]) -> dict[int, int | None]:
    """Each turn's full prompt length, from the stored deltas: len(prompt(parent)) +
    len(sampled(parent)) + len(delta). None where the engine sent no prompt ids."""
    by_index = {t["index"]: t for t in turns}
    lengths: dict[int, int | None] = {}

    def length(index: int) -> int | None:
        if index in lengths:
            return lengths[index]
        turn = by_index[index]
        lengths[index] = None  # a cycle (never written by the encoder) stays unknown
        if turn["prompt_delta"] is None:
            return None
        total: int | None = len(turn["prompt_delta"])
        parent = turn["parent"]
        if parent is not None:
            inherited = length(parent) if parent in by_index else None
            sampled = by_index[parent]["token_ids"] if parent in by_index else None
            total = (
                None
                if inherited is None or sampled is None
                else (inherited + len(sampled) + len(turn["prompt_delta"]))
            )
        lengths[index] = total
        return total

    for index in by_index:
        length(index)
    return lengths


def _masks(
    turns: list[dict[str, Any]], sequences: list[dict[str, Any]]
) -> dict[int, list[int] | None]:
    """Each turn's loss mask over its sampled ids, read from the sequences on its path.

    None when no sequence holds the turn or a sequence's ids there are not the turn's
    own (a dataset this reader cannot vouch for): the viewer then says so."""
    lengths = _prompt_lengths(turns)
    by_index = {t["index"]: t for t in turns}
    masks: dict[int, list[int] | None] = {}
    for sequence in sequences:
        for index in sequence["turns"]:
            turn, start = by_index.get(index), lengths.get(index)
            if turn is None or start is None or turn["token_ids"] is None:
                masks[index] = None
                continue
            end = start + len(turn["token_ids"])
            if sequence["input_ids"][start:end] != turn["token_ids"]:
                masks[index] = None
                continue
            mask = sequence["loss_mask"][start:end]
            if index not in masks:
                masks[index] = mask
            elif (earlier := masks[index]) is not None:
                masks[index] = [a | b for a, b in zip(earlier, mask, strict=True)]
    return masks


def _turns(turns: list[dict[str, Any]], sequences: list[dict[str, Any]]) -> list[dict[str, Any]]:
    masks = _masks(turns, sequences)
    policy = [c for c in (turns[0] if turns else {}) if c.startswith(POLICY_PREFIX)]
    requests = {t["index"]: _json(t[MESSAGE_COLUMNS[0]], []) for t in turns}
    out = []
    for turn in turns:
        messages = requests[turn["index"]]
        parent = requests.get(turn["parent"]) if turn["parent"] is not None else None
        skipped = len(parent) if parent and messages[: len(parent)] == parent else 0
        out.append(
            {
                **{k: turn[k] for k in _TURN_SCALARS},
                **{k: turn.get(k, default) for k, default in _SINCE_V5.items()},
                "prompt_delta": turn["prompt_delta"],
                "token_ids": turn["token_ids"],
                "logprobs": None
                if turn["logprobs"] is None
                else [None if math.isnan(p) else round(p, 4) for p in turn["logprobs"]],
                "mask": masks.get(turn["index"]),
                "messages": messages[skipped:],
                "messages_skipped": skipped,
                "response": _json(turn[MESSAGE_COLUMNS[1]], {}),
                "policy": {c: turn[c] for c in policy},
            }
        )
    return out


def _json(text: str | None, default: Any) -> Any:
    if not text:
        return default
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text  # shown as the raw string it is
