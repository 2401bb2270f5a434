"""Runs started from the page, through the same code as `harbor-ray rollout`
(`jobs.rollouts.run_rollouts`), in this process: each run on a worker thread of its own
(it runs its own event loop, as the command does), at most `max_runs` at once; the
others wait their turn as `starting`, at most `max_queued` of them (a form past those is
a 429). A visitor's engine is checked and certified first (`VisitorEngines`). Each
model call reaches the run board as the
capture proxy records it (`run_rollouts`' `on_turn`), and each rollout's outcome (its
reward and the verifier's output) as it lands; a run that fails is recorded on the
board, never raised into the server. A run whose form names a dataset also commits each
rollout to it as it lands (`DatasetSink`).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from harbor_ray.capture.core.turn import TurnRecord
from harbor_ray.capture.proxy.certify import Certification
from harbor_ray.capture.proxy.session import TurnListener
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.errors import PlaygroundRefusal, UnknownAgentError
from harbor_ray.jobs.rollouts import RolloutRequest, run_rollouts
from harbor_ray.playground.catalog import Catalog
from harbor_ray.playground.dataset_sink import DatasetSink
from harbor_ray.playground.form import RunForm
from harbor_ray.playground.outcome import all_errored, outcome_view
from harbor_ray.playground.runs import Run, RunBoard, StageMark
from harbor_ray.playground.visitor_engine import VisitorEngines
from harbor_ray.trials.agents import AgentAllowList
from harbor_ray.trials.stages import Stage, StageListener

__all__ = ["MAX_QUEUED", "MAX_RUNS", "Launcher", "Rollouts", "allowed_agents"]

MAX_RUNS = 2  # runs at once (--max-runs)
MAX_QUEUED = 8  # runs waiting for one of those slots (--max-queued); past it, 429


def allowed_agents(import_paths: tuple[str, ...] = ()) -> AgentAllowList:
    """The agents a form may name: the Harbor agents, and the import paths given at
    start (`--allow-agent`); a bad one raises `UnknownAgentError` then."""
    return AgentAllowList(import_paths, named_in="given with --allow-agent")


class Rollouts(Protocol):
    """`run_rollouts`' shape: what a launcher calls to run a request."""

    def __call__(
        self,
        request: RolloutRequest,
        *,
        on_planned: Callable[[int], None] | None = ...,
        on_result: Callable[[RolloutRecord], None] | None = ...,
        on_turn: TurnListener | None = ...,
        on_stage: StageListener | None = ...,
    ) -> list[RolloutRecord]: ...


class Launcher:
    """Starts the runs visitors ask for. `llm_url`: the server's engine (None: agents
    that call a model need a visitor's); `out`: where each run writes results.jsonl
    (OUT/<run id>/); `datasets`: where runs may write datasets; `agents`: the agents a
    form may name."""

    def __init__(
        self,
        board: RunBoard,
        catalog: Catalog,
        *,
        out: Path,
        llm_url: str | None,
        max_runs: int = MAX_RUNS,
        max_queued: int = MAX_QUEUED,
        datasets: DatasetSink | None = None,
        agents: AgentAllowList | None = None,
        rollouts: Rollouts = run_rollouts,
        engines: VisitorEngines | None = None,
    ) -> None:
        self.board = board
        self.catalog = catalog
        self.out = out
        self.llm_url = llm_url
        self.datasets = datasets or DatasetSink(None)
        self.agents = agents or allowed_agents()
        self.engines = engines or VisitorEngines()
        self._rollouts = rollouts
        self._slots = asyncio.Semaphore(max_runs)
        self._max_queued = max_queued
        self._most_open = max_runs + max_queued
        self._open = 0  # runs accepted (or being checked) that have not ended
        self._running: set[asyncio.Task[None]] = set()

    async def start(self, visitor: str, form: RunForm) -> Run:
        """Check the form against what is served, then start its run; refused forms
        start nothing."""
        self.catalog.task(form.dataset, form.task)
        try:
            self.agents.check(form.agent)
        except UnknownAgentError as exc:
            raise PlaygroundRefusal(str(exc)) from exc
        if form.write_to is not None:
            self.datasets.directory(form.write_to)
        self._take_place()  # before certifying: a certification holds its place
        try:
            run, request = await self._planned(visitor, form)
        except BaseException:
            self._open -= 1
            raise
        self.board.add(run)
        task = asyncio.create_task(self._run(run, request))
        self._running.add(task)
        task.add_done_callback(self._running.discard)
        return run

    async def _planned(self, visitor: str, form: RunForm) -> tuple[Run, RolloutRequest]:
        """The run a form asks for, and the request that runs it (its engine certified
        first when it is the visitor's)."""
        llm_url, certified = await self._engine(form)
        run = Run(
            id=secrets.token_hex(6),
            owner=visitor,
            agent=form.agent,
            dataset=form.dataset,
            tasks=(form.task,),
            engine=form.engine,
            started_at=_now(),
            writes_to=form.write_to,
            stages=(StageMark("queued", time.time()),),
            settings=form.settings(certified.served_model if certified else None),
        )
        request = RolloutRequest(
            agent=form.agent,
            dataset=form.dataset,
            tasks=[form.task],
            llm_url=llm_url,
            attempts=form.attempts,
            budget=form.budget,
            temperature=form.temperature,
            max_tokens=form.max_tokens,
            out=self.out / run.id,
            certified=certified,
        )
        return run, request

    def _take_place(self) -> None:
        """Take a place among the open runs (running, or waiting for a slot), or refuse
        (429) when the slots and the queue are full: each form otherwise holds a run,
        and its certification, for as long as the slots are busy, however many come."""
        if self._open >= self._most_open:
            raise PlaygroundRefusal(
                f"every slot is running and {self._max_queued} runs are waiting already, "
                "the most this playground queues (--max-queued): start this one when "
                "one of them has ended",
                status=429,
            )
        self._open += 1

    @contextlib.asynccontextmanager
    async def _slot(self) -> AsyncIterator[None]:
        """A run's turn at a slot; its place is given back when it ends (or is
        cancelled waiting)."""
        try:
            async with self._slots:
                yield
        finally:
            self._open -= 1

    async def aclose(self) -> None:
        for task in self._running:
            task.cancel()
        await asyncio.gather(*self._running, return_exceptions=True)

    async def _engine(self, form: RunForm) -> tuple[str | None, Certification | None]:
        """The engine's URL, and its certification when made here: a visitor's engine
        is certified before the run starts, to refuse it early, and the run takes that
        certification rather than certifying again."""
        if form.engine == "server":
            return self.llm_url, None
        if not form.llm_url:
            raise PlaygroundRefusal("llm_url: engine=visitor needs one", status=400)
        return form.llm_url, await self.engines.certified(form.llm_url)

    async def _run(self, run: Run, request: RolloutRequest) -> None:
        loop = asyncio.get_running_loop()

        def planned(count: int) -> None:
            loop.call_soon_threadsafe(lambda: self.board.update(run.id, planned=count))

        def turn(session_id: str, record: TurnRecord) -> None:
            loop.call_soon_threadsafe(self.board.called, run.id, session_id, record)

        def staged(rollout_id: str, stage: Stage) -> None:
            mark = StageMark(stage.value, time.time(), rollout_id)
            loop.call_soon_threadsafe(self.board.staged, run.id, mark)

        def landed(record: RolloutRecord) -> None:
            if run.writes_to is not None:
                self.datasets.write(run.writes_to, record, _manifest(run), ended_at=_now())
            outcome = _outcome(record)
            loop.call_soon_threadsafe(lambda: self.board.landed(run.id, outcome))

        async with self._slot():
            self.board.update(run.id, status="running")
            self.board.staged(run.id, StageMark("preparing", time.time()))
            try:
                await asyncio.to_thread(
                    self._rollouts,
                    request,
                    on_planned=planned,
                    on_result=landed,
                    on_turn=turn,
                    on_stage=staged,
                )
            except Exception as exc:  # a failed run is data on the board, not a crash
                self._ended(run, "failed", f"{type(exc).__name__}: {exc}")
            else:
                # Read on the loop, after every landing and stage queued before it.
                error = all_errored(self.board.get(run.owner, run.id).rollouts)
                self._ended(run, "done" if error is None else "failed", error)

    def _ended(self, run: Run, status: Literal["done", "failed"], error: str | None) -> None:
        self.board.update(run.id, status=status, error=error, ended_at=_now())
        self.board.staged(run.id, StageMark(status, time.time()))


_VERIFIER_OUTPUT = ("verifier", "test-stdout.txt")  # in a Harbor trial directory
_VERIFIER_TAIL = 16 * 1024


def _outcome(record: RolloutRecord) -> dict[str, Any]:
    reasons = record.turns.column("finish_reason").to_pylist() if record.turns.num_rows else []
    return outcome_view(record.result, reasons, _verifier_output(record.result.trial_dir))


def _verifier_output(trial_dir: str | None) -> str | None:
    """The end of what the verifier printed (the last 16 KiB), None when it printed
    nothing readable."""
    if trial_dir is None:
        return None
    try:
        data = Path(trial_dir, *_VERIFIER_OUTPUT).read_bytes()
    except OSError:
        return None
    return data[-_VERIFIER_TAIL:].decode(errors="replace")


def _manifest(run: Run) -> dict[str, Any]:
    """What a dataset's manifest says made its rows (the run, not the visitor)."""
    return {
        "playground": {
            "run": run.id,
            "agent": run.agent,
            "dataset": run.dataset,
            "tasks": list(run.tasks),
        },
        "started_at": run.started_at,
    }


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")
