from __future__ import annotations

import dataclasses
import json
import math

import numpy as np
import pytest

from harbor_ray.capture.core.continuation import Continuation, Fallback
from harbor_ray.capture.core.export import EXPORT_VERSION, build_export, turns_from_export
from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.errors import SchemaMismatchError
from tests.capture.turns_factory import VOCAB, chain, follow, full, shuffled, turn

NAN = float("nan")


def session() -> list[TurnRecord]:
    """A fork with an abandoned retry, a missing logprob and an auxiliary call."""
    t0 = turn(0, [1, 2, 3], [10, 11], [-0.5, NAN])
    abandoned = follow(t0, 1, [4], [20])
    kept = follow(t0, 2, [4], [21, 22], finish_reason="length")
    onward = dataclasses.replace(
        follow(kept, 3, [5], [23]), continuation=Continuation(2, False, Fallback.NO_TOKENIZE)
    )
    aux = turn(4, [60, 61], [62], auxiliary=True)
    return [t0, abandoned, kept, onward, aux]


def through_json(doc: dict) -> dict:
    return json.loads(json.dumps(doc, allow_nan=False))


def test_document_shape_and_values() -> None:
    doc = build_export(session(), vocab_size=VOCAB, engine_errors=1, budget_stops=2)
    assert doc["schema_version"] == EXPORT_VERSION
    assert doc["trainable"] is True
    assert doc["counts"] == {
        "turns": 5,
        "roots": 2,
        "agent_roots": 1,
        "sequences": 3,
        "discarded": 1,
        "engine_errors": 1,
        "budget_stops": 2,
        "retried_calls": 0,
    }
    assert doc["turns"][0] == {
        "index": 0,
        "dialect": "chat",
        "parent": None,
        "root": 0,
        "role": "agent",
        "prompt_ids": [1, 2, 3],
        "token_ids": [10, 11],
        "logprobs": [-0.5, None],
        "logprobs_mode": None,  # the factory's turns were not made on a certified engine
        "capture_level": "tokens",
        "usage": {"prompt_tokens": 0, "completion_tokens": 0},
        "upstream_retries": 0,
        "sampling": {"temperature": None, "top_p": None, "top_k": None, "min_p": None},
        "finish_reason": "stop",
        "request_messages": [{"role": "user", "content": "call 0"}],
        "response_message": {"role": "assistant", "content": "reply 0"},
        "request_model": "test-model",
        "not_forwarded": [],
        "started_at": 0.0,
        "ended_at": 0.5,
        "auxiliary": False,
        "policy_version_start": None,  # the factory's turns record no version
        "policy_version_end": None,
        "policy_segments": None,
        "continuation": None,
    }
    assert [(t["index"], t["parent"], t["root"], t["role"]) for t in doc["turns"]] == [
        (0, None, 0, "agent"),
        (1, 0, 0, "discarded"),
        (2, 0, 0, "agent"),
        (3, 2, 0, "agent"),
        (4, None, 4, "auxiliary"),
    ]
    assert doc["sequences"][1] == {
        "root": 0,
        "leaf": 3,
        "turns": [0, 2, 3],
        "role": "agent",
        "input_ids": [1, 2, 3, 10, 11, 4, 21, 22, 5, 23],
        "loss_mask": [0, 0, 0, 1, 0, 0, 1, 1, 0, 1],
        "logprobs": [0, 0, 0, -0.5, 0, 0, -0.125, -0.25, 0, -0.125],
    }
    assert [(s["leaf"], s["role"], sum(s["loss_mask"])) for s in doc["sequences"]] == [
        (1, "discarded", 0),
        (3, "agent", 4),
        (4, "auxiliary", 1),
    ]
    assert [(f["code"], f["severity"], f["turn"]) for f in doc["findings"]] == [
        ("missing_logprobs", "warn", 0),
        ("truncated", "info", 2),
        ("stitch_fallback", "warn", 3),
        ("discarded_turns", "info", None),
        ("engine_errors", "warn", None),
        ("budget_exhausted", "info", None),
    ]
    assert doc["findings"][0]["message"] == (
        "turn 0: 1 of 2 sampled tokens have no logprob and are masked"
    )


def test_every_turn_carries_its_own_full_prompt() -> None:
    turns = chain(5)
    doc = build_export(turns)
    assert [t["prompt_ids"] for t in doc["turns"]] == [t.prompt_ids.tolist() for t in turns]
    assert doc["turns"][3]["prompt_ids"][: len(full(turns[2]))] == full(turns[2])


def test_document_is_strict_json() -> None:
    doc = build_export(session())
    assert through_json(doc) == doc


def test_turns_are_in_index_order_whatever_the_arrival() -> None:
    doc = build_export(session())
    assert build_export(shuffled(session(), 5)) == doc
    assert [t["index"] for t in doc["turns"]] == [0, 1, 2, 3, 4]


def assert_same_records(rebuilt: list[TurnRecord], original: list[TurnRecord]) -> None:
    for a, b in zip(rebuilt, sorted(original, key=lambda t: t.index), strict=True):
        for name in ("prompt_ids", "token_ids", "logprobs"):
            x, y = getattr(a, name), getattr(b, name)
            if y is None:
                assert x is None
            else:
                assert x.dtype == y.dtype
                assert np.array_equal(x, y, equal_nan=True)
        plain = [f.name for f in dataclasses.fields(TurnRecord)]
        plain = [n for n in plain if n not in ("prompt_ids", "token_ids", "logprobs")]
        assert {n: getattr(a, n) for n in plain} == {n: getattr(b, n) for n in plain}


def test_round_trip_rebuilds_the_records_exactly() -> None:
    turns = session()
    doc = through_json(build_export(turns))
    rebuilt = turns_from_export(doc)
    assert_same_records(rebuilt, turns)
    assert math.isnan(rebuilt[0].logprobs[1])
    assert build_export(rebuilt) == doc


def test_round_trip_keeps_what_the_engine_did_not_send() -> None:
    t0 = turn(0, [1, 2], [3])
    turns = [
        t0,
        dataclasses.replace(follow(t0, 1, [4], [5]), logprobs=None),
        turn(2, None, [6]),
        turn(3, [7], None),
        turn(4, [8], [], []),
    ]
    doc = through_json(build_export(turns))
    assert doc["trainable"] is False
    assert [(t["prompt_ids"], t["token_ids"], t["logprobs"]) for t in doc["turns"][1:]] == [
        ([1, 2, 3, 4], [5], None),
        (None, [6], [-0.125]),
        ([7], None, None),
        ([8], [], []),
    ]
    assert [t["root"] for t in doc["turns"]] == [0, 0, None, None, 4]
    rebuilt = turns_from_export(doc)
    assert_same_records(rebuilt, turns)
    assert build_export(rebuilt) == doc


def test_round_trip_with_counters_passed_again() -> None:
    doc = through_json(build_export(chain(2), engine_errors=4, budget_stops=1))
    counts = doc["counts"]
    again = build_export(
        turns_from_export(doc),
        engine_errors=counts["engine_errors"],
        budget_stops=counts["budget_stops"],
    )
    assert again == doc


def test_float32_logprobs_survive_json_bit_for_bit() -> None:
    values = np.array([-1e-7, -0.1, -3.3333333, -17.25], dtype=np.float32)
    t0 = turn(0, [1], [2, 3, 4, 5], values.tolist())
    (rebuilt,) = turns_from_export(through_json(build_export([t0])))
    assert rebuilt.logprobs.tobytes() == t0.logprobs.tobytes()


def test_zero_turns_exports_an_untrainable_document() -> None:
    doc = build_export([])
    assert doc["trainable"] is False
    assert doc["counts"] == {
        "turns": 0,
        "roots": 0,
        "agent_roots": 0,
        "sequences": 0,
        "discarded": 0,
        "engine_errors": 0,
        "budget_stops": 0,
        "retried_calls": 0,
    }
    assert (doc["turns"], doc["sequences"]) == ([], [])
    assert [f["code"] for f in doc["findings"]] == ["no_turns"]
    assert turns_from_export(doc) == []


def test_fatal_finding_clears_trainable() -> None:
    doc = build_export([turn(0, [1, VOCAB], [2])], vocab_size=VOCAB)
    assert doc["trainable"] is False
    assert [f["code"] for f in doc["findings"]] == ["invalid_token_id"]


def test_unknown_schema_version_is_refused() -> None:
    doc = build_export(chain(1))
    doc["schema_version"] = EXPORT_VERSION + 1
    with pytest.raises(SchemaMismatchError, match="schema_version"):
        turns_from_export(doc)
