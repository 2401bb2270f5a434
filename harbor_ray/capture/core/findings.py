"""Validation findings: what is wrong or notable about one session's captured turns.

A bad capture is data, not a crash: every problem becomes a `Finding`, and any FATAL one
makes the rollout untrainable (`ok` is false). Codes are a closed set with stable string
values because they are written to datasets and filtered on by trainers.

Each check exists because its absence once produced plausible but wrong training data
(docs/lessons.md): missing ids or logprobs, misaligned logprobs, a session with no model
calls reported as a success, prefix links that silently split a conversation.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

import numpy as np

from harbor_ray.capture.core.address_equality import Place, equal
from harbor_ray.capture.core.graph import Role, RolloutGraph, TrainingSequence
from harbor_ray.capture.core.turn import TurnRecord

__all__ = [
    "POSITIVE_LOGPROB_TOLERANCE",
    "Code",
    "Finding",
    "Severity",
    "is_trainable",
    "validate",
]

# A log-probability is <= 0. vLLM's log_softmax gives exactly <= 0 (the max term
# contributes exp(0) = 1 to the normaliser), so anything above float32 noise is not a
# logprob at all (a raw logit, a probability, a sign error) and poisons the
# importance ratio a trainer computes from it.
POSITIVE_LOGPROB_TOLERANCE = 1e-6


class Severity(StrEnum):
    FATAL = "fatal"  # the rollout must not be trained on
    WARN = "warn"  # trainable, but some data is masked or suspicious
    INFO = "info"  # worth counting, nothing wrong


class Code(StrEnum):
    """What a finding is about. The values are part of the dataset schema: never rename."""

    NO_TURNS = "no_turns"
    MISSING_PROMPT_IDS = "missing_prompt_ids"
    MISSING_TOKEN_IDS = "missing_token_ids"
    INVALID_TOKEN_ID = "invalid_token_id"
    MISSING_LOGPROBS = "missing_logprobs"
    LOGPROB_MISALIGNED = "logprob_misaligned"
    POSITIVE_LOGPROB = "positive_logprob"
    NOTHING_TRAINABLE = "nothing_trainable"
    LENGTH_MISMATCH = "length_mismatch"
    MULTIPLE_ROOTS = "multiple_roots"
    DISCARDED_TURNS = "discarded_turns"
    RETOKENIZATION_SPLIT = "retokenization_split"
    STITCH_FALLBACK = "stitch_fallback"
    EMPTY_COMPLETION = "empty_completion"
    TRUNCATED = "truncated"
    ENGINE_ERRORS = "engine_errors"
    BUDGET_EXHAUSTED = "budget_exhausted"
    NOT_FORWARDED = "not_forwarded"
    RAW_LOGPROBS_SAMPLED_OTHERWISE = "raw_logprobs_sampled_otherwise"
    EVALUATION_ONLY = "evaluation_only"


@dataclass(frozen=True)
class Finding:
    """One problem or fact. `turn` names the turn it is about; None when session-wide."""

    code: Code
    severity: Severity
    message: str
    turn: int | None = None


def is_trainable(findings: Sequence[Finding]) -> bool:
    """No FATAL finding. This is what a rollout's `ok` is made of."""
    return all(f.severity is not Severity.FATAL for f in findings)


def validate(
    turns: Sequence[TurnRecord],
    graph: RolloutGraph,
    *,
    vocab_size: int | None = None,
    engine_errors: int = 0,
    budget_stops: int = 0,
) -> tuple[Finding, ...]:
    """Check one session's turns and the graph built from them.

    Findings come in a stable order: session-wide first, then per turn in index order,
    then the graph's, then the counters passed in by the owner.
    """
    findings: list[Finding] = []
    if not turns:
        findings.append(Finding(Code.NO_TURNS, Severity.FATAL, "the session made no model calls"))
    evaluated = [t.index for t in turns if t.capture_level != "tokens"]
    if evaluated:
        # Recorded without ids on purpose (an evaluation): nothing to check them against,
        # and no graph to build, so the id checks would only report the choice as faults.
        findings.append(
            Finding(
                Code.EVALUATION_ONLY,
                Severity.INFO,
                f"{len(evaluated)} turn(s) captured below the `tokens` level (turns "
                f"{_names(evaluated)}): kept for evaluation, never trained on",
            )
        )
    prompts = _bad_prompt_ids(turns, vocab_size)
    for turn in sorted(turns, key=lambda t: t.index):
        if turn.capture_level == "tokens":
            findings.extend(_turn_findings(turn, vocab_size, prompts.get(turn.index, (0, 0))))
    if turns and not evaluated:
        findings.extend(_graph_findings(graph, {t.index: t for t in turns}))
    if engine_errors > 0:
        findings.append(
            Finding(
                Code.ENGINE_ERRORS,
                Severity.WARN,
                f"{engine_errors} model call(s) failed at the engine",
            )
        )
    if budget_stops > 0:
        findings.append(
            Finding(
                Code.BUDGET_EXHAUSTED,
                Severity.INFO,
                f"the model-call budget was spent; {budget_stops} call(s) got the budget stop",
            )
        )
    return tuple(findings)


def _turn_findings(
    turn: TurnRecord, vocab_size: int | None, prompt_bad: tuple[int, int]
) -> Iterator[Finding]:
    i = turn.index
    if turn.prompt_ids is None:
        yield Finding(
            Code.MISSING_PROMPT_IDS, Severity.FATAL, f"turn {i}: the engine sent no prompt ids", i
        )
    else:
        yield from _invalid_ids(i, "prompt", turn.prompt_ids, vocab_size, *prompt_bad)

    tokens = turn.token_ids
    if tokens is None:
        yield Finding(
            Code.MISSING_TOKEN_IDS, Severity.FATAL, f"turn {i}: the engine sent no sampled ids", i
        )
    else:
        yield from _invalid_ids(i, "sampled", tokens, vocab_size, *_bad_ids(tokens, vocab_size))
        if len(tokens) == 0:
            yield Finding(
                Code.EMPTY_COMPLETION, Severity.WARN, f"turn {i}: the engine sampled no tokens", i
            )

    if turn.logprobs is None:
        yield Finding(
            Code.MISSING_LOGPROBS, Severity.FATAL, f"turn {i}: the engine sent no logprobs", i
        )
    elif tokens is not None and len(turn.logprobs) != len(tokens):
        yield Finding(
            Code.LOGPROB_MISALIGNED,
            Severity.FATAL,
            f"turn {i}: {len(turn.logprobs)} logprobs for {len(tokens)} sampled tokens",
            i,
        )
    elif tokens is not None:
        yield from _logprob_values(i, turn.logprobs)
    if turn.logprobs_mode == "raw" and turn.sampling.temperature not in (None, 1.0):
        # The logprobs are the model's at temperature 1, the tokens were drawn at another:
        # a trainer scoring at the sampling temperature sees them as off-policy.
        yield Finding(
            Code.RAW_LOGPROBS_SAMPLED_OTHERWISE,
            Severity.WARN,
            f"turn {i}: sampled at temperature {turn.sampling.temperature:g}, but the engine "
            "returns temperature-1 logprobs (serve it with logprobs_mode: processed_logprobs)",
            i,
        )

    continuation = turn.continuation
    if continuation is not None and not continuation.stitched:
        # The prompt the engine rendered may not extend the continued turn's ids: a
        # retokenization_split follows when it does not.
        why = continuation.fallback.reason if continuation.fallback else "no reason given"
        yield Finding(
            Code.STITCH_FALLBACK,
            Severity.WARN,
            f"turn {i} continues turn {continuation.turn}, but its prompt was rendered from "
            f"the messages, not stitched from turn {continuation.turn}'s ids: {why}",
            i,
        )

    if turn.finish_reason == "length":
        yield Finding(Code.TRUNCATED, Severity.INFO, f"turn {i}: the reply hit the token limit", i)
    if turn.not_forwarded:
        # The model was trained on a prompt without these; a trainer may want to know
        # that the agent offered more (a tool the model could not call, an image it
        # never saw).
        yield Finding(
            Code.NOT_FORWARDED,
            Severity.INFO,
            f"turn {i}: left out of the engine request: {', '.join(turn.not_forwarded)}",
            i,
        )


def _bad_ids(ids: np.ndarray, vocab_size: int | None) -> tuple[int, int]:
    """How many ids are outside the vocabulary, and the position of the first (0: none)."""
    bad = ids < 0
    if vocab_size is not None:
        bad |= ids >= vocab_size
    count = int(np.count_nonzero(bad))
    return count, int(np.argmax(bad)) if count else 0


def _bad_prompt_ids(
    turns: Sequence[TurnRecord], vocab_size: int | None
) -> dict[int, tuple[int, int]]:
    """`_bad_ids` of every prompt, each shared run of memory read once.

    Prompts held as views of one buffer (`token_buffers`) start at one address: the shortest is
    checked whole, each longer one only past the previous, and the counts add up (what
    lies at an address is one value for every view of it).
    """
    by_start: dict[tuple[int, int, str], list[tuple[int, np.ndarray]]] = {}
    checked: dict[int, tuple[int, int]] = {}
    for turn in turns:
        if turn.prompt_ids is None:
            continue
        if turn.prompt_ids.ndim != 1:
            checked[turn.index] = _bad_ids(turn.prompt_ids, vocab_size)
            continue
        place = Place(turn.prompt_ids)
        key = (place.address, place.step, place.dtype.str)
        by_start.setdefault(key, []).append((turn.index, turn.prompt_ids))
    for group in by_start.values():
        group.sort(key=lambda indexed: len(indexed[1]))
        count = first = end = 0
        for index, ids in group:
            more, at = _bad_ids(ids[end:], vocab_size)
            if more and not count:
                first = end + at
            count, end = count + more, len(ids)
            checked[index] = (count, first)
    return checked


def _invalid_ids(
    i: int, what: str, ids: np.ndarray, vocab_size: int | None, count: int, first: int
) -> Iterator[Finding]:
    if count:
        bound = f"[0, {vocab_size})" if vocab_size is not None else "[0, inf)"
        yield Finding(
            Code.INVALID_TOKEN_ID,
            Severity.FATAL,
            f"turn {i}: {count} of {len(ids)} {what} ids are outside {bound} "
            f"(first: {int(ids[first])} at position {first})",
            i,
        )


def _logprob_values(i: int, logprobs: np.ndarray) -> Iterator[Finding]:
    missing = int(np.count_nonzero(~np.isfinite(logprobs)))
    n = len(logprobs)
    if missing and missing == n:
        # Every entry absent is an engine that did not return logprobs, as if the field
        # were missing; masking all of it quietly would train on nothing from this turn.
        yield Finding(
            Code.MISSING_LOGPROBS,
            Severity.FATAL,
            f"turn {i}: none of {n} sampled tokens has a logprob",
            i,
        )
    elif missing:
        yield Finding(
            Code.MISSING_LOGPROBS,
            Severity.WARN,
            f"turn {i}: {missing} of {n} sampled tokens have no logprob and are masked",
            i,
        )
    positive = logprobs > POSITIVE_LOGPROB_TOLERANCE
    count = int(np.count_nonzero(positive))
    if count:
        first = int(np.argmax(positive))
        yield Finding(
            Code.POSITIVE_LOGPROB,
            Severity.FATAL,
            f"turn {i}: {count} of {n} logprobs are positive "
            f"(first: {float(logprobs[first])} at position {first})",
            i,
        )


def _graph_findings(graph: RolloutGraph, by_index: Mapping[int, TurnRecord]) -> Iterator[Finding]:
    for i, j in graph.retokenization_splits:
        parent = graph.nodes[i].parent
        linked_to = "starts a new root" if parent is None else f"links to turn {parent} instead"
        yield Finding(
            Code.RETOKENIZATION_SPLIT,
            Severity.WARN,
            f"turn {i}'s prompt starts with turn {j}'s prompt but not with its sampled ids "
            f"(a re-tokenised reply or rewritten history); turn {i} {linked_to}",
            i,
        )
    for sequence in graph.sequences:
        problem = _sequence_problem(sequence, by_index)
        if problem:
            yield Finding(
                Code.LENGTH_MISMATCH,
                Severity.FATAL,
                f"sequence to leaf {sequence.leaf}: {problem}",
                sequence.leaf,
            )
    agent_roots = graph.agent_roots
    if len(agent_roots) > 1:
        yield Finding(
            Code.MULTIPLE_ROOTS,
            Severity.INFO,
            f"{len(agent_roots)} agent roots (turns {_names(agent_roots)}); all are trained on",
        )
    if graph.discarded:
        yield Finding(
            Code.DISCARDED_TURNS,
            Severity.INFO,
            f"{len(graph.discarded)} abandoned retr{'y' if len(graph.discarded) == 1 else 'ies'}"
            f" masked out (turns {_names(graph.discarded)})",
        )
    if not any(s.role is Role.AGENT and s.loss_mask.any() for s in graph.sequences):
        yield Finding(
            Code.NOTHING_TRAINABLE,
            Severity.FATAL,
            f"no agent sequence has a trainable token ({len(graph.sequences)} sequence(s), "
            f"{len(graph.agent_roots)} agent root(s))",
        )


def _sequence_problem(sequence: TrainingSequence, by_index: Mapping[int, TurnRecord]) -> str:
    """What breaks the sequence's layout, or "" when it holds.

    Checked independently of how the graph built it: every array has one length, each
    turn on the path has its prompt as a prefix and its sampled ids right after it, and
    the mask covers sampled positions only.
    """
    n = len(sequence.input_ids)
    if len(sequence.loss_mask) != n or len(sequence.logprobs) != n:
        return (
            f"input_ids has {n} entries, loss_mask {len(sequence.loss_mask)}, "
            f"logprobs {len(sequence.logprobs)}"
        )
    sampled = np.zeros(n, dtype=bool)
    mask = sequence.loss_mask.astype(bool)
    end = 0
    for index in sequence.turns:
        turn = by_index.get(index)
        if turn is None or turn.prompt_ids is None or turn.token_ids is None:
            return f"turn {index} on its path has no ids"
        start, end = len(turn.prompt_ids), len(turn.prompt_ids) + len(turn.token_ids)
        if end > n or not (
            equal(sequence.input_ids[:start], turn.prompt_ids)
            and equal(sequence.input_ids[start:end], turn.token_ids)
        ):
            return f"turn {index}'s prompt and sampled ids are not a prefix at [0, {end})"
        sampled[start:end] = True
        trained = mask[start:end]
        lp = turn.logprobs
        if trained.any() and (
            lp is None
            or len(lp) != end - start
            or not np.array_equal(sequence.logprobs[start:end][trained], lp[trained])
        ):
            return f"turn {index}'s logprobs are not at its sampled positions [{start}, {end})"
    if end != n:
        return f"the leaf's sampled ids end at {end}, the sequence at {n}"
    outside = int(np.count_nonzero(mask & ~sampled))
    if outside:
        return f"{outside} masked-in position(s) hold no sampled token"
    stray = int(np.count_nonzero(~mask & (sequence.logprobs != 0)))
    if stray:
        return f"{stray} masked-out position(s) carry a nonzero logprob"
    return ""


def _names(indices: Sequence[int]) -> str:
    return ", ".join(str(i) for i in indices)
