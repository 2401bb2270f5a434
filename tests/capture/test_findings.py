from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harbor_ray.capture.core.findings import (
    POSITIVE_LOGPROB_TOLERANCE,
    Code,
    Finding,
    Severity,
    is_trainable,
    validate,
)
from harbor_ray.capture.core.graph import RolloutGraph, build_graph
from harbor_ray.capture.core.sampling import TurnSampling
from harbor_ray.capture.core.turn import TurnRecord
from tests.capture.turns_factory import VOCAB, chain, follow, turn

NAN = float("nan")


def check(turns: list[TurnRecord], **kwargs: int) -> tuple[Finding, ...]:
    return validate(turns, build_graph(turns), **kwargs)


def only(findings: tuple[Finding, ...], code: Code) -> Finding:
    (found,) = [f for f in findings if f.code is code]
    return found


def codes(findings: tuple[Finding, ...]) -> list[Code]:
    return [f.code for f in findings]


def with_last(turns: list[TurnRecord], **changes: object) -> list[TurnRecord]:
    """The session with its last turn's fields replaced."""
    return [*turns[:-1], dataclasses.replace(turns[-1], **changes)]


def with_sequence(graph: RolloutGraph, **changes: object) -> RolloutGraph:
    """The graph with its only sequence tampered with, as a bug in linking would."""
    (sequence,) = graph.sequences
    return dataclasses.replace(graph, sequences=(dataclasses.replace(sequence, **changes),))


def test_clean_session_has_no_findings() -> None:
    findings = check(chain(4), vocab_size=VOCAB)
    assert findings == ()
    assert is_trainable(findings)


def test_code_values_are_stable() -> None:
    # Written to datasets and filtered on by trainers: renaming one breaks readers.
    assert {c.name: c.value for c in Code} == {
        "NO_TURNS": "no_turns",
        "MISSING_PROMPT_IDS": "missing_prompt_ids",
        "MISSING_TOKEN_IDS": "missing_token_ids",
        "INVALID_TOKEN_ID": "invalid_token_id",
        "MISSING_LOGPROBS": "missing_logprobs",
        "LOGPROB_MISALIGNED": "logprob_misaligned",
        "POSITIVE_LOGPROB": "positive_logprob",
        "NOTHING_TRAINABLE": "nothing_trainable",
        "LENGTH_MISMATCH": "length_mismatch",
        "MULTIPLE_ROOTS": "multiple_roots",
        "DISCARDED_TURNS": "discarded_turns",
        "RETOKENIZATION_SPLIT": "retokenization_split",
        "STITCH_FALLBACK": "stitch_fallback",
        "EMPTY_COMPLETION": "empty_completion",
        "TRUNCATED": "truncated",
        "ENGINE_ERRORS": "engine_errors",
        "BUDGET_EXHAUSTED": "budget_exhausted",
        "NOT_FORWARDED": "not_forwarded",
        "RAW_LOGPROBS_SAMPLED_OTHERWISE": "raw_logprobs_sampled_otherwise",
        "EVALUATION_ONLY": "evaluation_only",
    }
    assert [s.value for s in Severity] == ["fatal", "warn", "info"]


def test_is_trainable_means_no_fatal() -> None:
    warn = Finding(Code.EMPTY_COMPLETION, Severity.WARN, "w", 0)
    info = Finding(Code.TRUNCATED, Severity.INFO, "i", 0)
    fatal = Finding(Code.MISSING_LOGPROBS, Severity.FATAL, "f", 0)
    assert is_trainable(())
    assert is_trainable((warn, info))
    assert not is_trainable((warn, fatal, info))


def test_zero_turns_is_not_trainable() -> None:
    findings = check([])
    assert codes(findings) == [Code.NO_TURNS]
    assert findings[0].severity is Severity.FATAL
    assert not is_trainable(findings)


# --- per turn -----------------------------------------------------------------------


def test_missing_prompt_ids() -> None:
    findings = check(with_last(chain(3), prompt_ids=None))
    f = only(findings, Code.MISSING_PROMPT_IDS)
    assert (f.severity, f.turn, f.message) == (
        Severity.FATAL,
        2,
        "turn 2: the engine sent no prompt ids",
    )
    assert not is_trainable(findings)


def test_missing_token_ids() -> None:
    findings = check(with_last(chain(3), token_ids=None, logprobs=None))
    f = only(findings, Code.MISSING_TOKEN_IDS)
    assert (f.severity, f.turn) == (Severity.FATAL, 2)
    assert not is_trainable(findings)


def test_negative_sampled_id_is_invalid() -> None:
    # The parser marks ids that were not integers as -1.
    turns = with_last(chain(2), token_ids=np.array([12, -1, 14, -1], dtype=np.int32))
    turns = with_last(turns, logprobs=np.full(4, -0.5, dtype=np.float32))
    f = only(check(turns), Code.INVALID_TOKEN_ID)
    assert (f.severity, f.turn) == (Severity.FATAL, 1)
    assert f.message == "turn 1: 2 of 4 sampled ids are outside [0, inf) (first: -1 at position 1)"


def test_prompt_id_beyond_the_vocabulary_is_invalid_only_when_the_size_is_known() -> None:
    t0 = turn(0, [1, VOCAB, 3], [4])
    assert check([t0]) == ()
    f = only(check([t0], vocab_size=VOCAB), Code.INVALID_TOKEN_ID)
    assert f.message == (
        f"turn 0: 1 of 3 prompt ids are outside [0, {VOCAB}) (first: {VOCAB} at position 1)"
    )
    assert check([t0], vocab_size=VOCAB + 1) == ()


def test_absent_logprobs_are_fatal() -> None:
    f = only(check(with_last(chain(2), logprobs=None)), Code.MISSING_LOGPROBS)
    assert (f.severity, f.turn) == (Severity.FATAL, 1)


def test_some_missing_logprobs_warn_and_name_the_numbers() -> None:
    t0 = turn(0, [1, 2], [3, 4, 5, 6], [-0.5, NAN, -0.5, NAN])
    findings = check([t0])
    f = only(findings, Code.MISSING_LOGPROBS)
    assert (f.severity, f.turn) == (Severity.WARN, 0)
    assert f.message == "turn 0: 2 of 4 sampled tokens have no logprob and are masked"
    assert is_trainable(findings)


def test_all_logprob_entries_missing_is_fatal() -> None:
    f = only(check([turn(0, [1, 2], [3, 4], [NAN, NAN])]), Code.MISSING_LOGPROBS)
    assert f.severity is Severity.FATAL
    assert f.message == "turn 0: none of 2 sampled tokens has a logprob"


@pytest.mark.parametrize("logprobs", [[-0.5], [-0.5, -0.5, -0.5]], ids=["short", "long"])
def test_misaligned_logprobs(logprobs: list[float]) -> None:
    findings = check([turn(0, [1, 2], [3, 4], logprobs)])
    f = only(findings, Code.LOGPROB_MISALIGNED)
    assert (f.severity, f.turn) == (Severity.FATAL, 0)
    assert f.message == f"turn 0: {len(logprobs)} logprobs for 2 sampled tokens"


def test_positive_logprob() -> None:
    findings = check([turn(0, [1, 2], [3, 4, 5], [-0.5, 0.5, 0.25])])
    f = only(findings, Code.POSITIVE_LOGPROB)
    assert (f.severity, f.turn) == (Severity.FATAL, 0)
    assert f.message == "turn 0: 2 of 3 logprobs are positive (first: 0.5 at position 1)"


def test_zero_and_float_noise_are_valid_logprobs() -> None:
    noise = np.float32(POSITIVE_LOGPROB_TOLERANCE / 2)
    assert check([turn(0, [1, 2], [3, 4], [0.0, float(noise)])]) == ()


@pytest.mark.parametrize(
    ("mode", "temperature", "warned"),
    [
        ("raw", 0.7, True),
        ("raw", 1.0, False),
        ("raw", None, False),  # the engine's default: no temperature was asked for
        ("processed", 0.7, False),
        (None, 0.7, False),  # an engine not certified here: nothing to compare with
    ],
)
def test_raw_logprobs_sampled_at_another_temperature_warn(
    mode: str | None, temperature: float | None, warned: bool
) -> None:
    findings = check(
        with_last(chain(2), logprobs_mode=mode, sampling=TurnSampling(temperature=temperature))
    )
    raw = [f for f in findings if f.code is Code.RAW_LOGPROBS_SAMPLED_OTHERWISE]
    assert [(f.severity, f.turn) for f in raw] == ([(Severity.WARN, 1)] if warned else [])
    assert is_trainable(findings)


def test_empty_completion() -> None:
    t0, t1 = chain(2)
    findings = check([t0, t1, follow(t1, 2, [5], [], [])])
    f = only(findings, Code.EMPTY_COMPLETION)
    assert (f.severity, f.turn) == (Severity.WARN, 2)
    assert is_trainable(findings)


def test_truncated_reply() -> None:
    t0 = turn(0, [1, 2], [3])
    findings = check([t0, follow(t0, 1, [4], [5, 6], finish_reason="length")])
    f = only(findings, Code.TRUNCATED)
    assert (f.severity, f.turn) == (Severity.INFO, 1)


# --- the graph -----------------------------------------------------------------------


def test_nothing_trainable_without_an_agent_sequence() -> None:
    aux = turn(0, [1, 2], [3], auxiliary=True)
    findings = check([aux])
    f = only(findings, Code.NOTHING_TRAINABLE)
    assert f.severity is Severity.FATAL
    assert f.message == "no agent sequence has a trainable token (1 sequence(s), 0 agent root(s))"
    assert not is_trainable(findings)


def test_nothing_trainable_when_no_agent_token_was_sampled() -> None:
    # An empty reply alone only warns, and an auxiliary call's tokens do not count.
    empty = turn(0, [1, 2], [], [])
    aux = turn(1, [7, 8], [9], auxiliary=True)
    findings = check([empty, aux])
    assert codes(findings) == [Code.EMPTY_COMPLETION, Code.NOTHING_TRAINABLE]


def test_a_discarded_sequence_does_not_count_as_trainable() -> None:
    # The only trainable token sits in an abandoned attempt; the kept one sampled nothing.
    findings = check([turn(0, [1, 2], [3]), turn(1, [1, 2], [], [])])
    assert Code.NOTHING_TRAINABLE in codes(findings)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            lambda s: {"loss_mask": s.loss_mask[:-1]},
            "input_ids has 7 entries, loss_mask 6, logprobs 7",
        ),
        (
            lambda s: {"logprobs": np.append(s.logprobs, np.float32(0))},
            "input_ids has 7 entries, loss_mask 7, logprobs 8",
        ),
        (
            lambda s: {"input_ids": np.append(s.input_ids[:1] + 1, s.input_ids[1:])},
            "turn 0's prompt and sampled ids are not a prefix at [0, 3)",
        ),
        (
            lambda s: {"input_ids": np.append(s.input_ids, np.int32(9))},
            "input_ids has 8 entries, loss_mask 7, logprobs 7",
        ),
        (
            lambda s: {"loss_mask": np.roll(s.loss_mask, -1), "logprobs": np.roll(s.logprobs, -1)},
            "turn 1's logprobs are not at its sampled positions [5, 7)",
        ),
        (
            lambda s: {"logprobs": np.where(s.loss_mask == 1, np.float32(-9), s.logprobs)},
            "turn 0's logprobs are not at its sampled positions [2, 3)",
        ),
        (
            lambda s: {"logprobs": np.where(s.loss_mask == 1, s.logprobs, np.float32(-1))},
            "4 masked-out position(s) carry a nonzero logprob",
        ),
        (
            lambda s: {"loss_mask": s.loss_mask | np.uint8(1)},
            "4 masked-in position(s) hold no sampled token",
        ),
        (
            lambda s: {
                "input_ids": np.append(s.input_ids, np.int32(9)),
                "loss_mask": np.append(s.loss_mask, np.uint8(0)),
                "logprobs": np.append(s.logprobs, np.float32(0)),
            },
            "the leaf's sampled ids end at 7, the sequence at 8",
        ),
    ],
    ids=[
        "short mask",
        "long logprobs",
        "wrong prefix",
        "extra id",
        "shifted",
        "wrong values",
        "stray logprobs",
        "mask on prompt",
        "trailing ids",
    ],
)
def test_length_mismatch_catches_a_broken_sequence(change, problem: str) -> None:
    t0 = turn(0, [1, 2], [3])
    turns = [t0, follow(t0, 1, [4, 5], [6, 7])]
    graph = build_graph(turns)
    assert validate(turns, graph) == ()
    (sequence,) = graph.sequences
    f = only(validate(turns, with_sequence(graph, **change(sequence))), Code.LENGTH_MISMATCH)
    assert (f.severity, f.turn) == (Severity.FATAL, 1)
    assert f.message == f"sequence to leaf 1: {problem}"


def test_length_mismatch_catches_a_short_sequence() -> None:
    t0 = turn(0, [1, 2], [3, 4])
    graph = build_graph([t0])
    (sequence,) = graph.sequences
    tampered = with_sequence(
        graph,
        input_ids=sequence.input_ids[:3],
        loss_mask=sequence.loss_mask[:3],
        logprobs=sequence.logprobs[:3],
    )
    f = only(validate([t0], tampered), Code.LENGTH_MISMATCH)
    assert (
        f.message
        == "sequence to leaf 0: turn 0's prompt and sampled ids are not a prefix at [0, 4)"
    )


def test_multiple_agent_roots_are_reported() -> None:
    findings = check([*chain(2), *chain(1, system=(7, 8), first_index=2)])
    f = only(findings, Code.MULTIPLE_ROOTS)
    assert f.severity is Severity.INFO
    assert f.message == "2 agent roots (turns 0, 2); all are trained on"
    assert is_trainable(findings)


def test_an_auxiliary_root_is_not_a_second_agent_root() -> None:
    findings = check([*chain(2), turn(2, [7, 8], [9], auxiliary=True)])
    assert Code.MULTIPLE_ROOTS not in codes(findings)


def test_discarded_turns_are_counted() -> None:
    t0 = turn(0, [1, 2], [3])
    attempts = [follow(t0, k, [4], [10 + k]) for k in (1, 2, 3)]
    f = only(check([t0, *attempts]), Code.DISCARDED_TURNS)
    assert f.severity is Severity.INFO
    assert f.message == "2 abandoned retries masked out (turns 1, 2)"


def test_retokenization_split_names_both_turns() -> None:
    t0 = turn(0, [1, 2, 3], [10, 11])
    t1 = turn(1, [1, 2, 3, 12, 4], [20])
    findings = check([t0, t1])
    f = only(findings, Code.RETOKENIZATION_SPLIT)
    assert (f.severity, f.turn) == (Severity.WARN, 1)
    assert "turn 1's prompt starts with turn 0's prompt" in f.message
    assert f.message.endswith("turn 1 starts a new root")
    assert is_trainable(findings)


def test_retokenization_split_below_a_root_says_where_it_linked() -> None:
    t0, t1 = chain(2)
    t2 = turn(2, [*t1.prompt_ids.tolist(), 999, 5], [30])
    f = only(check([t0, t1, t2]), Code.RETOKENIZATION_SPLIT)
    assert "turn 2's prompt starts with turn 1's prompt" in f.message
    assert f.message.endswith("turn 2 links to turn 0 instead")


# --- counters passed in ---------------------------------------------------------------


def test_engine_errors() -> None:
    f = only(check(chain(2), engine_errors=3), Code.ENGINE_ERRORS)
    assert (f.severity, f.turn) == (Severity.WARN, None)
    assert f.message == "3 model call(s) failed at the engine"
    assert Code.ENGINE_ERRORS not in codes(check(chain(2), engine_errors=0))


def test_budget_exhausted() -> None:
    f = only(check(chain(2), budget_stops=2), Code.BUDGET_EXHAUSTED)
    assert f.severity is Severity.INFO
    assert "2 call(s)" in f.message


def test_counters_are_reported_for_an_empty_session_too() -> None:
    assert codes(check([], engine_errors=1, budget_stops=1)) == [
        Code.NO_TURNS,
        Code.ENGINE_ERRORS,
        Code.BUDGET_EXHAUSTED,
    ]


def test_findings_are_in_a_stable_order() -> None:
    t0 = turn(0, [1, 2], [3], [0.5], finish_reason="length")
    t1 = turn(1, [7], [], [])
    expected = [
        (Code.POSITIVE_LOGPROB, 0),
        (Code.TRUNCATED, 0),
        (Code.EMPTY_COMPLETION, 1),
        (Code.MULTIPLE_ROOTS, None),
        (Code.ENGINE_ERRORS, None),
    ]
    for arrival in ([t0, t1], [t1, t0]):
        findings = validate(arrival, build_graph(arrival), engine_errors=1)
        assert [(f.code, f.turn) for f in findings] == expected


def test_an_evaluation_is_valid_and_says_so_once() -> None:
    """Turns captured below `tokens` have no ids by design: no fatal finding (the rollout
    is ok), one info finding naming them, and no id or graph checks."""
    turns = [
        dataclasses.replace(t, prompt_ids=None, token_ids=None, logprobs=None, capture_level="text")
        for t in chain(3)
    ]
    findings = check(turns, vocab_size=VOCAB)
    assert codes(findings) == [Code.EVALUATION_ONLY]
    assert findings[0].severity is Severity.INFO and "0, 1, 2" in findings[0].message
    assert is_trainable(findings)
