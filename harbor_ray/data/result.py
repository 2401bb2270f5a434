"""The one record every rollout ends as, whatever happened to it.

docs/lessons.md: an exception that reaches a distributed trainer hangs every rank at the
collective barrier, so a failed rollout is data: `ok` false, `error_type` from a closed
set, `reward` None when the verifier never ran (never 0.0: that would teach the model
that infrastructure failures are its fault).
"""

from __future__ import annotations

import traceback
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field, computed_field

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.findings import Finding
from harbor_ray.capture.core.record import CaptureCounts


class ErrorType(StrEnum):
    """Where a rollout failed, named by the boundary crossed. Closed: add here, nowhere else."""

    TASK_INVALID = "task_invalid"  # the task (or its pairing with the agent) is unusable
    ENVIRONMENT_UNSUPPORTED = "environment_unsupported"  # the sandbox cannot give the
    # task its own environment (environment_need.py); nothing ran
    ENVIRONMENT_BUILD_FAILED = "environment_build_failed"  # the task's image did not
    # build (or could not be found or unpacked); the error names the build log
    SANDBOX_START = "sandbox_start"  # the environment did not start
    AGENT_SETUP = "agent_setup"  # the agent could not be installed / set up
    AGENT_TIMEOUT = "agent_timeout"  # the agent ran past its own timeout
    AGENT_ERROR = "agent_error"  # the agent crashed or gave up
    VERIFIER_ERROR = "verifier_error"  # the verifier ran and failed (or timed out)
    VERIFIER_MISSING = "verifier_missing"  # the verifier wrote no usable reward
    REWARD_INVALID = "reward_invalid"  # rewards exist, but the key to train on is unusable
    ENGINE_ERROR = "engine_error"  # the engine failed the agent's calls
    CAPTURE_INVALID = "capture_invalid"  # a FATAL validation finding
    NO_MODEL_CALLS = "no_model_calls"  # an agent that needs a model never called it
    DEADLINE = "deadline"  # the rollout's overall deadline passed
    CANCELLED = "cancelled"  # cancelled by the caller
    INFRA_LOST = "infra_lost"  # the sandbox or the owner (actor, node) died
    INTERNAL = "internal"  # a bug in harbor_ray itself; the message says where


class RanIn(StrEnum):
    """Where a rollout's trial ran, as its row says (`environment`;
    trials/environment_need.py decides it)."""

    IMAGE = "image"  # the task's own image (its digest in `image_digest` when known)
    HOST = "host"  # the host's userland: the task asks for nothing a sandbox builds
    HOST_OVERRIDE = "host_override"  # the host's userland in place of the task's image,
    # because the user asked (--host-userland): its reward is not the task's


class FindingRecord(BaseModel):
    """A finding as stored with the rollout (capture, reward and trial findings alike)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    code: str
    severity: str = Field(description="fatal, warn or info (as the capture layer writes it).")
    message: str
    turn: int | None = None

    @classmethod
    def of(cls, finding: Finding) -> FindingRecord:
        """A capture finding as the row stores it."""
        return cls(
            code=finding.code.value,
            severity=finding.severity.value,
            message=finding.message,
            turn=finding.turn,
        )


class Provenance(BaseModel):
    """What a row was made with, beyond its model's name: which weights, tokenizer and
    chat template the engine served, and which harness ran, as hashes a comparison can
    hold side by side (SCHEMA.md, `provenance`). None: not known where the run started
    (a hosted model's files, an engine the run did not start), never a stand-in."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model_source: str | None = Field(
        None,
        description="Where the served weights came from: the model directory or "
        "hub id the engine loaded, or `UPSTREAM:MODEL` for a hosted API.",
    )
    weights_sha256: str | None = Field(
        None, description="sha256 of the model directory's weight files (names and bytes)."
    )
    chat_template_sha256: str | None = Field(
        None, description="sha256 of the chat template the engine renders prompts with."
    )
    tokenizer_sha256: str | None = Field(
        None,
        description="sha256 of the tokenizer files the engine loads (their chat "
        "template aside: that is `chat_template_sha256`).",
    )
    harness_version: str | None = Field(
        None, description="The agent's release: its pinned CLI's, else Harbor's."
    )
    harness_config_sha256: str | None = Field(
        None,
        description="sha256 of the agent's configuration as run (its name, dialect "
        "and keyword arguments).",
    )

    @classmethod
    def hosted(cls, upstream: str, model: str) -> Provenance:
        """A hosted API's model: its name is all a run can know of its files."""
        return cls(model_source=f"{upstream}:{model}")

    @classmethod
    def served(cls, upstream: str, model: str, engine: Provenance | None) -> Provenance | None:
        """The engine's half of a run's rows, once its model is certified: `engine` (what
        the run's own engine serves; None: unknown) behind an OpenAI-compatible engine
        (`openai-chat`), and a hosted API's model name behind any other upstream."""
        return engine if upstream == "openai-chat" else cls.hosted(upstream, model)

    def with_engine(self, engine: Provenance | None) -> Provenance:
        """This record with the engine's fields of `engine` (None: unknown)."""
        engine = engine or Provenance()
        return self.model_copy(update={name: getattr(engine, name) for name in ENGINE_FIELDS})

    def without_weights(self) -> Provenance:
        """This record less the fields that name the weights (`WEIGHTS_FIELDS`): for a
        row that other weights than the engine's first sampled (an online service's,
        after a weight update); its tokenizer and chat template stay the engine's."""
        return self.model_copy(update=dict.fromkeys(WEIGHTS_FIELDS))


ENGINE_FIELDS = ("model_source", "weights_sha256", "chat_template_sha256", "tokenizer_sha256")
"""The fields of a `Provenance` the engine decides; the rest are the harness's."""
WEIGHTS_FIELDS = ("model_source", "weights_sha256")
"""The engine's fields a weight update changes; its tokenizer and template it keeps."""


class RolloutResult(BaseModel):
    """One rollout, as the driver, the JSON-lines output and the dataset see it."""

    model_config = ConfigDict(extra="forbid")

    rollout_id: str
    task: str
    attempt: int = 0
    agent: str
    sandbox: str
    model: str | None = Field(None, description="Served model id; None for agents without one.")
    ok: bool = Field(
        description="No error, no fatal finding. Usable for training when "
        "also captured at the `tokens` level (`trainable`)."
    )
    reward: float | None = Field(description="The chosen scalar; None: the verifier never ran.")
    reward_key: str | None = None
    rewards: dict[str, float] = Field(
        default_factory=dict, description="Every usable reward key, as the verifier wrote it."
    )
    error_type: ErrorType | None = None
    error: str | None = None
    findings: list[FindingRecord] = Field(default_factory=list)
    counts: CaptureCounts | None = Field(
        None, description="The capture's counts; None without a capture (unknown, not 0)."
    )
    model_calls: int = 0
    timings: dict[str, float] = Field(
        default_factory=dict, description="Seconds per phase (environment, agent, verifier...)."
    )
    trial_dir: str | None = None
    # Where the rollout ran: sandboxes and trial directories are node-local, so a row's
    # `trial_dir` is a path on `node`. None: it never reached a host.
    node: str | None = Field(None, description="The IP address of the Ray node that ran it.")
    host: str | None = Field(None, description="The rollout host (actor) that ran it.")
    capture_level: CaptureLevel | None = Field(
        None,
        description="What its model calls recorded (`tokens`, `logprobs`, `text`); "
        "None without a capture.",
    )
    environment: RanIn | None = Field(
        None,
        description="Where the trial ran: `image` (the task's own), `host` (the "
        "host's userland; the task asks for nothing a sandbox builds) or `host_override` "
        "(the host's userland in place of the task's image, asked for by --host-userland); "
        "None when no trial started.",
    )
    image_digest: str | None = Field(
        None,
        description="The id (sha256:...) of the image the trial ran in, when the "
        "sandbox knows it (the container sandbox does).",
    )
    provenance: Provenance | None = Field(
        None,
        description="What the row was made with (weights, tokenizer, chat template, "
        "harness); None when nothing recorded it.",
    )
    partial: bool = Field(
        False,
        description="Rebuilt from its host's journal after the "
        "host died: the turns recorded before; never ok.",
    )
    train_partial: bool = Field(
        False,
        description="A partial row the run asked to keep "
        "trainable (`--train-partial`); not a column of its own.",
    )

    # A field of every dump, so that `harbor-ray rollout`'s results.jsonl says what the
    # dataset's rollouts/ column says (an evaluation's row: false, never absent).
    @computed_field  # type: ignore[prop-decorator]
    @property
    def trainable(self) -> bool:
        """Ok (or partial, when the run asked to train on those), and nothing in it was
        captured below the `tokens` level (an evaluation)."""
        usable = self.ok or (self.partial and self.train_partial)
        return usable and self.capture_level in (None, "tokens")


def describe_bug(exc: BaseException) -> str:
    """An `internal` row's error: the exception's type, its first line (or that it had
    none), and where it was raised when its traceback is at hand (the innermost frame),
    so that every such row names its cause."""
    text = str(exc).strip()
    what = (
        f"{type(exc).__name__}: {text.splitlines()[0]}"
        if text
        else (f"{type(exc).__name__} (no message)")
    )
    frames = traceback.extract_tb(exc.__traceback__)
    if not frames:
        return what
    where = frames[-1]
    filename = where.filename.rsplit("/harbor_ray/", 1)[-1]
    return f"{what} (at {filename}:{where.lineno} in {where.name})"
