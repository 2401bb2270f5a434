"""The JSON export document of one capture session: a view of its `ClosedCapture`.

The document is rendered on demand (the admin export route, `harbor-ray rollout`'s
results.jsonl) from the same closed record the dataset is encoded from; it is not what
travels between processes. One document holds everything needed to audit or retrain a
rollout: every turn with its own full prompt ids (a reader never has to rebuild a prompt
from a parent), the graph's verdict on each turn, the training sequences and the
findings. `turns_from_export`
inverts it exactly, so a stored document can be re-validated by a later version of the
graph code: `build_export(turns_from_export(doc)) == doc` for a document made with the
default counters.

Missing logprobs are NaN in memory and null in JSON (JSON has no NaN). The record
contract allows only NaN as a non-finite logprob; any other non-finite value would not
be valid JSON either and is written as null too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np
import orjson

from harbor_ray.capture.core.continuation import Continuation, Fallback
from harbor_ray.capture.core.findings import Finding
from harbor_ray.capture.core.graph import Node, TrainingSequence
from harbor_ray.capture.core.record import ClosedCapture, close_capture
from harbor_ray.capture.core.sampling import TurnSampling
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.errors import SchemaMismatchError

__all__ = ["EXPORT_VERSION", "build_export", "render_export", "turns_from_export"]

# Bump on any change a reader of an older document would misread.
# 2: each turn says whether its prompt was stitched (`continuation`).
# 3: each turn says which logprobs it has and what it was sampled with (`logprobs_mode`,
# `sampling`); a version-2 document reads as "not known" for both.
# 4: each turn says what it recorded and the engine's usage (`capture_level`, `usage`):
# below `tokens` its null ids are by design; a version-3 document reads as `tokens`.
EXPORT_VERSION = 4
_READABLE_VERSIONS = (2, 3, EXPORT_VERSION)


def build_export(
    turns: Sequence[TurnRecord],
    *,
    vocab_size: int | None = None,
    engine_errors: int = 0,
    budget_stops: int = 0,
) -> dict[str, Any]:
    """Link, validate and render one session's turns (`close_capture`, then the view)."""
    return render_export(
        close_capture(
            turns, vocab_size=vocab_size, engine_errors=engine_errors, budget_stops=budget_stops
        )
    )


def render_export(capture: ClosedCapture) -> dict[str, Any]:
    """The JSON-ready document of a closed session."""
    graph = capture.graph
    return {
        "schema_version": EXPORT_VERSION,
        "trainable": capture.trainable,
        "capture_level": capture.capture_level,
        "counts": dataclasses.asdict(capture.counts),
        "turns": [_turn_doc(turn, graph.nodes[turn.index]) for turn in capture.turns],
        "sequences": [_sequence_doc(s) for s in graph.sequences],
        "findings": [_finding_doc(f) for f in capture.findings],
    }


def turns_from_export(doc: dict[str, Any]) -> list[TurnRecord]:
    """Rebuild the turn records a document was made from, ids and NaNs included."""
    version = doc.get("schema_version")
    if version not in _READABLE_VERSIONS:
        raise SchemaMismatchError(
            f"export schema_version {version!r} is not one of the "
            f"supported {_READABLE_VERSIONS}: export it again with "
            "this version of harbor_ray"
        )
    return [
        TurnRecord(
            index=int(t["index"]),
            dialect=t["dialect"],
            prompt_ids=_ids_from_json(t["prompt_ids"]),
            token_ids=_ids_from_json(t["token_ids"]),
            logprobs=_logprobs_from_json(t["logprobs"]),
            # Both absent from exports written before the fields existed.
            logprobs_mode=t.get("logprobs_mode"),
            sampling=TurnSampling(**t.get("sampling") or {}),
            finish_reason=t["finish_reason"],
            request_messages_json=orjson.dumps(t["request_messages"]),
            response_message_json=orjson.dumps(t["response_message"]),
            request_model=t["request_model"],
            # Absent from exports written before the field existed.
            not_forwarded=tuple(t.get("not_forwarded", ())),
            started_at=t["started_at"],
            ended_at=t["ended_at"],
            auxiliary=t["auxiliary"],
            policy_version_start=t.get("policy_version_start"),
            policy_version_end=t.get("policy_version_end"),
            # Absent from exports written before the field existed.
            policy_segments=_segments_from_json(t.get("policy_segments")),
            continuation=_continuation_from_json(t["continuation"]),
            # Absent from exports written before version 4.
            capture_level=t.get("capture_level", "tokens"),
            prompt_tokens=(t.get("usage") or {}).get("prompt_tokens", 0),
            completion_tokens=(t.get("usage") or {}).get("completion_tokens", 0),
            # Absent from exports written before the field existed.
            upstream_retries=t.get("upstream_retries", 0),
        )
        for t in doc["turns"]
    ]


def _turn_doc(turn: TurnRecord, node: Node) -> dict[str, Any]:
    return {
        "index": turn.index,
        "dialect": turn.dialect,
        "parent": node.parent,
        "root": node.root,
        "role": node.role.value,
        "prompt_ids": _ids_to_json(turn.prompt_ids),
        "token_ids": _ids_to_json(turn.token_ids),
        "logprobs": _logprobs_to_json(turn.logprobs),
        "logprobs_mode": turn.logprobs_mode,
        "capture_level": turn.capture_level,
        "usage": {"prompt_tokens": turn.prompt_tokens, "completion_tokens": turn.completion_tokens},
        "upstream_retries": turn.upstream_retries,
        "sampling": dataclasses.asdict(turn.sampling),
        "finish_reason": turn.finish_reason,
        "request_messages": orjson.loads(turn.request_messages_json),
        "response_message": orjson.loads(turn.response_message_json),
        "request_model": turn.request_model,
        "not_forwarded": list(turn.not_forwarded),
        "started_at": turn.started_at,
        "ended_at": turn.ended_at,
        "auxiliary": turn.auxiliary,
        "policy_version_start": turn.policy_version_start,
        "policy_version_end": turn.policy_version_end,
        "policy_segments": (
            None
            if turn.policy_segments is None
            else [list(segment) for segment in turn.policy_segments]
        ),
        "continuation": _continuation_to_json(turn.continuation),
    }


def _segments_from_json(doc: list[list[int]] | None) -> tuple[tuple[int, int], ...] | None:
    return None if doc is None else tuple((int(v), int(o)) for v, o in doc)


def _continuation_to_json(continuation: Continuation | None) -> dict[str, Any] | None:
    if continuation is None:
        return None
    fallback = continuation.fallback
    return {
        "turn": continuation.turn,
        "stitched": continuation.stitched,
        "fallback": None if fallback is None else fallback.value,
    }


def _continuation_from_json(doc: dict[str, Any] | None) -> Continuation | None:
    if doc is None:
        return None
    fallback = doc["fallback"]
    return Continuation(
        int(doc["turn"]), bool(doc["stitched"]), None if fallback is None else Fallback(fallback)
    )


def _sequence_doc(sequence: TrainingSequence) -> dict[str, Any]:
    return {
        "root": sequence.root,
        "leaf": sequence.leaf,
        "turns": list(sequence.turns),
        "role": sequence.role.value,
        "input_ids": sequence.input_ids.tolist(),
        "loss_mask": sequence.loss_mask.tolist(),
        "logprobs": sequence.logprobs.tolist(),
    }


def _finding_doc(finding: Finding) -> dict[str, Any]:
    return {
        "code": finding.code.value,
        "severity": finding.severity.value,
        "message": finding.message,
        "turn": finding.turn,
    }


def _ids_to_json(ids: np.ndarray | None) -> list[int] | None:
    return None if ids is None else ids.tolist()


def _ids_from_json(ids: list[int] | None) -> np.ndarray | None:
    return None if ids is None else np.asarray(ids, dtype=np.int32)


def _logprobs_to_json(logprobs: np.ndarray | None) -> list[float | None] | None:
    if logprobs is None:
        return None
    values: list[float | None] = logprobs.tolist()
    # Only the missing entries are touched; a reply has thousands of tokens.
    for position in np.flatnonzero(~np.isfinite(logprobs)).tolist():
        values[position] = None
    return values


def _logprobs_from_json(values: list[float | None] | None) -> np.ndarray | None:
    if values is None:
        return None
    # numpy reads None as NaN in a float array; float32 values survive the float64 trip.
    return np.array(values, dtype=np.float64).astype(np.float32)
