"""The adaptive in-flight cap against a fixed one, on an engine that slows under load.

The online controller runs in this process (no Ray, no hosts) on `PressureRollouts`:
each rollout makes --turns model calls to a `PressureEngine` stand-in that decodes
--engine-capacity calls at full speed and, past that, preempts and slows every call with
the square of its overload (a real engine recomputing preempted requests). The stand-in
serves its load as vLLM's `/metrics` over loopback, which the adaptive cap reads.

Each run finishes --rollouts rollouts: once with the cap fixed at --cap, once adaptive
(starting at --cap, between --floor and --cap). It prints rollouts/min for each, the
adaptive/fixed ratio, the preemptions, and the adaptive cap's range. Figures:
docs/performance.md.

    .venv/bin/python scripts/bench_admission.py [--rollouts 600] [--cap 64]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from harbor_ray.online.controller import Controller, ControllerConfig  # noqa: E402
from harbor_ray.online.weights import FakeWeightUpdater  # noqa: E402
from harbor_ray.online.wire import SubmitRequest  # noqa: E402
from tests.fixtures.pressure_engine import PressureEngine, PressureRollouts  # noqa: E402
from tests.fixtures.threaded import serve_in_thread  # noqa: E402


async def one_run(
    args: argparse.Namespace, adaptive: bool, metrics: str, engine: PressureEngine
) -> tuple[float, int, tuple[int, int]]:
    """Rollouts/min, preemptions, and the lowest and highest cap seen."""
    engine.preemptions = 0
    with tempfile.TemporaryDirectory() as work:
        controller = Controller(
            ControllerConfig(
                work_dir=Path(work),
                concurrency=args.cap,
                capacity=args.rollouts,
                min_concurrency=args.floor,
                max_concurrency=args.cap if adaptive else None,
                engine_metrics=(metrics,) if adaptive else (),
                metrics_every_s=args.metrics_every,
            ),
            FakeWeightUpdater(("engine-0",)),
            runner=PressureRollouts(engine, args.turns),
        )
        started = time.perf_counter()
        await controller.submit(
            SubmitRequest.model_validate(
                {
                    "request_id": "bench",
                    "tasks": [{"task": "hello-file", "n": args.rollouts}],
                    "agent": "terminus-2",
                }
            )
        )
        low = high = args.cap
        while (stats := await controller.stats()).finished < args.rollouts:
            low, high = min(low, stats.concurrency_limit), max(high, stats.concurrency_limit)
            await asyncio.sleep(0.01)
        seconds = time.perf_counter() - started
        controller.shutdown()
    return 60 * args.rollouts / seconds, engine.preemptions, (low, high)


async def main(args: argparse.Namespace) -> None:
    engine = PressureEngine(args.engine_capacity, args.turn_s)
    with serve_in_thread(engine.app()) as url:
        fixed, fixed_pre, _ = await one_run(args, False, f"{url}/metrics", engine)
        adaptive, adaptive_pre, (low, high) = await one_run(args, True, f"{url}/metrics", engine)
    print(f"fixed cap {args.cap}: {fixed:.0f} rollouts/min, {fixed_pre} preemptions")
    print(
        f"adaptive cap {args.floor}..{args.cap} (seen {low}..{high}): {adaptive:.0f} "
        f"rollouts/min, {adaptive_pre} preemptions"
    )
    print(f"adaptive / fixed: {adaptive / fixed:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=600)
    parser.add_argument(
        "--cap", type=int, default=64, help="the fixed cap, the adaptive one's start and ceiling"
    )
    parser.add_argument("--floor", type=int, default=4, help="the adaptive cap's floor")
    parser.add_argument("--turns", type=int, default=5, help="model calls a rollout")
    parser.add_argument(
        "--engine-capacity", type=int, default=16, help="calls the stand-in decodes at full speed"
    )
    parser.add_argument("--turn-s", type=float, default=0.02, help="a call at full speed")
    parser.add_argument(
        "--metrics-every",
        type=float,
        default=0.05,
        help="seconds between reads of the stand-in's /metrics",
    )
    asyncio.run(main(parser.parse_args()))
