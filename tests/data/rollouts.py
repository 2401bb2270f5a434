"""Realistic rollouts for the dataset tests, and exact comparisons of what comes back.

`rich_session` holds every shape the rollout graph knows, so a round trip that keeps it
intact keeps anything the capture can produce.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import orjson
import pyarrow as pa

from harbor_ray.capture.core.graph import RolloutGraph
from harbor_ray.capture.core.record import close_capture
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.data.encode import RolloutRecord, encode_record
from harbor_ray.data.result import ErrorType, FindingRecord, RanIn, RolloutResult
from tests.capture.turns_factory import chain, follow, turn

NAN = float("nan")

# The sequences/ columns that come from the graph (the rest repeat the rollout's fields).
SEQUENCE_FIELDS = [
    *("sequence", "root", "leaf", "role", "turns"),
    *("input_ids", "loss_mask", "logprobs"),
]


def rich_session() -> list[TurnRecord]:
    """A fork, an abandoned retry, a re-tokenised split root, NaN logprobs, an auxiliary
    root, and a parent whose index is above its child's (it arrived late), shuffled."""
    t0 = turn(0, [1, 2, 3], [10, 11], [-0.5, NAN])
    retry = follow(t0, 1, [4], [20])  # same prompt as turn 2, never continued: discarded
    kept = follow(t0, 2, [4], [21, 22], finish_reason="length")
    onward = follow(kept, 3, [5], [23, 24], [NAN, -0.75])
    fork = follow(kept, 4, [6, 7], [25])  # a second continuation of turn 2
    split = turn(5, [1, 2, 3, 12, 4], [26])  # turn 0's reply re-tokenised as [12]: new root
    aux = turn(6, [60, 61], [62], auxiliary=True)
    late = turn(8, [70, 71], [72])
    early = follow(late, 7, [73], [74])
    # Messages as agents send them: nested, non-ASCII, tool calls.
    onward = dataclasses.replace(
        onward,
        request_messages_json=orjson.dumps(
            [
                {"role": "system", "content": "Du bist ein Agent. ✓"},
                {"role": "tool", "tool_call_id": "c1", "content": '{"ok": true}'},
            ]
        ),
        response_message_json=orjson.dumps(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"id": "c2", "function": {"name": "ls", "arguments": "{}"}}],
            }
        ),
    )
    return [onward, t0, retry, kept, fork, split, aux, early, late]


def broken_session() -> list[TurnRecord]:
    """A chain plus a call the engine answered without ids: FATAL, so not ok."""
    return [*chain(3), turn(3, None, None)]


def rollout(rollout_id: str, turns: list[TurnRecord] | None, **fields: Any) -> RolloutRecord:
    """A finished rollout's record with `turns` captured (None: no capture), reward 1.0.

    `ok` follows the capture's verdict and the reward unless given; `capture_level` the
    turns'.
    """
    capture = None if turns is None else close_capture(turns, engine_errors=1)
    reward = fields.get("reward", 1.0)
    values: dict[str, Any] = {
        "rollout_id": rollout_id,
        "task": f"task-{rollout_id[0]}",
        "attempt": 1,
        "agent": "terminus-2",
        "sandbox": "bwrap",
        "model": "test-model",
        "ok": capture is not None and capture.valid and reward is not None,
        "reward": reward,
        "reward_key": None if reward is None else "reward",
        "rewards": {} if reward is None else {"reward": reward, "length": 3.0},
        "findings": [] if capture is None else [FindingRecord.of(f) for f in capture.findings],
        "counts": None if capture is None else capture.counts,
        "capture_level": None if capture is None else capture.capture_level,
        "model_calls": 0 if turns is None else len(turns),
        "timings": {"agent_execution": 9.5, "total": 12.25},
        "trial_dir": f"/trials/{rollout_id}",
        "environment": RanIn.IMAGE,
        "image_digest": "sha256:" + "ab" * 32,
    }
    return encode_record(RolloutResult(**{**values, **fields}), capture)


def encode(
    turns: list[TurnRecord],
    *,
    rollout_id: str = "r",
    task: str = "t",
    reward: float | None = 1.0,
    ok: bool = True,
) -> RolloutRecord:
    """The record of a rollout that captured `turns`, with the fields its token rows repeat."""
    result = RolloutResult(
        rollout_id=rollout_id, task=task, agent="a", sandbox="s", ok=ok, reward=reward
    )
    return encode_record(result, close_capture(turns))


def dead_rollout(rollout_id: str) -> RolloutRecord:
    """A rollout whose sandbox never started: no capture, no reward."""
    return rollout(
        rollout_id,
        None,
        reward=None,
        error_type=ErrorType.SANDBOX_START,
        error="EnvironmentStartTimeoutError: took too long",
    )


def assert_same_turns(got: list[TurnRecord], want: list[TurnRecord]) -> None:
    """Equal field by field; ids with their dtype, logprobs bit for bit (NaN included)."""
    got = sorted(got, key=lambda t: t.index)
    want = sorted(want, key=lambda t: t.index)
    assert [t.index for t in got] == [t.index for t in want]
    for g, w in zip(got, want, strict=True):
        for name in ("prompt_ids", "token_ids"):
            assert_same_array(getattr(g, name), getattr(w, name))
        assert_same_array(g.logprobs, w.logprobs)
        for field in dataclasses.fields(TurnRecord):
            if field.name not in ("prompt_ids", "token_ids", "logprobs"):
                assert getattr(g, field.name) == getattr(w, field.name), (w.index, field.name)


def assert_same_array(got: np.ndarray | None, want: np.ndarray | None) -> None:
    if want is None:
        assert got is None
        return
    assert got is not None
    assert got.dtype == want.dtype
    # Bitwise: NaN == NaN here, and -0.0 != 0.0.
    assert got.tobytes() == want.tobytes()


def assert_same_table(got: pa.Table, want: pa.Table) -> None:
    """Equal tables, float lists compared bit for bit (Arrow's equality fails on NaN)."""
    assert got.schema.equals(want.schema, check_metadata=True)
    for name in got.column_names:
        g, w = got[name].combine_chunks(), want[name].combine_chunks()
        if pa.types.is_list(g.type) and pa.types.is_floating(g.type.value_type):
            assert g.is_null().equals(w.is_null())
            assert g.value_lengths().equals(w.value_lengths())
            assert_same_array(g.flatten().to_numpy(), w.flatten().to_numpy())
        else:
            assert g.equals(w), name


def sequence_rows(graph: RolloutGraph) -> list[dict[str, Any]]:
    """The graph's sequences as sequences/ rows hold them (minus the rollout's fields)."""
    return [
        {
            "sequence": k,
            "root": s.root,
            "leaf": s.leaf,
            "role": s.role.value,
            "turns": list(s.turns),
            "input_ids": s.input_ids.tolist(),
            "loss_mask": s.loss_mask.tolist(),
            "logprobs": s.logprobs.tolist(),
        }
        for k, s in enumerate(graph.sequences)
    ]


def evaluated(turns: list[TurnRecord]) -> list[TurnRecord]:
    """`turns` as a `--capture text` proxy records them: no ids, no logprobs, the
    engine's usage counts."""
    return [
        dataclasses.replace(
            t,
            prompt_ids=None,
            token_ids=None,
            logprobs=None,
            capture_level="text",
            prompt_tokens=7,
            completion_tokens=3,
        )
        for t in turns
    ]
