"""Records in the shape TRL's GRPOTrainer takes pre-tokenised rollouts in.

TRL's `rollout_func` returns, per sample, `prompt_ids`, `completion_ids` and `logprobs`;
it pops `env_mask` (1 = trained) and forwards every other key to the reward functions.
Records are Python lists because that is TRL's contract; `trl_columns` turns them
column-wise, as a `rollout_func` returns them.

`rollout_samples`: one sample per rollout, from sequences/, what GRPO trains on (a
group is n rollouts of one task) and TRL's own multi-turn shape: the prompt is the agent
sequence up to its first sampled id, the completion the rest (tool output included),
`env_mask` its loss mask, `logprobs` the engine's for sampled ids and None elsewhere,
`policy_versions` the version that sampled each completion id (None where none did).

`call_records` (a turns/ table) and `call_records_from_rows` (the same rows as dicts, an
online group's `turns`): one record per model call, for trainers that train on turns.
Each re-reads the history before it, and one rollout's records are no GRPO group. A
logprob the engine did not give is 0.0 with `env_mask` 0 (NaN would poison TRL's
importance ratio), the tokens sequences/ does not train on either.
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
from harbor_ray.data.token_versions import sequence_versions

__all__ = ["call_records", "call_records_from_rows", "rollout_samples", "trl_columns"]

# The turns/ columns a record is made of, prompts in full: what `call_records_from_rows`
# types dict rows as (any other key of a row is left out).
_RECORD_COLUMNS = pa.schema(
    [
        pa.field("prompt_ids", IDS),
        *(
            TURNS.field(name)
            for name in (
                "token_ids",
                "logprobs",
                "reward",
                "ok",
                "role",
                "rollout_id",
                "task",
                "index",
            )
        ),
    ]
)


def call_records(
    turns: pa.Table, *, include_discarded: bool = False, only_ok: bool = True
) -> list[dict[str, Any]]:
    """One TRL record per model call of `turns`, in the table's row order.

    `turns` is a table of turns/ rows: as read (`prompt_ids`, e.g. a `read_turns` batch)
    or as stored (`prompt_delta`, rebuilt here; then it must hold whole rollouts). Calls
    without ids are skipped (nothing to train), and so are calls captured below the
    `tokens` level (an evaluation's, whatever they hold); abandoned retries unless
    `include_discarded`; rows of unusable rollouts unless `only_ok` is False.
    """
    if "prompt_ids" not in turns.column_names:
        turns = rebuild_prompts(turns)
    keep = pc.and_(pc.is_valid(turns["prompt_ids"]), pc.is_valid(turns["token_ids"]))
    if "capture_level" in turns.column_names:  # absent before schema version 5
        keep = pc.and_(keep, pc.fill_null(pc.equal(turns["capture_level"], "tokens"), True))
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


def call_records_from_rows(
    rows: Iterable[Mapping[str, Any]], *, include_discarded: bool = False, only_ok: bool = True
) -> list[dict[str, Any]]:
    """`call_records` over turns/ rows given as dicts with `prompt_ids` in full (as
    JSON gives them: a logprob the engine did not give is None, and trains nothing)."""
    table = pa.Table.from_pylist(list(rows), schema=_RECORD_COLUMNS)
    return call_records(table, include_discarded=include_discarded, only_ok=only_ok)


def rollout_samples(
    rollouts: pa.Table | Iterable[Mapping[str, Any]],
    sequences: pa.Table | Iterable[Mapping[str, Any]],
    *,
    filler_id: int = 0,
    turns: pa.Table | Iterable[Mapping[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One sample per row of `rollouts` (rollouts/ rows), in their order, from their
    agent sequences in `sequences` (sequences/ rows; others are ignored).

    A rollout with several agent sequences (a harness that rewrote its prompt) gives the
    one with the most trained ids (the first of equals). A rollout with none (it failed
    before a call was recorded) still gives its sample, so that a group keeps its size:
    `filler_id` as its one-id prompt and completion, nothing trained.

    A sequence's `policy_versions` come with it (an online group's) or from `turns`
    (turns/ rows of the same rollouts, as stored or with `prompt_ids`); else None.
    """
    rollout_rows = rollouts.to_pylist() if isinstance(rollouts, pa.Table) else rollouts
    sequence_rows = sequences.to_pylist() if isinstance(sequences, pa.Table) else sequences
    if turns is not None:
        turn_rows = _prompted(turns)
        sequence_rows = [
            {**s, "policy_versions": sequence_versions(s, turn_rows)} for s in sequence_rows
        ]
    chosen: dict[str, Mapping[str, Any]] = {}
    for sequence in sequence_rows:
        if sequence["role"] != Role.AGENT.value:
            continue
        best = chosen.get(sequence["rollout_id"])
        if best is None or sum(sequence["loss_mask"]) > sum(best["loss_mask"]):
            chosen[sequence["rollout_id"]] = sequence
    return [
        _sample(rollout, chosen.get(rollout["rollout_id"]), filler_id) for rollout in rollout_rows
    ]


def _sample(
    rollout: Mapping[str, Any], sequence: Mapping[str, Any] | None, filler_id: int
) -> dict[str, Any]:
    mask = [] if sequence is None else list(sequence["loss_mask"])
    first = next((i for i, m in enumerate(mask) if m), None)
    if sequence is None or first is None:
        ids, first, mask, logprobs = [filler_id, filler_id], 1, [0, 0], [0.0, 0.0]
        versions: list[int | None] = [None, None]
    else:
        ids, logprobs = list(sequence["input_ids"]), list(sequence["logprobs"])
        versions = list(sequence.get("policy_versions") or [None] * len(ids))
    reward = rollout["reward"]
    return {
        "prompt_ids": ids[:first],
        "completion_ids": ids[first:],
        "logprobs": [
            lp if m else None for lp, m in zip(logprobs[first:], mask[first:], strict=True)
        ],
        "env_mask": mask[first:],
        "policy_versions": versions[first:],
        "reward": reward,
        "trainable": _trainable(rollout) and reward is not None and any(mask),
        "rollout_id": rollout["rollout_id"],
        "task": rollout["task"],
        "policy_version_min": rollout["policy_version_min"],
        "policy_version_max": rollout["policy_version_max"],
    }


def _prompted(turns: pa.Table | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """turns/ rows as dicts with `prompt_ids` in full."""
    if not isinstance(turns, pa.Table):
        return [dict(row) for row in turns]
    if "prompt_ids" not in turns.column_names:
        turns = rebuild_prompts(turns)
    rows: list[dict[str, Any]] = turns.to_pylist()
    return rows


def _trainable(rollout: Mapping[str, Any]) -> bool:
    """The row's `trainable`; `ok` in rows written before schema version 5, when every
    ok row was (an evaluation's row is ok and not trainable)."""
    trainable = rollout.get("trainable")
    return bool(rollout["ok"] if trainable is None else trainable)


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
