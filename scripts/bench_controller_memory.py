"""The online controller's memory under submit/cancel cycles: its RSS before and after.

The controller runs in this process, on `LocalRollouts` (no Ray, no hosts: what is
measured is the controller's own books), with its configured retention. Each cycle is
what a trainer's submit and cancel do to it: a `POST /v1/rollouts` body validated, the
submit accepted (one group of --group rollouts, with metadata), the rollouts started,
the group cancelled (its rollouts end as cancelled rows). Every --sample cycles the RSS
is read.

It prints the RSS at the start, after the warm-up (--warmup cycles: by then the book
holds as many closed groups and request ids as its retention keeps), after all cycles,
and the largest seen; and exits 1 when the RSS after the warm-up grew by more than
--bound-mib by the end. Figures: docs/performance.md.

    .venv/bin/python scripts/bench_controller_memory.py [--cycles 100000] [--bound-mib 16]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import sys
import tempfile
import time
from pathlib import Path

import orjson
import psutil

# The repo root, for the controller's local stand-in rollouts (tests/online/local.py).
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from harbor_ray.online.controller import Controller, ControllerConfig
from harbor_ray.online.weights import FakeWeightUpdater
from harbor_ray.online.wire import SubmitRequest
from harbor_ray.switches import set_switches
from tests.online.local import LocalRollouts

MIB = 1024 * 1024


def rss_mib() -> float:
    gc.collect()
    return psutil.Process(os.getpid()).memory_info().rss / MIB


async def cycles(controller: Controller, count: int, group: int, sample: int, on_sample) -> None:
    for i in range(count):
        body = orjson.dumps(
            {
                "request_id": f"bench-{i}",
                "agent": "terminus-2",
                "tasks": [{"task": "hello-file", "n": group}],
                "metadata": {"step": i, "note": "x" * 64},
            }
        )
        reply = await controller.submit(SubmitRequest.model_validate_json(body))
        await asyncio.sleep(0)  # the rollouts start
        await controller.cancel(reply.groups[0].group_id)
        if (i + 1) % sample == 0:
            on_sample(i + 1)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cycles", type=int, default=100_000)
    parser.add_argument(
        "--warmup",
        type=int,
        default=20_000,
        help="cycles before the 'after warm-up' reading (default: twice "
        "the default retention, so the book is full by then)",
    )
    parser.add_argument("--group", type=int, default=2, help="rollouts per submit")
    parser.add_argument("--sample", type=int, default=5_000)
    parser.add_argument("--bound-mib", type=float, default=16.0)
    args = parser.parse_args()
    set_switches()

    with tempfile.TemporaryDirectory() as work:
        config = ControllerConfig(work_dir=Path(work), capacity=max(256, args.group))
        controller = Controller(config, FakeWeightUpdater(), runner=LocalRollouts(hold_s=60))
        readings: dict[str, float] = {"start": rss_mib()}
        peak = readings["start"]

        def on_sample(done: int) -> None:
            nonlocal peak
            rss = rss_mib()
            peak = max(peak, rss)
            if done == args.warmup:
                readings["after warm-up"] = rss
            book = controller.book
            print(
                f"{done:>8} cycles  rss {rss:8.1f} MiB  groups {len(book.groups):>6}  "
                f"request ids {len(book.requests):>6}  tasks {len(controller._tasks)}",
                flush=True,
            )

        started = time.perf_counter()
        asyncio.run(cycles(controller, args.cycles, args.group, args.sample, on_sample))
        seconds = time.perf_counter() - started
        readings["end"] = rss_mib()
    readings.setdefault("after warm-up", readings["start"])
    growth = readings["end"] - readings["after warm-up"]
    print(
        f"\n{args.cycles} submit/cancel cycles ({args.group} rollouts each) in "
        f"{seconds:.0f} s ({args.cycles / seconds:.0f}/s); load: {os.getloadavg()}"
    )
    for name, value in readings.items():
        print(f"  rss {name:<14} {value:8.1f} MiB")
    print(f"  rss peak           {peak:8.1f} MiB")
    verdict = "within" if growth <= args.bound_mib else "PAST"
    print(
        f"  growth after the warm-up: {growth:+.1f} MiB, {verdict} the bound of "
        f"{args.bound_mib:g} MiB"
    )
    return 0 if growth <= args.bound_mib else 1


if __name__ == "__main__":
    sys.exit(main())
