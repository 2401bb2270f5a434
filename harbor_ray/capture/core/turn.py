"""One recorded model call: the unit the rollout graph is built from."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.continuation import Continuation
from harbor_ray.capture.core.sampling import TurnSampling


@dataclass(frozen=True, eq=False)
class TurnRecord:
    """Exactly what the engine saw and produced for one admitted model call.

    Ids are the engine's own (int32); `logprobs` is float32 aligned with `token_ids`,
    NaN where the engine gave none. A field the engine did not send is None, never
    filled in, so validation can report it. Times are supplied by the edge (seconds).

    The messages are kept as the JSON bytes (UTF-8) they are stored as, not as Python
    objects: a session holds every turn's whole conversation so far, and as dicts they
    made each of the garbage collector's full passes walk all of them, a pause every
    call in flight then waits out (docs/performance.md, "The capture proxy").
    """

    index: int  # admission order within the session, 0-based, assigned by the owner
    dialect: str
    prompt_ids: np.ndarray | None
    token_ids: np.ndarray | None
    logprobs: np.ndarray | None
    finish_reason: str
    # Which logprobs `logprobs` are (`processed`: of the distribution sampled from;
    # `raw`: the model's at temperature 1), as the engine's certification found; None:
    # not known. And the sampling settings the engine request carried.
    logprobs_mode: str | None = None
    sampling: TurnSampling = field(default_factory=TurnSampling)
    request_messages_json: bytes = b"[]"  # the engine request's messages, a JSON array
    response_message_json: bytes = b"{}"  # the engine reply's message, a JSON object
    request_model: str = ""
    # Parts of the agent's request the engine request left out (EngineCall.not_forwarded).
    not_forwarded: tuple[str, ...] = ()
    started_at: float = 0.0
    ended_at: float = 0.0
    # Set by the edge when it knows the call is not part of the agent's own loop
    # (e.g. a title or summary call); such trees get the role "auxiliary".
    auxiliary: bool = False
    # The policy (weights) version when the call was forwarded to the engine and when
    # its reply arrived, as the edge knew it; they differ when a weight update landed
    # mid-call. None: the edge knew no version.
    policy_version_start: int | None = None
    policy_version_end: int | None = None
    # Which version sampled which of `token_ids`: ((version, first offset), ...) from
    # offset 0 (policy_segments.py). None: every token is `policy_version_start`'s (no
    # version known when that is None too), kept as None so that the common case adds
    # no object for the garbage collector (`policy_segments.compact`).
    policy_segments: tuple[tuple[int, int], ...] | None = None
    # The earlier turn this call continued and whether its prompt was stitched from that
    # turn's ids (continuation.py); None when it continued none, or stitching was off.
    continuation: Continuation | None = None
    # The digest of the request messages + the reply (`continuation.extend`), by which a
    # later request that continues this conversation finds this turn; b"" for none.
    conversation_key: bytes = b""
    # What the proxy was set to record (capture_level.py): below `tokens` the ids are
    # None by design, not missing, and the turn is for evaluation only.
    capture_level: CaptureLevel = "tokens"
    # The engine's usage counts (`usage.prompt_tokens`/`completion_tokens`); what a
    # turn without ids still says of its length.
    prompt_tokens: int = 0
    completion_tokens: int = 0
    # How many times the proxy sent the call again after the upstream answered 429 with
    # a Retry-After (capture/proxy/pipeline.py): a rate-limited hosted API.
    upstream_retries: int = 0
