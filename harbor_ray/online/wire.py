"""The controller's HTTP bodies, as pydantic models (the OpenAPI document is built from
them). Strict and closed: an unknown or mistyped field is a 400 naming it, and nothing
starts."""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from harbor_ray.capture.core.sampling import INT64_MAX, Sampling

StalePolicy = Literal["drop", "deliver", "mask"]
"""What becomes of a group older than its staleness bound: `drop` it whole, `deliver`
it as it is, or deliver it with the loss mask 0 on every token sampled more than the
bound behind the version it finished at (`mask`; docs/online.md, "Staleness")."""

# A submit's `metadata` comes back with every group: held to what any JSON encoder
# writes (orjson stops at 254 levels) and what a group's reply can carry many times.
METADATA_MAX_DEPTH = 32
METADATA_MAX_BYTES = 64 * 1024


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TaskRequest(_Body):
    task: str = Field(min_length=1, description="A task name of the dataset.")
    n: int = Field(ge=1, le=10_000, description="Rollouts of the task: one group (GRPO).")
    agent: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="The agent (harness) this group runs, so that one "
        "request can train one policy through several; None (or "
        "absent): the request's `agent`. A group's replacements "
        "(drop_no_signal) run its agent.",
    )


class SubmitRequest(_Body):
    """`POST /v1/rollouts`."""

    request_id: str = Field(
        min_length=1,
        max_length=200,
        description="Idempotency key: a retried submit starts nothing new.",
    )
    tasks: list[TaskRequest] = Field(min_length=1)
    agent: str = Field(min_length=1, max_length=1000)
    sandbox: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="None (or absent): the controller's default.",
    )
    dataset: str | None = Field(
        None,
        min_length=1,
        max_length=4096,
        description="None (or absent): the controller's default; "
        "else one of the datasets the controller is configured "
        "with, spelled as there.",
    )
    sampling: Sampling | None = None
    budget: int | None = Field(None, ge=0, le=INT64_MAX, description="Model calls per rollout.")
    deadline_s: float | None = Field(None, gt=0, description="Per rollout.")
    max_staleness: int | None = Field(
        None, ge=0, description="Policy versions; None: the controller's."
    )
    drop_no_signal: bool | None = Field(
        None,
        description="Drop a finished group whose rewards are all equal (it has no "
        "GRPO signal) and run a replacement group in its place, of the request's tasks; "
        "None: the controller's. The controller's default applies to groups of 2 or more; "
        "true with a group of 1 is refused (one reward cannot vary).",
    )
    max_extra_groups: int | None = Field(
        None,
        ge=0,
        le=10_000,
        description="Replacement groups this request runs at most "
        "(each as large as the group it replaces); past it a group without signal is "
        "delivered with `no_signal` true. None: the controller's (its default: as many "
        "as the request's groups).",
    )
    replacement_tasks: list[str] | None = Field(
        None,
        min_length=1,
        max_length=10_000,
        description="The tasks of the dataset a "
        "replacement group may run (a trainer's whole task list, so that a request of "
        "one task can be refilled too); None: the request's own tasks.",
    )
    metadata: dict[str, Any] = Field(
        default_factory=dict,
        description=f"Returned with every group as given; at most "
        f"{METADATA_MAX_DEPTH} levels deep and {METADATA_MAX_BYTES} bytes as JSON, its "
        "integers within 64 bits (a wider one as a string).",
    )

    @field_validator("metadata")
    @classmethod
    def _deliverable(cls, metadata: dict[str, Any]) -> dict[str, Any]:
        if (depth := _depth(metadata, METADATA_MAX_DEPTH)) > METADATA_MAX_DEPTH:
            raise ValueError(
                f"nested too deep: over {METADATA_MAX_DEPTH} levels (at least {depth})"
            )
        try:
            size = len(orjson.dumps(metadata))
        except orjson.JSONEncodeError as exc:  # an integer past 64 bits
            raise ValueError(f"not writable as JSON: {exc}") from exc
        if size > METADATA_MAX_BYTES:
            raise ValueError(f"too many bytes: {size} as JSON, over {METADATA_MAX_BYTES}")
        return metadata


# A JSON integer orjson reads exactly: a signed or unsigned 64-bit one. orjson reads a
# wider one as a float, so it would come back as another number: refused instead.
_INT_RANGE = (-(2**63), 2**64 - 1)
_LONG_DIGITS = re.compile(rb"[0-9]{19,}")  # the shortest integer past the range has 19


class _Wide:
    """Where an integer past 64 bits was, in a body parsed to find it."""


def wide_integer(raw: bytes | bytearray) -> str | None:
    """Where (`metadata.ids.1`) the JSON `raw` has its first integer past 64 bits, or
    None. Only a body with 19 digits in a row is parsed again (by the stdlib's json,
    which reads integers exactly), so no other body pays for it."""
    if not _LONG_DIGITS.search(raw):
        return None
    try:
        data = json.loads(raw, parse_int=_int_or_wide)
    except (ValueError, RecursionError):  # not JSON: orjson's refusal says why
        return None
    stack: list[tuple[Any, tuple[str, ...]]] = [(data, ())]
    while stack:
        value, where = stack.pop()
        if isinstance(value, _Wide):
            return ".".join(where) or "body"
        children = (
            value.items()
            if isinstance(value, dict)
            else enumerate(value)
            if isinstance(value, list)
            else ()
        )
        stack.extend((child, (*where, str(key))) for key, child in reversed(list(children)))
    return None


def _int_or_wide(text: str) -> int | _Wide:
    if len(text.lstrip("-")) > 20:  # past the range, and past int()'s own digit limit
        return _Wide()
    value = int(text)
    return value if _INT_RANGE[0] <= value <= _INT_RANGE[1] else _Wide()


def _depth(value: Any, limit: int) -> int:
    """The nesting depth of `value` (a scalar is 0), counted no further than `limit` + 1:
    iterative, so no depth can exhaust the stack."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, level)
            if level > limit:
                return deepest
            stack.extend(
                (child, level + 1) for child in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


class GroupRef(BaseModel):
    group_id: str
    task: str
    n: int


class SubmitReply(BaseModel):
    groups: list[GroupRef]
    policy_version: int


class Group(BaseModel):
    """A finished group: every rollout's rows, in the dataset's columns."""

    group_id: str
    request_id: str
    task: str
    n: int
    metadata: dict[str, Any]
    # Versions over every turn of the group (None: no turn recorded one).
    policy_version_min: int | None
    policy_version_max: int | None
    # The policy version when the group finished, and how far its oldest turn was behind.
    finished_version: int
    staleness: int | None
    rollouts: list[dict[str, Any]] = Field(description="rollouts/ rows, one per rollout.")
    sequences: list[dict[str, Any]] = Field(
        description="sequences/ rows, each with `policy_versions`: the version that "
        "sampled each of its `input_ids` (None where none did). Under the `mask` policy "
        "`loss_mask` is 0 on the tokens past the staleness bound."
    )
    masked_tokens: int = Field(
        0, description="Sampled tokens the `mask` policy took out of `loss_mask` as too stale."
    )
    turns: list[dict[str, Any]] = Field(description="turns/ rows, `prompt_ids` in full.")
    replaces: str | None = Field(
        None,
        description="The submit reply's group whose place "
        "this one takes (that one, or a replacement before this, "
        "had no signal); None: it is that group.",
    )
    no_signal: bool = Field(
        False,
        description="Its rewards are all equal, and its request's "
        "max_extra_groups were spent: delivered so that the request "
        "still gets as many groups as it asked for.",
    )
    no_signal_dropped: int = Field(
        0, description="Groups dropped for no signal in this group's place before it."
    )


class GroupsReply(BaseModel):
    groups: list[Group]


class AckRequest(_Body):
    group_ids: list[str] = Field(min_length=1)


class AckReply(BaseModel):
    acknowledged: list[str]
    unknown: list[str]


class CancelReply(BaseModel):
    group_id: str
    cancelled: int = Field(description="Rollouts that were still running.")


class WeightsRequest(_Body):
    """`POST /v1/weights`."""

    path: str = Field(min_length=1, description="A checkpoint directory the engine reads.")
    version: int = Field(ge=1, le=INT64_MAX, description="Must exceed the current version.")


class ReplicaResult(BaseModel):
    """One engine replica's part in a weight update."""

    model_config = ConfigDict(frozen=True)

    replica: str
    ok: bool
    version: int | None = Field(
        description="What the replica serves after the attempt; "
        "None if no one can say (its rollback failed too: it was "
        "left paused and needs a restart)."
    )
    error: str | None = None
    step: str | None = Field(
        None,
        description="The step that failed (pause, reload, "
        "cache, label, resume, rollback; for a LoRA adapter: load, "
        "switch, rollback).",
    )
    steps: dict[str, float] = Field(
        default_factory=dict, description="Seconds of each step it ran."
    )
    seconds: float = 0.0


class WeightsReply(BaseModel):
    version: int
    replicas: list[ReplicaResult]
    steps: dict[str, float] = Field(
        description="Seconds of each step across the "
        "replicas (they run it at once): pause, reload, "
        "cache, label, resume; for a LoRA adapter: load, "
        "switch."
    )
    seconds: float


class PolicyReply(BaseModel):
    version: int
    paused: bool = Field(description="A weight update is under way.")
    replicas: list[ReplicaResult] = Field(description="Each replica at its last update.")


class StatsReply(BaseModel):
    queued: int = Field(description="Accepted rollouts not yet on a host.")
    in_flight: int
    finished: int = Field(description="Rollouts ended (rows made).")
    groups_ready: int = Field(description="Finished groups waiting to be acknowledged.")
    delivered: int = Field(description="Groups acknowledged.")
    dropped: int = Field(description="Groups dropped as too stale.")
    cancelled: int = Field(description="Groups cancelled by the caller.")
    errors: dict[str, int] = Field(description="Rows by error type.")
    staleness: dict[str, int] = Field(description="Finished groups by staleness (versions).")
    no_signal_dropped: int = Field(
        0,
        description="Groups dropped because their rewards "
        "were all equal (drop_no_signal), each replaced.",
    )
    no_signal_delivered: int = Field(
        0,
        description="Groups without signal delivered "
        "flagged: their request's max_extra_groups were spent.",
    )
    signal_kept: int = Field(
        0, description="Groups of drop_no_signal requests whose rewards varied."
    )
    extra_rollouts: int = Field(0, description="Rollouts of replacement groups started.")
    rollouts_per_min: float
    concurrency_limit: int = Field(
        description="Rollouts allowed on hosts at once now "
        "(it moves with an adaptive cap: max_concurrency)."
    )


class ErrorReply(BaseModel):
    error: str
    field: str | None = None
