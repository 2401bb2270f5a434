"""Per-turn records in the shape TRL's GRPOTrainer takes pre-tokenised rollouts in.

TRL's `rollout_func` contract (GRPOTrainer, TRL 1.x) requires the keys `prompt_ids`,
`completion_ids` and `logprobs` (lists of ints / floats per sample); it pops `env_mask`
and multiplies it into the completion loss mask (1 = trained, 0 = not); every other key
is forwarded to the reward functions as a keyword argument. One record here is one
model call:

  prompt_ids      the engine's full prompt ids of the call (rebuilt from the deltas)
  completion_ids  the ids the engine sampled
  logprobs        the engine's logprob per sampled id; 0.0 where it gave none
  env_mask        1 where the logprob is finite, else 0: the same tokens the loss mask
                  of sequences/ trains on (NaN would poison TRL's importance ratio)
  reward          the rollout's reward, None when the verifier never ran (TRL accepts
                  None from a reward function; it is never turned into 0.0)
  rollout_id, task, turn, role   where the record came from

Records are Python lists because that is TRL's contract; a `rollout_func` returns them
column-wise (`trl_columns`). `to_trl_records` reads a turns/ table; `rows_to_trl_records`
reads the same rows as dicts (an online group's `turns`), through the same code.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from harbor_ray.capture.core.graph import Role
from harbor_ray.data.rebuild import rebuild_prompts
from harbor_ray.data.schema import IDS, TURNS

__all__ = ["rows_to_trl_records", "to_trl_records", "trl_columns"]

# The turns/ columns a record is made of, prompts in full: what `rows_to_trl_records`
# types dict rows as (any other key of a row is left out).
_RECORD_COLUMNS = pa.schema([
    pa.field("prompt_ids", IDS),
    *(TURNS.field(name) for name in (
        "token_ids", "logprobs", "reward", "ok", "role", "rollout_id", "task", "index")),
])


def to_trl_records(
    turns: pa.Table, *, include_discarded: bool = False, only_ok: bool = True
) -> list[dict[str, Any]]:
    """One TRL record per model call of `turns`, in the table's row order.

    `turns` is a table of turns/ rows: as read (`prompt_ids`, e.g. a `read_turns` batch)
    or as stored (`prompt_delta`, rebuilt here; then it must hold whole rollouts). Calls
    without ids are skipped (nothing to train); abandoned retries unless
    `include_discarded`; rows of unusable rollouts unless `only_ok` is False.
    """
    if "prompt_ids" not in turns.column_names:
        turns = rebuild_prompts(turns)
    keep = pc.and_(pc.is_valid(turns["prompt_ids"]), pc.is_valid(turns["token_ids"]))
    if not include_discarded:
        keep = pc.and_(keep, pc.not_equal(turns["role"], Role.DISCARDED.value))
    if only_ok:
        keep = pc.and_(keep, turns["ok"])
    rows = turns.filter(keep)
    ids = rows.select(["prompt_ids", "token_ids"]).to_pydict()
    return [
        {
            "prompt_ids": prompt,
            "completion_ids": completion,
            **_logprobs_and_mask(logprobs.values, len(completion)),
            "reward": reward,
            "rollout_id": rollout_id,
            "task": task,
            "turn": index,
            "role": role,
        }
        for prompt, completion, logprobs, reward, rollout_id, task, index, role in zip(
            ids["prompt_ids"],
            ids["token_ids"],
            rows["logprobs"],
            rows["reward"].to_pylist(),
            rows["rollout_id"].to_pylist(),
            rows["task"].to_pylist(),
            rows["index"].to_pylist(),
            rows["role"].to_pylist(),
            strict=True,
        )
    ]


def rows_to_trl_records(rows: Iterable[Mapping[str, Any]], *,
                        include_discarded: bool = False, only_ok: bool = True
                        ) -> list[dict[str, Any]]:
    """`to_trl_records` over turns/ rows given as dicts with `prompt_ids` in full (as
    JSON gives them: a logprob the engine did not give is None, and trains nothing)."""
    table = pa.Table.from_pylist(list(rows), schema=_RECORD_COLUMNS)
    return to_trl_records(table, include_discarded=include_discarded, only_ok=only_ok)


def trl_columns(records: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """Records column-wise, as a `rollout_func` returns them (TRL's contract)."""
    keys = records[0].keys() if records else ()
    return {key: [record[key] for record in records] for key in keys}


def _logprobs_and_mask(values: pa.Array | None, n: int) -> dict[str, list[Any]]:
    """Finite logprobs and their mask; absent or misaligned ones train nothing.

    That is the rule `TrainingSequence`'s loss mask follows, so a turn is trained on the
    same tokens whichever table a trainer reads.
    """
    logprobs = None if values is None else values.to_numpy(zero_copy_only=False)
    if logprobs is None or len(logprobs) != n:
        return {"logprobs": [0.0] * n, "env_mask": [0] * n}
    finite = np.isfinite(logprobs)
    return {
        "logprobs": np.where(finite, logprobs, 0.0).tolist(),
        "env_mask": finite.astype(np.int8).tolist(),
    }
