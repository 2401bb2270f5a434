"""Rollouts as Arrow tables: one row in rollouts/, its sequences, its turns.

Two entry points, for the two places a rollout can be encoded:
  - `encode_turns` works from the capture's own numpy arrays (`TurnRecord`s and the
    `RolloutGraph` built from them). This is the hot path: the trial actor that owns the
    session holds exactly these, and encoding there ships compact Arrow buffers to the
    driver (prompts as deltas, no Python lists), so the driver only concatenates and
    writes. No Python loop runs over tokens: ids are sliced and concatenated by numpy and
    wrapped by Arrow without a copy where one array suffices.
  - `encode_rollout` takes a finished `RolloutResult`. Given the actor's `TokenTables` it
    only adds the rollouts/ row; without them it decodes the capture export document
    (Python lists, so much slower) and encodes that.

A turn's prompt is stored as the ids after its parent's prompt + sampled ids (the whole
prompt for a root or an unlinked turn), because the graph links turns by exactly that
prefix: the stored size is the rollout's unique tokens, not the sum of its prompts,
which grows with the square of the number of turns. `rebuild.rebuild_prompts` inverts it.

Everything here is pure: no Ray, no I/O, no clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from harbor_ray.capture.export import turns_from_export
from harbor_ray.capture.graph import RolloutGraph, build_graph
from harbor_ray.capture.turn import TurnRecord
from harbor_ray.data.schema import (
    COUNTS,
    IDS,
    LOGPROBS,
    MASK,
    ROLLOUTS,
    SCHEMA_VERSION,
    SEQUENCES,
    TURNS,
)
from harbor_ray.trials.result import RolloutResult

__all__ = ["EncodedRollout", "TokenTables", "encode_rollout", "encode_turns"]


@dataclass(frozen=True)
class TokenTables:
    """A rollout's turns/ and sequences/ rows, with the rollout's fields they repeat."""

    rollout_id: str
    task: str
    reward: float | None
    ok: bool
    turns: pa.Table
    sequences: pa.Table

    def rollout_fields(self) -> tuple[str, str, float | None, bool]:
        return (self.rollout_id, self.task, self.reward, self.ok)


@dataclass(frozen=True)
class EncodedRollout:
    """Everything one rollout adds to a dataset: one rollouts/ row and its token rows."""

    rollout_id: str
    rollout: pa.Table
    turns: pa.Table
    sequences: pa.Table

    @property
    def nbytes(self) -> int:
        return self.rollout.nbytes + self.turns.nbytes + self.sequences.nbytes


def encode_turns(
    turns: Sequence[TurnRecord],
    graph: RolloutGraph,
    *,
    rollout_id: str,
    task: str,
    reward: float | None,
    ok: bool,
) -> TokenTables:
    """Encode one session's turns and the training sequences of `graph` (built from them).

    `reward` and `ok` are the rollout's, repeated on every row so that a trainer reading
    sequences/ or turns/ alone needs no join.
    """
    ordered = sorted(turns, key=lambda t: t.index)
    return TokenTables(
        rollout_id=rollout_id,
        task=task,
        reward=reward,
        ok=ok,
        turns=_turns_table(ordered, graph, rollout_id, task, reward, ok),
        sequences=_sequences_table(graph, rollout_id, task, reward, ok),
    )


def encode_rollout(result: RolloutResult, tokens: TokenTables | None = None) -> EncodedRollout:
    """Encode a finished rollout; `tokens` are its turns as the trial actor encoded them.

    Without `tokens`, the turns come from `result.capture` (none when there is no
    capture: a failed rollout still gets its rollouts/ row). Raises ValueError when
    `tokens` repeat other fields (id, task, reward, ok) than `result` has.
    """
    if tokens is None:
        tokens = _tokens_from_capture(result)
    expected = (result.rollout_id, result.task, result.reward, result.ok)
    if tokens.rollout_fields() != expected:
        raise ValueError(f"token tables encoded for {tokens.rollout_fields()} given for {expected}")
    return EncodedRollout(
        rollout_id=result.rollout_id,
        rollout=_rollout_table(result),
        turns=tokens.turns,
        sequences=tokens.sequences,
    )


def _tokens_from_capture(result: RolloutResult) -> TokenTables:
    turns = [] if result.capture is None else turns_from_export(result.capture)
    return encode_turns(
        turns,
        build_graph(turns),
        rollout_id=result.rollout_id,
        task=result.task,
        reward=result.reward,
        ok=result.ok,
    )


def _turns_table(
    ordered: list[TurnRecord],
    graph: RolloutGraph,
    rollout_id: str,
    task: str,
    reward: float | None,
    ok: bool,
) -> pa.Table:
    by_index = {t.index: t for t in ordered}
    nodes = [graph.nodes[t.index] for t in ordered]
    n = len(ordered)
    columns: dict[str, Any] = {
        "rollout_id": [rollout_id] * n,
        "task": [task] * n,
        "index": [t.index for t in ordered],
        "parent": [node.parent for node in nodes],
        "root": [node.root for node in nodes],
        "role": [node.role.value for node in nodes],
        "auxiliary": [t.auxiliary for t in ordered],
        "dialect": [t.dialect for t in ordered],
        "finish_reason": [t.finish_reason for t in ordered],
        "request_model": [t.request_model for t in ordered],
        "started_at": [t.started_at for t in ordered],
        "ended_at": [t.ended_at for t in ordered],
        "prompt_delta": _list_array(
            [_prompt_delta(t, graph.nodes[t.index].parent, by_index) for t in ordered], IDS
        ),
        "token_ids": _list_array([t.token_ids for t in ordered], IDS),
        "logprobs": _list_array([t.logprobs for t in ordered], LOGPROBS),
        "reward": [reward] * n,
        "ok": [ok] * n,
        "request_messages": [t.request_messages_json.decode() for t in ordered],
        "response_message": [t.response_message_json.decode() for t in ordered],
    }
    return pa.Table.from_pydict(columns, schema=TURNS)


def _prompt_delta(
    turn: TurnRecord, parent: int | None, by_index: Mapping[int, TurnRecord]
) -> np.ndarray | None:
    """The prompt ids after the parent's prompt + sampled ids, which the graph linked on."""
    if turn.prompt_ids is None or parent is None:
        return turn.prompt_ids
    linked = by_index[parent]
    assert linked.prompt_ids is not None and linked.token_ids is not None
    return turn.prompt_ids[len(linked.prompt_ids) + len(linked.token_ids) :]


def _sequences_table(
    graph: RolloutGraph, rollout_id: str, task: str, reward: float | None, ok: bool
) -> pa.Table:
    sequences = graph.sequences
    n = len(sequences)
    columns: dict[str, Any] = {
        "rollout_id": [rollout_id] * n,
        "task": [task] * n,
        "sequence": list(range(n)),
        "root": [s.root for s in sequences],
        "leaf": [s.leaf for s in sequences],
        "role": [s.role.value for s in sequences],
        "turns": [list(s.turns) for s in sequences],
        "input_ids": _list_array([s.input_ids for s in sequences], IDS),
        "loss_mask": _list_array([s.loss_mask for s in sequences], MASK),
        "logprobs": _list_array([s.logprobs for s in sequences], LOGPROBS),
        "reward": [reward] * n,
        "ok": [ok] * n,
    }
    return pa.Table.from_pydict(columns, schema=SEQUENCES)


def _list_array(arrays: Sequence[np.ndarray | None], list_type: pa.ListType) -> pa.ListArray:
    """One Arrow list per array (None -> null) with a single copy of the values at most.

    A lone array is wrapped without copying: a rollout's one long training sequence is
    the largest buffer here.
    """
    lengths = np.fromiter((0 if a is None else len(a) for a in arrays), np.int64, len(arrays))
    offsets = np.zeros(len(arrays) + 1, np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > np.iinfo(np.int32).max:
        raise ValueError(f"{offsets[-1]} values exceed one Arrow list array's 32-bit offsets")
    present = [a for a in arrays if a is not None]
    dtype = list_type.value_type.to_pandas_dtype()
    if len(present) == 1:
        values = present[0].astype(dtype, copy=False)
    else:
        values = np.concatenate(present, dtype=dtype) if present else np.empty(0, dtype)
    mask = None if len(present) == len(arrays) else pa.array([a is None for a in arrays])
    return pa.ListArray.from_arrays(
        pa.array(offsets.astype(np.int32)), pa.array(values), type=list_type, mask=mask
    )


def _rollout_table(result: RolloutResult) -> pa.Table:
    row = {
        "rollout_id": result.rollout_id,
        "task": result.task,
        "attempt": result.attempt,
        "agent": result.agent,
        "sandbox": result.sandbox,
        "model": result.model,
        "ok": result.ok,
        "error_type": None if result.error_type is None else result.error_type.value,
        "error": result.error,
        "reward": result.reward,
        "reward_key": result.reward_key,
        "rewards": list(result.rewards.items()),
        "findings": [f.model_dump() for f in result.findings],
        "counts": _counts(result),
        "timings": list(result.timings.items()),
        "trial_dir": result.trial_dir,
        "schema_version": SCHEMA_VERSION,
    }
    return pa.Table.from_pylist([row], schema=ROLLOUTS)


def _counts(result: RolloutResult) -> dict[str, int | None]:
    """The capture's counts (None without a capture: unknown, not zero) and the call count."""
    captured = {} if result.capture is None else result.capture["counts"]
    counts = {name: captured.get(name) for name in COUNTS.names}
    counts["model_calls"] = result.model_calls
    return counts
