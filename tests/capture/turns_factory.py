"""Builders of TurnRecords for tests that read like a conversation.

Token ids are small ints chosen by the test; what matters is which calls share which
prefix. `follow` is one step of an agent loop: the next prompt is the previous call's
prompt + its sampled ids + the new message (tool output, user text) the agent appended.
Default logprobs differ per position (-1/8, -2/8, ...; exact in float32), so a
misaligned mask or logprob shows up as a wrong value, not just a wrong count.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Sequence
from types import EllipsisType

import numpy as np
import orjson

from harbor_ray.capture.core.turn import TurnRecord

VOCAB = 1000


def default_logprobs(n: int) -> list[float]:
    return [-(k + 1) / 8 for k in range(n)]


def turn(
    index: int,
    prompt: Sequence[int] | None,
    tokens: Sequence[int] | None,
    logprobs: Sequence[float] | EllipsisType | None = ...,
    *,
    finish_reason: str = "stop",
    auxiliary: bool = False,
) -> TurnRecord:
    """One recorded call. `logprobs=...` means one (distinct) logprob per sampled token."""
    if logprobs is ...:
        logprobs = None if tokens is None else default_logprobs(len(tokens))
    return TurnRecord(
        index=index,
        dialect="chat",
        prompt_ids=None if prompt is None else np.asarray(prompt, dtype=np.int32),
        token_ids=None if tokens is None else np.asarray(tokens, dtype=np.int32),
        logprobs=None if logprobs is None else np.asarray(logprobs, dtype=np.float32),
        finish_reason=finish_reason,
        request_messages_json=orjson.dumps([{"role": "user", "content": f"call {index}"}]),
        response_message_json=orjson.dumps({"role": "assistant", "content": f"reply {index}"}),
        request_model="test-model",
        started_at=float(index),
        ended_at=index + 0.5,
        auxiliary=auxiliary,
    )


def full(record: TurnRecord) -> list[int]:
    """The call's prompt + sampled ids: what the next call of the loop starts with."""
    assert record.prompt_ids is not None and record.token_ids is not None
    return [*record.prompt_ids.tolist(), *record.token_ids.tolist()]


def follow(
    parent: TurnRecord,
    index: int,
    message: Sequence[int],
    tokens: Sequence[int],
    logprobs: Sequence[float] | EllipsisType | None = ...,
    *,
    finish_reason: str = "stop",
) -> TurnRecord:
    """The agent's next call after `parent`: its context plus `message`, sampling `tokens`."""
    return turn(index, [*full(parent), *message], tokens, logprobs, finish_reason=finish_reason)


def chain(
    n: int,
    *,
    system: Sequence[int] = (1, 2, 3),
    reply_len: int = 2,
    message_len: int = 2,
    first_index: int = 0,
) -> list[TurnRecord]:
    """A linear agent loop of `n` calls; replies and messages take fresh ids from 10 up."""
    counter = itertools.cycle(range(10, VOCAB))
    turns = [turn(first_index, system, [next(counter) for _ in range(reply_len)])]
    for k in range(1, n):
        message = [next(counter) for _ in range(message_len)]
        reply = [next(counter) for _ in range(reply_len)]
        turns.append(follow(turns[-1], first_index + k, message, reply))
    return turns


def shuffled(turns: Sequence[TurnRecord], seed: int) -> list[TurnRecord]:
    """The same turns in another arrival order (indices unchanged)."""
    out = list(turns)
    random.Random(seed).shuffle(out)
    return out
