"""A playground served over loopback from a thread, its runs going through a stand-in
for `run_rollouts` (same call, same callbacks, model calls included): no sandbox or
engine is started."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import numpy as np
import orjson
import uvicorn

from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.certify import Certification
from harbor_ray.capture.proxy.session import TurnListener
from harbor_ray.capture.proxy.upstream import api_root
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.errors import CertificationError
from harbor_ray.jobs.rollouts import RolloutRequest
from harbor_ray.playground.access import Access
from harbor_ray.playground.app import Playground, build_playground_app
from harbor_ray.playground.calls import TokenPieces
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.dataset_sink import DatasetSink
from harbor_ray.playground.launch import Launcher, Rollouts, allowed_agents
from harbor_ray.playground.runs import RunBoard
from harbor_ray.playground.visitor_engine import VisitorEngines
from harbor_ray.trials.stages import Stage, StageListener
from tests.data.rollouts import rollout
from tests.fixtures.threaded import serve_in_thread

KEY = "the-playground-key-0123456789"
ENGINE = "http://trainer:s3cret-token@engine.internal:8000"


def agent_turn(
    index: int, *, tokens: int = 6, system: str = "You are terminus.", command: str = "step"
) -> TurnRecord:
    """Call `index` of an agent loop as the proxy records it: the conversation so far
    (the task, then each earlier reply and its tool's output), a reply calling a tool,
    ids with logprobs, usage and times."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": system},
        {"role": "user", "content": "Create hello.txt."},
    ]
    for earlier in range(index):
        messages += [
            _reply(earlier, command),
            {"role": "tool", "tool_call_id": f"call-{earlier}", "content": f"$ step {earlier}\nok"},
        ]
    ids = np.arange(100 * index, 100 * index + tokens, dtype=np.int32)
    return TurnRecord(
        index=index,
        dialect="chat",
        prompt_ids=np.arange(20 + index, dtype=np.int32),
        token_ids=ids,
        logprobs=np.linspace(-2, 0, tokens, dtype=np.float32),
        finish_reason="tool_calls",
        request_messages_json=orjson.dumps(messages),
        response_message_json=orjson.dumps({**_reply(index, command), **ENGINE_NULLS}),
        request_model="test-model",
        started_at=10.0 * index,
        ended_at=10.0 * index + 0.25,
        prompt_tokens=20 + index,
        completion_tokens=tokens,
    )


# The null fields a vLLM reply carries, which terminus-2 drops when it sends the reply back.
ENGINE_NULLS: dict[str, Any] = {
    "annotations": None,
    "audio": None,
    "function_call": None,
    "reasoning": None,
    "reasoning_content": None,
    "refusal": None,
}


def _reply(index: int, command: str = "step") -> dict[str, Any]:
    arguments = orjson.dumps({"cmd": f"{command} {index}"}).decode()
    return {
        "role": "assistant",
        "content": f"Step {index}: I run a command.",
        "tool_calls": [
            {
                "id": f"call-{index}",
                "type": "function",
                "function": {"name": "bash", "arguments": arguments},
            }
        ],
    }


# `info`'s agents as the Setup tab and the form get them: one not wired first, as
# `info` sorts them (acp), so the form's default cannot be the first listed.
SETUP_AGENTS = [
    {
        "agent": "acp",
        "runs": "sandbox",
        "needs_model": True,
        "dialect": None,
        "wired": False,
        "note": "not wired to the capture proxy: it reaches its model its own way",
    },
    {
        "agent": "oracle",
        "runs": "host",
        "needs_model": False,
        "dialect": None,
        "wired": True,
        "note": "",
    },
    {
        "agent": "terminus-2",
        "runs": "sandbox",
        "needs_model": True,
        "dialect": "chat",
        "wired": True,
        "note": "",
    },
]


class FakeRollouts:
    """`run_rollouts`' stand-in: plans the request's attempts; in each, reaches the
    trial's stages up to the agent running, records its first model call (`calls` of
    them, `agent_turn`'s), then holds until `release` is set (or `hold_s` passed),
    records the rest, reaches the verifier and the end, and lands the rollout (its turns those
    calls, `reward`, `trial_dir` its trial directory, and the fields of `landing`); or
    raises `fail`."""

    def __init__(
        self,
        fail: Exception | None = None,
        *,
        calls: int = 0,
        tokens: int = 6,
        hold_s: float = 10,
        trial_dir: Path | None = None,
        reward: float = 0.5,
        landing: dict[str, Any] | None = None,
        system: str = "You are terminus.",
        command_of: Callable[[RolloutRequest], str] | None = None,
    ) -> None:
        self.requests: list[RolloutRequest] = []
        self.release = threading.Event()
        self.release.set()
        self.fail = fail
        self.calls = calls
        self.tokens = tokens
        self.hold_s = hold_s
        self.trial_dir = trial_dir  # each rollout's, when given
        self.reward = reward
        self.landing = landing or {}  # more fields of each landed rollout's result
        self.system = system  # each call's system prompt
        self.command_of = command_of  # the command each call runs, by request ("step")

    def __call__(
        self,
        request: RolloutRequest,
        *,
        on_planned: Callable[[int], None] | None = None,
        on_result: Callable[[RolloutRecord], None] | None = None,
        on_turn: TurnListener | None = None,
        on_stage: StageListener | None = None,
    ) -> list[RolloutRecord]:
        self.requests.append(request)
        if self.fail is not None:
            raise self.fail
        assert on_planned is not None and on_result is not None and on_turn is not None
        assert on_stage is not None
        on_planned(request.attempts)
        records = []
        for attempt in range(request.attempts):
            for stage in (Stage.SANDBOX, Stage.AGENT_SETUP, Stage.AGENT):
                on_stage(f"r{attempt}", stage)
            command = self.command_of(request) if self.command_of else "step"
            turns = [
                agent_turn(index, tokens=self.tokens, system=self.system, command=command)
                for index in range(self.calls)
            ]
            for turn in turns:
                on_turn(f"session-{attempt}", turn)
                if turn.index == 0:
                    self.release.wait(self.hold_s)
            self.release.wait(self.hold_s)
            for stage in (Stage.VERIFYING, Stage.ENDED):
                on_stage(f"r{attempt}", stage)
            records.append(
                rollout(
                    f"r{attempt}",
                    turns or None,
                    **{
                        "reward": self.reward,
                        "trial_dir": self.trial_dir and str(self.trial_dir),
                        **self.landing,
                    },
                )
            )
            on_result(records[-1])
        return records


async def refuse(url: str) -> Certification:
    """A certification that refuses every engine."""
    raise CertificationError(f"{url} lists no models")


@contextmanager
def served(
    catalog: Catalog,
    tmp_path: Path,
    *,
    key: str | None = None,
    share: bool = False,
    rollouts: FakeRollouts | None = None,
    datasets_dir: Path | None = None,
    token_pieces: TokenPieces | None = None,
    agents: tuple[str, ...] = (),
    engine: str = ENGINE,
    engines: VisitorEngines | None = None,
    run: Rollouts | None = None,
    **launcher: Any,
) -> Iterator[str]:
    """The playground served over loopback from a thread; yields its URL. `agents`: the
    import paths allowed besides the Harbor agents; `engine`: the server's --llm-url;
    `engines`: how visitors' engines are checked (default: any URL, whose
    certification is refused); `run`: what runs go through when given (`run_rollouts`
    itself), else `rollouts`; `launcher`: the launcher's other options."""

    async def setup() -> dict[str, Any]:
        root = api_root(engine)
        return {
            "agents": SETUP_AGENTS,
            "installed_agents": [
                {
                    "agent": "claude-code",
                    "package": "@anthropic-ai/claude-code",
                    "version": None,
                    "installed": False,
                }
            ],
            "sandboxes": [
                {"name": "bwrap", "usable": True, "reason": ""},
                {
                    "name": "container",
                    "usable": False,
                    "reason": "no container runtime answered: start dockerd or podman",
                },
            ],
            # The words `harbor-ray info` says of an engine it cannot reach.
            "engine": {
                "certified": False,
                "url": engine,
                "error": (
                    f"cannot list models at {root}/v1/models: engine unreachable at "
                    f"{root}: cannot connect to {urlsplit(root).netloc.rpartition('@')[2]}"
                ),
            },
        }

    launcher = Launcher(
        RunBoard(share=share, token_pieces=token_pieces),
        catalog,
        out=tmp_path,
        llm_url=engine,
        datasets=DatasetSink(datasets_dir),
        rollouts=run or rollouts or FakeRollouts(),
        engines=engines or VisitorEngines(allow_private=True, certify=refuse),
        agents=allowed_agents(agents),
        **launcher,
    )
    playground = Playground(
        catalog=catalog, launcher=launcher, access=Access.create(key), setup=setup
    )
    app = build_playground_app(playground, llm_url=engine)
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    with serve_in_thread(app, config=config) as url:
        yield url


@contextmanager
def client_of(catalog: Catalog, tmp_path: Path, **options: Any) -> Iterator[httpx.Client]:
    """One visitor (a browser: its own cookies) of a playground served for it."""
    with served(catalog, tmp_path, **options) as url, httpx.Client(base_url=url) as client:
        yield client
