"""Rollouts end to end in this process (`harbor-ray rollout`): no Ray, no server. Each
finished rollout is appended to OUT/results.jsonl as it lands: its row, and the capture's
export document under `capture`. The engine's certification goes to OUT/engine.json."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import orjson

from harbor_ray.capture.proxy.certify import Certification
from harbor_ray.capture.proxy.hosted import build_upstream, read_key
from harbor_ray.capture.proxy.local import local_capture
from harbor_ray.capture.proxy.session import TurnListener
from harbor_ray.data.encode import RolloutRecord
from harbor_ray.data.rebuild import export_document
from harbor_ray.data.result import Provenance
from harbor_ray.errors import EnvironmentUnsupportedError, StartError
from harbor_ray.jobs.engine import started_engine
from harbor_ray.jobs.interrupts import run_until_signalled
from harbor_ray.jobs.runs import (
    CheckedStart,
    Progress,
    RunRequest,
    checked_start,
    silent,
    specs_of,
)
from harbor_ray.trials.local_run import run_many
from harbor_ray.trials.spec import RolloutSpec
from harbor_ray.trials.stages import StageListener

__all__ = ["ENGINE", "RESULTS", "RolloutRequest", "check_rollouts", "run_rollouts"]

RESULTS = "results.jsonl"
ENGINE = "engine.json"


@dataclass(frozen=True)
class RolloutRequest(RunRequest):
    """What to run in this process; the fields are `harbor-ray rollout`'s flags."""

    concurrency: int = 1
    out: Path = Path("rollouts")  # results.jsonl and trials/
    # The engine's certification, when the caller made it already (the playground, to
    # refuse a visitor's engine early); None: certified here.
    certified: Certification | None = None

    @property
    def results_path(self) -> Path:
        return self.out.resolve() / RESULTS


def check_rollouts(request: RolloutRequest, progress: Progress = silent) -> CheckedStart:
    """What `run_rollouts` checks before starting anything: `checked_start`, and a task
    the sandbox cannot give its environment refuses the whole run (a sweep makes such
    rows instead and goes on with the other tasks; here one process gives one answer,
    and a rollout whose reward would not be the task's is not one to give)."""
    checked = checked_start(request, progress)
    if checked.refused:
        raise EnvironmentUnsupportedError("\n".join(checked.refused))
    return checked


def run_rollouts(
    request: RolloutRequest,
    *,
    progress: Progress = silent,
    on_planned: Callable[[int], None] | None = None,
    on_result: Callable[[RolloutRecord], None] | None = None,
    on_turn: TurnListener | None = None,
    on_stage: StageListener | None = None,
    checked: CheckedStart | None = None,
) -> list[RolloutRecord]:
    """Run the request's rollouts, in spec order. `on_planned` hears how many there are
    before the first starts, `on_result` each one as it finishes (after its line is
    written), `on_turn` each model call as the proxy records it (session id, turn; on
    the rollouts' event loop, so it must not block), `on_stage` each stage each trial
    reaches (rollout id, `Stage`; on that loop too). A request that cannot work raises
    before anything starts; `checked`: its `checked_start`, when the caller made it
    already."""
    if request.concurrency < 1:
        raise StartError("--concurrency must be at least 1")
    checked = checked or check_rollouts(request, progress)
    specs = specs_of(request, checked.tasks, trials_dir=request.out.resolve() / "trials")
    if on_planned is not None:
        on_planned(len(specs))
    engine = request.engine if checked.wants_model else None
    with started_engine(engine, None, progress) as started:
        url = started.url if started else request.llm_url
        served = started.provenance if started else None
        return run_until_signalled(
            _run(specs, url, request, on_result, checked.wants_model, on_turn, on_stage, served)
        )


async def _run(
    specs: Sequence[RolloutSpec],
    llm_url: str | None,
    request: RolloutRequest,
    on_result: Callable[[RolloutRecord], None] | None,
    wants_model: bool,
    on_turn: TurnListener | None,
    on_stage: StageListener | None,
    served: Provenance | None,
) -> list[RolloutRecord]:
    """`served`: what the engine started for the job serves (None: none started)."""
    request.results_path.parent.mkdir(parents=True, exist_ok=True)
    with request.results_path.open("a") as sink:

        def done(record: RolloutRecord) -> None:
            row = record.result.model_dump(mode="json")
            sink.write(orjson.dumps({**row, "capture": export_document(record)}).decode() + "\n")
            sink.flush()
            if on_result is not None:
                on_result(record)

        if not wants_model:
            return await run_many(
                specs, None, concurrency=request.concurrency, on_result=done, on_stage=on_stage
            )
        engine = build_upstream(
            request.upstream,
            llm_url,
            key=read_key(request.upstream_key_file),
            timeout_s=request.engine_timeout_s,
        )
        try:
            async with local_capture(
                engine,
                engine.root,
                model=request.model,
                stitch=request.stitch,
                capture=request.capture,
                engine_kind=request.engine_kind,
                certified=request.certified,
                on_turn=on_turn,
            ) as capture:
                if capture.certification is not None:
                    (request.out.resolve() / ENGINE).write_text(
                        capture.certification.model_dump_json(indent=2) + "\n"
                    )
                    served = Provenance.served(
                        request.upstream, capture.certification.served_model, served
                    )
                specs = [_with_engine(spec, served) for spec in specs]
                return await run_many(
                    specs,
                    capture,
                    concurrency=request.concurrency,
                    on_result=done,
                    on_stage=on_stage,
                )
        finally:
            await engine.aclose()


def _with_engine(spec: RolloutSpec, served: Provenance | None) -> RolloutSpec:
    """`spec` with the engine's half of its rows' provenance, known once it is certified."""
    if spec.provenance is None:
        return spec
    return dataclasses.replace(spec, provenance=spec.provenance.with_engine(served))
