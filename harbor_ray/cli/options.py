"""What every command shares: the terminal, the exit codes, the flags declared once, and
the output of a command that starts Ray or an engine (phases on the terminal, the rest in
a log file)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from harbor_ray.capture.core.capture_level import CaptureLevel
from harbor_ray.capture.core.upstream_profile import UpstreamName
from harbor_ray.capture.proxy.engine_adapter import EngineChoice
from harbor_ray.errors import HarborRayError
from harbor_ray.terminal import Phases, Terminal, quiet_output

# soft_wrap: a path or URL is never broken across lines (CI logs are 80 columns wide).
console = Console(stderr=True, soft_wrap=True)

LOG_NAME = Path("logs") / "harbor-ray.log"


class Exit:
    """Exit codes of `harbor-ray rollout`, `sweep` and `qualify`."""

    ALL_OK = 0
    SOME_FAILED = 1
    COULD_NOT_START = 2
    INTERRUPTED = 130  # SIGINT or SIGTERM, as a shell reports a job stopped by Ctrl-C


# Declared once for every command that calls the engine (`proxy`, `rollout`, `sweep`).
EngineTimeoutOption = Annotated[
    float,
    typer.Option(
        "--engine-timeout",
        min=0.001,
        help="Seconds one engine call may take; past it the agent gets a 504 (retryable) and "
        "the call's budget slot is given back.",
    ),
]


VerboseOption = Annotated[
    bool,
    typer.Option(
        "--verbose",
        help="Let Ray's, Serve's and the engine's logs through to the terminal "
        "instead of the log file.",
    ),
]


def log_option(default: str) -> Any:
    return typer.Option(
        "--log-file",
        help=f"Where Ray's, Serve's and the engine's logs go (default: "
        f"{default}); the terminal shows phases, progress and results.",
    )


# Declared once for `info`, `rollout` and `sweep`.
SandboxArgOption = Annotated[
    list[str] | None,
    typer.Option(
        "--sandbox-arg",
        metavar="KEY=VALUE",
        help="A constructor argument of the sandbox backend (repeatable), e.g. "
        "region=us-east-1 for ec2; a VALUE that is JSON is read as JSON. "
        "`harbor-ray info` names the ones a backend requires.",
    ),
]
AgentsCacheOption = Annotated[
    Path | None,
    typer.Option(
        "--agents-cache",
        help="The agent CLI cache (default: ~/.cache/harbor_ray/agents); made by "
        "`harbor-ray agents install`.",
    ),
]
DatasetsCacheOption = Annotated[
    Path | None,
    typer.Option(
        "--datasets-cache",
        help="The cache of hf:// and harbor:// datasets (default: "
        "~/.cache/harbor_ray/datasets); filled by `harbor-ray datasets prefetch`.",
    ),
]
StitchOption = Annotated[
    bool,
    typer.Option(
        "--stitch/--no-stitch",
        help="A call that continues a conversation the proxy answered gets the earlier "
        "prompt + sampled ids + the engine's rendering of what was added as its prompt, "
        "so the conversation stays one trajectory (needs the engine's /tokenize). "
        "--no-stitch: the engine renders every prompt from the messages.",
    ),
]
EngineKindOption = Annotated[
    EngineChoice,
    typer.Option(
        "--engine-kind",
        help="Which engine the URL is: vllm, sglang (reached through the proxy's SGLang "
        "adapter; no stitched prompts there), or auto (found from what the server "
        "answers). The certification records it.",
    ),
]
CaptureOption = Annotated[
    CaptureLevel,
    typer.Option(
        "--capture",
        help="What each model call records. `tokens`: prompt and sampled ids and logprobs, "
        "for training (the engine must return ids: vLLM). `logprobs`: logprobs, no ids; "
        "`text`: the conversation, tool calls, finish reasons and usage only. Below "
        "`tokens` the run is an evaluation: rows are never trainable, nothing is "
        "stitched, and an engine is accepted at that level or above. An engine below "
        "the level asked for is refused (exit 2).",
    ),
]

# Declared once for `rollout`, `sweep` and `qualify`.
TaskOption = Annotated[
    list[str] | None, typer.Option(help="Run only these tasks (repeatable). Default: every task.")
]
LlmUrlOption = Annotated[
    str | None,
    typer.Option(help="Engine base URL. Agents that call a model need it or --engine; no default."),
]
UpstreamOption = Annotated[
    UpstreamName,
    typer.Option(
        "--upstream",
        help="The API model calls are forwarded to. `openai-chat`: an OpenAI-compatible chat "
        "completions server (vLLM, SGLang); the only one that returns token ids, so the "
        "only one training can use. For evaluation (--capture text): `openai-responses` "
        "(the Responses API), `anthropic` (Messages), `google` (generateContent), `hf` (a "
        "Hugging Face inference provider's OpenAI chat). A request in the upstream's own "
        "format goes as sent; another is converted, and what the conversion cannot keep "
        "is refused (docs/evaluation.md). Hosted profiles default --llm-url to the "
        "provider's API.",
        show_default=True,
    ),
]
UpstreamKeyFileOption = Annotated[
    Path | None,
    typer.Option(
        "--upstream-key-file",
        help="A file whose first line is the upstream's API key, sent only to the upstream "
        "(as its profile's header); never logged, recorded or given to the agent. A "
        "file, not a flag: a key on the command line is visible to every process.",
    ),
]
ModelOption = Annotated[
    str | None, typer.Option(help="Served model id (default: the first one the engine lists).")
]
SandboxOption = Annotated[
    str,
    typer.Option(
        help="Sandbox backend (see `harbor-ray info`): `local` runs a task on this host's "
        "userland, `container` in the task's own image (built with Docker)."
    ),
]
HostUserlandOption = Annotated[
    bool,
    typer.Option(
        "--host-userland",
        help="Run a task that needs its own image (a Dockerfile that installs or copies, a "
        "docker_image) on this host's userland when the sandbox cannot build it. Off: "
        "such a task is refused (`rollout`: exit 2; a sweep: an "
        "environment_unsupported row). Every row it makes says "
        "environment=host_override: its reward is not the task's.",
    ),
]
AttemptsOption = Annotated[int, typer.Option("-n", "--attempts", help="Rollouts per task.")]
BudgetOption = Annotated[int | None, typer.Option(help="Model calls allowed per rollout.")]
TemperatureOption = Annotated[
    float | None, typer.Option(help="Sampling temperature imposed on every model call.")
]
MaxTokensOption = Annotated[int | None, typer.Option(help="Cap on tokens sampled per model call.")]
RewardKeyOption = Annotated[
    str | None, typer.Option(help="Reward key to train on (default: the only key, else `reward`).")
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print the same data as JSON.")]


@contextlib.contextmanager
def command_output(log: Path | None, *, verbose: bool) -> Iterator[Terminal]:
    """`quiet_output` on the command's console; an error leaving it carries the log's
    path as a note, which the CLI prints after the error."""
    with quiet_output(console, log, verbose=verbose) as terminal:
        try:
            yield terminal
        except HarborRayError as exc:
            if terminal.log is not None:
                exc.add_note(f"logs: {terminal.log}")
            raise


def phases_of(terminal: Terminal) -> Phases:
    """The command's phase lines, starting with where its logs go."""
    phases = Phases(terminal.err)
    if terminal.log is not None:
        phases(f"logs: {terminal.log} (--verbose shows them here)")
    return phases


def notice(message: str) -> None:
    """What a check says before the command starts (a task or an agent left out)."""
    console.print(f"[yellow]{message}[/yellow]")


def evaluation_notice(capture: CaptureLevel) -> None:
    """Say so when `--capture` makes the run an evaluation (`rollout`, `sweep`)."""
    if capture != "tokens":
        notice(
            f"--capture {capture}: an evaluation; no row is trainable, and nothing is "
            "stitched (continuing a conversation's prompt needs its token ids)"
        )


def show_log(terminal: Terminal) -> None:
    if terminal.log is not None:
        console.print(f"logs: {terminal.log}")


# Shared by report, view and playground.
TokenizerOption = Annotated[
    str | None,
    typer.Option(
        "--tokenizer",
        metavar="PATH|NAME",
        help="The tokenizer to show token text with: a directory, or a Hugging Face name in "
        "the local cache (nothing is downloaded). Default: the served model's, when it "
        "is on this machine; without one the viewer shows ids and says so. Display "
        "only: the dataset's ids are never re-tokenised.",
    ),
]
