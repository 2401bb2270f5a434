"""The runs visitors started from the playground: who started each, its status, its
model calls as they are recorded and each rollout's outcome as it lands. Plain state,
no I/O: the launcher writes it, the app reads it, and every read names its visitor.

A visitor sees only its own runs unless the server shares them (`--share-runs`); a run
it may not see is answered exactly as one that does not exist.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Literal

from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.errors import PlaygroundRefusal
from harbor_ray.playground.calls import RunCalls, TokenPieces

__all__ = ["Run", "RunBoard", "RunStatus", "StageMark"]

RunStatus = Literal["starting", "running", "done", "failed"]


@dataclass(frozen=True)
class StageMark:
    """A stage the run reached, and when (seconds since the epoch): the run's own
    (`queued` for a slot, `preparing`: the task checked and the engine certified, then
    `done` or `failed`) or a rollout's trial's (`trials.stages.Stage`, with its id)."""

    stage: str
    at: float
    rollout: str | None = None


@dataclass(frozen=True)
class Run:
    """One run: an agent on some tasks of a served dataset."""

    id: str
    owner: str
    agent: str
    dataset: str
    tasks: tuple[str, ...]
    engine: str  # "server" or "visitor": never the URL, which may carry a credential
    started_at: str
    status: RunStatus = "starting"
    planned: int = 0
    rollouts: tuple[dict[str, Any], ...] = ()
    error: str | None = None
    writes_to: str | None = None  # the dataset name its rollouts are committed to
    calls: int = 0  # model calls recorded so far
    # Model, engine, agent, sampling, budget and attempts (`RunForm.settings`); the model
    # filled in from the first call when the server's engine names it.
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    ended_at: str | None = None
    stages: tuple[StageMark, ...] = ()  # in the order reached; the last is where it is

    @property
    def reward(self) -> float | None:
        """The mean reward of its rollouts that have one."""
        rewards = [r["reward"] for r in self.rollouts if r["reward"] is not None]
        return sum(rewards) / len(rewards) if rewards else None

    def view(self) -> dict[str, Any]:
        return {
            **{k: v for k, v in dataclasses.asdict(self).items() if k != "owner"},
            "reward": self.reward,
        }


class RunBoard:
    """Every run of this server, by id, in the order started."""

    def __init__(self, *, share: bool = False, token_pieces: TokenPieces | None = None) -> None:
        self.share = share
        self._token_pieces = token_pieces
        self._runs: dict[str, Run] = {}
        self._calls: dict[str, RunCalls] = {}

    def add(self, run: Run) -> None:
        self._runs[run.id] = run
        self._calls[run.id] = RunCalls(self._token_pieces)

    def called(self, run_id: str, session_id: str, turn: TurnRecord) -> None:
        """A model call of the run was recorded."""
        calls = self._calls[run_id]
        calls.add(session_id, turn)
        self.update(
            run_id, calls=len(calls), settings=self._model_known(run_id, turn.request_model)
        )

    def _model_known(self, run_id: str, model: str | None) -> dict[str, Any]:
        """The run's settings, with `model` as its model when none was known (the
        server's engine names it only in its calls and results)."""
        settings = self._runs[run_id].settings
        if settings.get("model") is None and model:
            return {**settings, "model": model}
        return settings

    def update(self, run_id: str, **changes: Any) -> None:
        self._runs[run_id] = dataclasses.replace(self._runs[run_id], **changes)

    def staged(self, run_id: str, mark: StageMark) -> None:
        """The run, or one of its rollouts, reached a stage."""
        self.update(run_id, stages=(*self._runs[run_id].stages, mark))

    def landed(self, run_id: str, rollout: dict[str, Any]) -> None:
        run = self._runs[run_id]
        self.update(
            run_id,
            rollouts=(*run.rollouts, rollout),
            settings=self._model_known(run_id, rollout.get("model")),
        )

    def visible(self, visitor: str) -> list[Run]:
        return [run for run in self._runs.values() if self.share or run.owner == visitor]

    def get(self, visitor: str, run_id: str) -> Run:
        run = self._runs.get(run_id)
        if run is None or not (self.share or run.owner == visitor):
            raise PlaygroundRefusal("no such run")
        return run

    def calls(
        self, visitor: str, run_id: str, cursor: int
    ) -> tuple[Run, list[dict[str, Any]], int]:
        """(the run, its calls from `cursor` on, the cursor after them), for a visitor
        who may see the run."""
        run = self.get(visitor, run_id)
        found, after = self._calls[run_id].after(cursor)
        return run, found, after
