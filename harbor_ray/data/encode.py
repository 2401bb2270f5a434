"""A finished rollout as Arrow tables: its rollouts/ row, its sequences, its turns.

`encode_record` runs where the rollout's capture session ended, from the
`ClosedCapture` its owner built; the `RolloutRecord` it makes is what travels to the
writer (zstd-compressed Arrow IPC between processes). A turn's prompt is stored as the
delta from its parent's prompt + sampled ids (`rebuild.rebuild_prompts` inverts it).
Pure: no Ray, no I/O, no clock. Why: docs/data.md, "How a record is encoded".
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa

from harbor_ray.capture.core.graph import RolloutGraph, build_graph
from harbor_ray.capture.core.policy_segments import expand
from harbor_ray.capture.core.record import ClosedCapture
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.data.result import FindingRecord, Provenance, RolloutResult
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

__all__ = [
    "RolloutRecord",
    "encode_record",
    "preload_encoder_imports",
    "rollouts_table",
    "with_findings",
    "with_placement",
    "with_provenance",
]

# zstd at its fastest level: as small as the Parquet parts, and the fastest to make.
_WIRE_CODEC = pa.Codec("zstd", 1)
# Given, so that Arrow does not read its defaults from the environment for every stream.
_IPC_OPTIONS = pa.ipc.IpcWriteOptions()
_INT32_MAX = np.iinfo(np.int32).max
Versions = tuple[int | None, int | None]
_NO_GRAPH = build_graph(())  # a rollout without a capture has no turns to link
_CAPTURE_COUNTS = tuple(name for name in COUNTS.names if name != "model_calls")


@dataclass(frozen=True, eq=False)
class RolloutRecord:
    """Everything one finished rollout adds to a dataset, and the row it is made of.

    `result` is the row's typed form (what progress and summaries read); `turns` and
    `sequences` are its rows of those tables, in their schemas; `rollout` its rollouts/
    row, made from `result` and `versions` (its turns' oldest and newest policy
    versions) when first read.
    """

    result: RolloutResult
    turns: pa.Table
    sequences: pa.Table
    versions: Versions = (None, None)

    @property
    def rollout_id(self) -> str:
        return self.result.rollout_id

    @functools.cached_property
    def rollout(self) -> pa.Table:
        return rollouts_table([self])

    @property
    def nbytes(self) -> int:
        """The memory its token tables hold (the row's is small)."""
        return int(self.turns.get_total_buffer_size() + self.sequences.get_total_buffer_size())

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        return (
            _from_wire,
            (self.result, self.versions, _to_wire(self.turns), _to_wire(self.sequences)),
        )


def encode_record(result: RolloutResult, capture: ClosedCapture | None) -> RolloutRecord:
    """Encode a finished rollout and the capture it was judged on (None: it has no
    capture, and only a rollouts/ row).

    `result`'s reward and ok are repeated on every token row, so that a trainer reading
    sequences/ or turns/ alone needs no join.
    """
    turns, graph = (capture.turns, capture.graph) if capture else ((), _NO_GRAPH)
    fields = (result.rollout_id, result.task, result.reward, result.ok)
    return RolloutRecord(
        result=result,
        turns=_turns_table(turns, graph, *fields),
        sequences=_sequences_table(graph, {t.index: t for t in turns}, *fields),
        versions=_version_span(turns),
    )


def rollouts_table(records: Sequence[RolloutRecord]) -> pa.Table:
    """The rollouts/ rows of `records`, in one table."""
    return pa.Table.from_pylist(
        [_rollout_row(r.result, r.versions) for r in records], schema=ROLLOUTS
    )


def preload_encoder_imports() -> None:
    """Pay this process's one-off cost of encoding now: Arrow imports pandas on its first
    conversion of Python values (a slow import), which would otherwise stall the
    event loop of a host's first finished rollout, and every rollout waiting on it."""
    rollouts_table(
        [
            encode_record(
                RolloutResult(rollout_id="", task="", agent="", sandbox="", ok=False, reward=None),
                None,
            )
        ]
    )


def with_findings(record: RolloutRecord, findings: Sequence[FindingRecord]) -> RolloutRecord:
    """`record` with `findings` added to its row (token rows carry no findings), e.g. the
    driver's count of retries."""
    return _with_row(record, findings=[*record.result.findings, *findings])


def with_placement(record: RolloutRecord, *, node: str | None, host: str | None) -> RolloutRecord:
    """`record` with where it ran (its node's address and its host's name) in its row."""
    return _with_row(record, node=node, host=host)


def with_provenance(record: RolloutRecord, provenance: Provenance | None) -> RolloutRecord:
    """`record` with `provenance` in its row (what it was made with)."""
    return _with_row(record, provenance=provenance)


def _with_row(record: RolloutRecord, **update: Any) -> RolloutRecord:
    """`record` whose row (only: token rows carry none of it) has `update` applied."""
    return dataclasses.replace(record, result=record.result.model_copy(update=update))


def _to_wire(table: pa.Table) -> tuple[pa.Buffer, int]:
    """`table` as an IPC stream compressed as one block, and the stream's size."""
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, table.schema, options=_IPC_OPTIONS) as stream:
        stream.write_table(table)
    raw = sink.getvalue()
    return _WIRE_CODEC.compress(raw), raw.size


def _from_wire(
    result: RolloutResult, versions: Versions, *tables: tuple[pa.Buffer, int]
) -> RolloutRecord:
    turns, sequences = (
        pa.ipc.open_stream(_WIRE_CODEC.decompress(data, decompressed_size=size)).read_all()
        for data, size in tables
    )
    return RolloutRecord(result, turns, sequences, versions)


def _turns_table(
    ordered: Sequence[TurnRecord],
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
        "policy_version_start": [t.policy_version_start for t in ordered],
        "policy_version_end": [t.policy_version_end for t in ordered],
        "policy_segments": [_segments(t) for t in ordered],
        "prompt_delta": _list_array(
            [
                _prompt_delta(t, node.parent, by_index)
                for t, node in zip(ordered, nodes, strict=True)
            ],
            IDS,
        ),
        "token_ids": _list_array([t.token_ids for t in ordered], IDS),
        "logprobs": _list_array([t.logprobs for t in ordered], LOGPROBS),
        "logprobs_mode": [t.logprobs_mode for t in ordered],
        "sampling": [vars(t.sampling) for t in ordered],
        "continues": [c.turn if (c := t.continuation) else None for t in ordered],
        "stitched": [c.stitched if (c := t.continuation) else None for t in ordered],
        "stitch_fallback": [
            c.fallback.value if (c := t.continuation) and c.fallback else None for t in ordered
        ],
        "capture_level": [t.capture_level for t in ordered],
        "prompt_tokens": [t.prompt_tokens for t in ordered],
        "completion_tokens": [t.completion_tokens for t in ordered],
        "upstream_retries": [t.upstream_retries for t in ordered],
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


def _segments(turn: TurnRecord) -> list[dict[str, int]] | None:
    """A turn's segments in full, as turns/ stores them."""
    segments = expand(turn.policy_segments, turn.policy_version_start)
    return None if segments is None else [{"version": v, "offset": o} for v, o in segments]


def _version_span(turns: Sequence[TurnRecord]) -> Versions:
    """The oldest version a call was forwarded at, the newest a reply arrived at."""
    starts = [t.policy_version_start for t in turns if t.policy_version_start is not None]
    ends = [t.policy_version_end for t in turns if t.policy_version_end is not None]
    return (min(starts) if starts else None, max(ends) if ends else None)


def _sequences_table(
    graph: RolloutGraph,
    by_index: Mapping[int, TurnRecord],
    rollout_id: str,
    task: str,
    reward: float | None,
    ok: bool,
) -> pa.Table:
    sequences = graph.sequences
    n = len(sequences)
    spans = [_version_span([by_index[i] for i in s.turns]) for s in sequences]
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
        "policy_version_min": [low for low, _ in spans],
        "policy_version_max": [high for _, high in spans],
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
    if offsets[-1] > _INT32_MAX:
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


def _rollout_row(result: RolloutResult, versions: Versions = (None, None)) -> dict[str, Any]:
    return {
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
        "node": result.node,
        "host": result.host,
        "policy_version_min": versions[0],
        "policy_version_max": versions[1],
        "capture_level": result.capture_level,
        "trainable": result.trainable,
        "partial": result.partial,
        "environment": None if result.environment is None else result.environment.value,
        "image_digest": result.image_digest,
        "provenance": None if result.provenance is None else result.provenance.model_dump(),
        "schema_version": SCHEMA_VERSION,
    }


def _counts(result: RolloutResult) -> dict[str, int | None]:
    """The capture's counts (None without a capture: unknown, not zero) and the call count."""
    # Attribute reads, not `dataclasses.asdict` (a recursive deep copy): the sweep
    # driver makes every row of a commit.
    captured = result.counts
    counts: dict[str, int | None] = (
        dict.fromkeys(_CAPTURE_COUNTS)
        if captured is None
        else {name: getattr(captured, name) for name in _CAPTURE_COUNTS}
    )
    counts["model_calls"] = result.model_calls
    return counts
