"""The Arrow schemas of the three tables a run writes, and the one version they share.

SCHEMA.md beside this file says what every column means; a test keeps the two in step.
Each schema carries the version in its metadata too, so a lone Parquet file still says
which version wrote it.

Types are chosen for the trainer's hot path: token ids are int32 (every vocabulary in
use fits), logprobs float32 (what the engine computes in), the loss mask uint8 (what
`TrainingSequence` holds, so it is written without a cast). Lists use 32-bit offsets:
one table holds one flush, far below 2**31 tokens.
"""

from __future__ import annotations

import pyarrow as pa

__all__ = [
    "COUNTS",
    "FINDING",
    "IDS",
    "LOGPROBS",
    "MASK",
    "MESSAGE_COLUMNS",
    "PROVENANCE",
    "ROLLOUTS",
    "SAMPLING",
    "SCHEMA_VERSION",
    "SEQUENCES",
    "TABLES",
    "TURNS",
    "list_of",
    "versioned",
]

# Bump on any change a reader of an older dataset would misread: a column renamed,
# retyped or given another meaning. Adding a nullable column is not such a change.
# 2: policy versions (turns/ `policy_version_start`/`_end`, their min/max on sequences/
# and rollouts/), and stitched prompts (turns/ `continues`, `stitched`,
# `stitch_fallback`). Nullable columns, but bumped on purpose: in a version-1 dataset
# their absence means "never recorded", and an online trainer's staleness filter must be
# able to tell that from a dataset written with them; and a turn's prompt may now be
# stitched from its parent's ids, so it is no longer always the engine's rendering of
# `request_messages`.
# 3: where each rollout ran (rollouts/ `node`, `host`). Nullable, bumped on purpose: a
# version-2 row has none because nothing recorded it, while a version-3 null means the
# rollout never reached a host; and `trial_dir` is from now on a path on `node` (trial
# directories stay on the node that ran the rollout), not necessarily on the driver's.
# 4: what a turn's logprobs are and what it was sampled with (turns/ `logprobs_mode`,
# `sampling`). Nullable, bumped on purpose: engines made by harbor_ray now return the
# logprobs of the distribution sampled from (`processed`), where up to version 3 they
# were always the model's at temperature 1 (`raw`) whatever the sampling temperature; a
# reader of a version-3 dataset must know its logprobs are raw.
# 5: evaluations (rollouts/ `capture_level`, `trainable`; turns/ `capture_level`,
# `prompt_tokens`, `completion_tokens`). Nullable, bumped on purpose: `ok` no longer
# means trainable. A version-5 row may be ok and captured below the `tokens` level (no
# ids: an evaluation of a hosted model), which a trainer must skip by `trainable`; up to
# version 4 every ok row was trainable, and a reader takes a null `trainable` as `ok`.
# 6: two additions, both nullable, bumped on purpose. Rows rebuilt from a dead host's
# journal (rollouts/ `partial`): an `infra_lost` row may now carry turns and sequences
# (those recorded before its host died), and `trainable` may be true for a row that is
# not `ok` (a partial row, when the run asked); up to version 5 such a row had no turns.
# And per-token policy versions (turns/ `policy_segments`: (version, first output
# offset) of each stretch of `token_ids` one version sampled): up to version 5 a turn
# whose `policy_version_start` and `_end` differ cannot say which of its tokens which
# version sampled; from 6 a null means no version was known, and the segments, not the
# start/end stamps, are what a per-token staleness mask reads.
# 7: the environment each rollout ran in (rollouts/ `environment`, `image_digest`).
# Nullable, bumped on purpose: up to version 6 the local sandbox ran every task on the
# host's userland whatever its Dockerfile or docker_image asked, and said nothing, so a
# version-6 reward may describe the host rather than the task; from 7 a task that needs
# its own image runs in it (`image`) or says that it did not (`host_override`).
# 8: rate-limited calls (rollouts/ `counts.retried_calls`; turns/ `upstream_retries`):
# how many of a rollout's calls the proxy sent again after the upstream answered 429
# with a Retry-After, and how many times each. Nullable, bumped on purpose: up to
# version 7 such a 429 reached the agent, whose retries nothing recorded, so a version-7
# null is "not counted", never 0; from 8 a rate-limited evaluation says it was slowed.
# 9: provenance (rollouts/ `provenance`: the model source, and sha256 of the weights, the
# served chat template, the tokenizer and the harness's configuration, with its
# version). Nullable, bumped on purpose: up to version 8 two datasets of one model name
# could hold different weights, templates or harness settings and nothing said so; from
# 9 a null field means "not known where the run started", and a comparison states
# where its runs differ.
SCHEMA_VERSION = 9

_METADATA = {b"harbor_ray.schema_version": str(SCHEMA_VERSION).encode()}


def list_of(value: pa.DataType) -> pa.ListType:
    """A list type whose item is named as Parquet names it, so tables read back equal."""
    return pa.list_(pa.field("element", value))


IDS = list_of(pa.int32())
LOGPROBS = list_of(pa.float32())
MASK = list_of(pa.uint8())

FINDING = pa.struct(
    [
        pa.field("code", pa.string(), nullable=False),
        pa.field("severity", pa.string(), nullable=False),
        pa.field("message", pa.string(), nullable=False),
        pa.field("turn", pa.int32()),
    ]
)

COUNTS = pa.struct(
    [
        pa.field("model_calls", pa.int32(), nullable=False),
        pa.field("turns", pa.int32()),
        pa.field("roots", pa.int32()),
        pa.field("agent_roots", pa.int32()),
        pa.field("sequences", pa.int32()),
        pa.field("discarded", pa.int32()),
        pa.field("engine_errors", pa.int32()),
        pa.field("budget_stops", pa.int32()),
        pa.field("retried_calls", pa.int32()),
    ]
)


PROVENANCE = pa.struct(
    [
        pa.field("model_source", pa.string()),
        pa.field("weights_sha256", pa.string()),
        pa.field("chat_template_sha256", pa.string()),
        pa.field("tokenizer_sha256", pa.string()),
        pa.field("harness_version", pa.string()),
        pa.field("harness_config_sha256", pa.string()),
    ]
)


def versioned(fields: list[pa.Field]) -> pa.Schema:
    """A schema stamped with SCHEMA_VERSION."""
    return pa.schema(fields, metadata=_METADATA)


ROLLOUTS = versioned(
    [
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("attempt", pa.int32(), nullable=False),
        pa.field("agent", pa.string(), nullable=False),
        pa.field("sandbox", pa.string(), nullable=False),
        pa.field("model", pa.string()),
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("error_type", pa.string()),
        pa.field("error", pa.string()),
        pa.field("reward", pa.float64()),
        pa.field("reward_key", pa.string()),
        pa.field("rewards", pa.map_(pa.string(), pa.float64()), nullable=False),
        pa.field("findings", list_of(FINDING), nullable=False),
        pa.field("counts", COUNTS, nullable=False),
        pa.field("timings", pa.map_(pa.string(), pa.float64()), nullable=False),
        pa.field("trial_dir", pa.string()),
        pa.field("node", pa.string()),
        pa.field("host", pa.string()),
        pa.field("policy_version_min", pa.int64()),
        pa.field("policy_version_max", pa.int64()),
        pa.field("capture_level", pa.string()),
        pa.field("trainable", pa.bool_()),
        pa.field("partial", pa.bool_()),
        pa.field("environment", pa.string()),
        pa.field("image_digest", pa.string()),
        pa.field("provenance", PROVENANCE),
        pa.field("schema_version", pa.int32(), nullable=False),
    ]
)

SEQUENCES = versioned(
    [
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("sequence", pa.int32(), nullable=False),
        pa.field("root", pa.int32(), nullable=False),
        pa.field("leaf", pa.int32(), nullable=False),
        pa.field("role", pa.string(), nullable=False),
        pa.field("turns", IDS, nullable=False),
        pa.field("input_ids", IDS, nullable=False),
        pa.field("loss_mask", MASK, nullable=False),
        pa.field("logprobs", LOGPROBS, nullable=False),
        pa.field("reward", pa.float64()),
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field("policy_version_min", pa.int64()),
        pa.field("policy_version_max", pa.int64()),
    ]
)

SAMPLING = pa.struct(
    [
        pa.field("temperature", pa.float64()),
        pa.field("top_p", pa.float64()),
        pa.field("top_k", pa.int64()),
        pa.field("min_p", pa.float64()),
    ]
)

# (version, first output offset) of each stretch of a turn's sampled ids one policy
# version sampled, in offset order from 0 (capture/core/policy_segments.py).
POLICY_SEGMENTS = pa.list_(
    pa.struct(
        [
            pa.field("version", pa.int64(), nullable=False),
            pa.field("offset", pa.int64(), nullable=False),
        ]
    )
)

# Kept last and apart so that a token-only read (`columns=`) never decodes them.
MESSAGE_COLUMNS = ("request_messages", "response_message")

TURNS = versioned(
    [
        pa.field("rollout_id", pa.string(), nullable=False),
        pa.field("task", pa.string(), nullable=False),
        pa.field("index", pa.int32(), nullable=False),
        pa.field("parent", pa.int32()),
        pa.field("root", pa.int32()),
        pa.field("role", pa.string(), nullable=False),
        pa.field("auxiliary", pa.bool_(), nullable=False),
        pa.field("dialect", pa.string(), nullable=False),
        pa.field("finish_reason", pa.string(), nullable=False),
        pa.field("request_model", pa.string(), nullable=False),
        pa.field("started_at", pa.float64(), nullable=False),
        pa.field("ended_at", pa.float64(), nullable=False),
        pa.field("policy_version_start", pa.int64()),
        pa.field("policy_version_end", pa.int64()),
        pa.field("policy_segments", POLICY_SEGMENTS),
        pa.field("prompt_delta", IDS),
        pa.field("token_ids", IDS),
        pa.field("logprobs", LOGPROBS),
        pa.field("logprobs_mode", pa.string()),
        pa.field("sampling", SAMPLING, nullable=False),
        pa.field("continues", pa.int32()),
        pa.field("stitched", pa.bool_()),
        pa.field("stitch_fallback", pa.string()),
        pa.field("capture_level", pa.string()),
        pa.field("prompt_tokens", pa.int32()),
        pa.field("completion_tokens", pa.int32()),
        pa.field("upstream_retries", pa.int32()),
        pa.field("reward", pa.float64()),
        pa.field("ok", pa.bool_(), nullable=False),
        pa.field(MESSAGE_COLUMNS[0], pa.string(), nullable=False),
        pa.field(MESSAGE_COLUMNS[1], pa.string(), nullable=False),
    ]
)

# (directory, schema) in the order the writer commits a flush: a rollouts/ row is what
# marks a rollout finished, so it is written after the rows it vouches for.
TABLES: tuple[tuple[str, pa.Schema], ...] = (
    ("sequences", SEQUENCES),
    ("turns", TURNS),
    ("rollouts", ROLLOUTS),
)
