"""A run's rows as a comparison counts them: one per attempt (a retried lost try left
out), and the tokens each rollout sampled. Its own module so that what a comparison
reads of turns/ (`TURN_COLUMNS`) is named beside the code that reads it, and compare.py
loads no more than that.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from harbor_ray.report.tables import DatasetTables

__all__ = ["TURN_COLUMNS", "Rows", "read_rows"]


@dataclass(frozen=True)
class Rows:
    """A run's rows as the comparison reads them: one per attempt."""

    rows: list[dict[str, Any]]
    retried: int  # lost tries left out: their attempt has another row here
    sampled: Mapping[str, int]  # rollout id -> sampled tokens (captured rollouts only)


_COLUMNS = ("rollout_id", "task", "attempt", "reward", "error_type", "counts")
# All a comparison reads of turns/ (sequences/ not at all): never the tokens' lists
# beyond their lengths, nor the messages.
TURN_COLUMNS = ("rollout_id", "token_ids", "completion_tokens")


def read_rows(tables: DatasetTables) -> Rows:
    rollouts = tables.rollouts
    partial = (
        rollouts["partial"].to_pylist()
        if "partial" in rollouts.column_names
        else [None] * rollouts.num_rows
    )
    by_attempt: dict[tuple[str, int], list[tuple[bool, dict[str, Any]]]] = defaultdict(list)
    for row, is_partial in zip(rollouts.select(list(_COLUMNS)).to_pylist(), partial, strict=True):
        by_attempt[(row["task"], row["attempt"])].append((bool(is_partial), row))
    # One row an attempt: its retried row, else (every try lost) one of its lost tries.
    rows = [
        next((row for is_partial, row in tries if not is_partial), tries[0][1])
        for tries in by_attempt.values()
    ]
    retried = sum(len(tries) - 1 for tries in by_attempt.values())
    return Rows(rows, retried, _sampled_tokens(tables.turns))


def _sampled_tokens(turns: pa.Table) -> dict[str, int]:
    """Tokens the engine sampled per rollout: each turn's ids where it recorded them,
    else the engine's `usage.completion_tokens` (a capture below `tokens`)."""
    ids = pc.list_value_length(turns["token_ids"]).to_pylist()
    usage = (
        turns["completion_tokens"].to_pylist()
        if "completion_tokens" in turns.column_names
        else [None] * turns.num_rows
    )
    sampled: Counter[str] = Counter()
    for rollout_id, counted, reported in zip(
        turns["rollout_id"].to_pylist(), ids, usage, strict=True
    ):
        sampled[rollout_id] += counted if counted is not None else reported or 0
    return sampled
