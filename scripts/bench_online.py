"""Rollouts per minute through the online service against `sweep` at the same concurrency,
and the controller's CPU per rollout.

Both run the stub agent (tests/fixtures/stub_agent.py: `--calls` chat calls through the
capture proxy deployment, `--think` seconds apart) on the same kind of rollout hosts,
against a stub engine, so what differs is the driver: the sweep driver writing Parquet,
or the controller actor behind its HTTP API, with a trainer loop submitting groups of
`--group` rollouts over HTTP, long-polling them and acknowledging them as they finish.
The controller's CPU is its actor process's (user + system) over the run, divided by
the rollouts; the HTTP app runs in this process, as a trainer's client would.

    .venv/bin/python scripts/bench_online.py [--concurrency 16 64] [--rollouts 192]
"""

from __future__ import annotations

import argparse
import asyncio
import math
import os
import socket
import sys
import tempfile
import time
from pathlib import Path

import httpx
import psutil
import ray
import uvicorn

# The repo root, for the stub agent (tests/fixtures); run from the root, as above, so
# that Ray's workers, which get the driver's working directory on their path, find it too.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_sweep import add_workload_args, certified_model, start_engine

from harbor_ray.cluster.host import ProxyTarget
from harbor_ray.cluster.ingress import start_capture_proxy, stop_capture_proxy
from harbor_ray.cluster.sweep import SweepConfig, sweep
from harbor_ray.online.app import ActorController, build_controller_app
from harbor_ray.online.controller import ControllerConfig
from harbor_ray.online.controller_actor import start_controller
from harbor_ray.online.weights import FakeWeightUpdater
from harbor_ray.switches import set_switches
from harbor_ray.trials.datasets import resolve_dataset, select_tasks
from harbor_ray.trials.spec import make_specs
from tests.fixtures.stub_agent import chat_agent

KEY = "bench-key"
TASK = "hello-file"


async def through_sweep(
    concurrency: int, count: int, args: argparse.Namespace, proxy: ProxyTarget, out: Path
) -> float:
    """Wall seconds of a sweep of `count` stub rollouts at `concurrency`."""
    specs = make_specs(
        select_tasks(resolve_dataset("samples"), [TASK]),
        count,
        agent="terminus-2",
        sandbox="local",
        trials_dir=out / "trials",
        run_id=f"sweep{concurrency}",
    )
    config = SweepConfig(
        out=out,
        concurrency=concurrency,
        rollouts_per_host=args.rollouts_per_host,
        proxy=proxy,
        retries=0,
    )
    started = time.perf_counter()
    stats = await sweep(specs, config, {}, work=chat_agent(args.calls, args.think))
    assert stats.ok == count, stats
    return time.perf_counter() - started


async def through_service(
    concurrency: int, count: int, args: argparse.Namespace, proxy: ProxyTarget, out: Path
) -> tuple[float, float]:
    """Wall seconds of `count` stub rollouts submitted in groups to the controller at
    `concurrency`, and the controller process's CPU seconds over them."""
    name = f"bench{concurrency}"
    config = ControllerConfig(
        work_dir=out,
        proxy=proxy,
        concurrency=concurrency,
        capacity=count,
        rollouts_per_host=args.rollouts_per_host,
        retries=0,
    )
    handle = start_controller(
        name, config, FakeWeightUpdater(), work=chat_agent(args.calls, args.think)
    )
    await handle.policy.remote()  # constructed
    process = psutil.Process(await handle.__ray_call__.remote(lambda _: os.getpid()))
    sock = socket.create_server(("127.0.0.1", 0))
    server = uvicorn.Server(
        uvicorn.Config(
            build_controller_app(ActorController(handle), KEY),
            log_level="warning",
            access_log=False,
        )
    )
    serving = asyncio.create_task(server.serve(sockets=[sock]))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    try:
        async with httpx.AsyncClient(
            base_url=url, timeout=120, headers={"authorization": f"Bearer {KEY}"}
        ) as http:
            while not server.started:
                await asyncio.sleep(0.01)
            cpu_before = sum(process.cpu_times()[:2])
            started = time.perf_counter()
            groups = math.ceil(count / args.group)
            for g in range(groups):
                n = min(args.group, count - g * args.group)
                reply = await http.post(
                    "/v1/rollouts",
                    json={
                        "request_id": f"{name}-{g}",
                        "agent": "terminus-2",
                        "tasks": [{"task": TASK, "n": n}],
                    },
                )
                assert reply.status_code == 202, reply.text
            rows = 0
            while rows < count:
                batch = (await http.get("/v1/groups", params={"wait_s": 5, "max": 100})).json()[
                    "groups"
                ]
                if batch:
                    rows += sum(len(g["rollouts"]) for g in batch)
                    assert all(r["ok"] for g in batch for r in g["rollouts"])
                    await http.post(
                        "/v1/groups/ack", json={"group_ids": [g["group_id"] for g in batch]}
                    )
            wall = time.perf_counter() - started
            cpu = sum(process.cpu_times()[:2]) - cpu_before
    finally:
        server.should_exit = True
        await serving
        await handle.shutdown.remote()
        ray.kill(handle)
    return wall, cpu


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--concurrency", type=int, nargs="+", default=[16, 64])
    parser.add_argument("--rollouts", type=int, default=192, help="per concurrency and driver")
    parser.add_argument("--group", type=int, default=8, help="rollouts per submitted group")
    add_workload_args(parser)
    parser.add_argument(
        "--per-host", dest="rollouts_per_host", type=int, default=16, help="rollouts per host"
    )
    args = parser.parse_args()
    set_switches()  # before Ray starts

    temp_dir = tempfile.mkdtemp(prefix="hr-bench-", dir="/tmp")
    ray.init(_temp_dir=temp_dir, include_dashboard=False, log_to_driver=False)
    engine, llm_url = start_engine(args.delay_ms)
    results = []
    proxy = None
    try:
        proxy = start_capture_proxy(
            llm_url, asyncio.run(certified_model(llm_url)), ingress="direct", replicas=args.replicas
        )
        with tempfile.TemporaryDirectory(prefix="hr-bench-out-") as root:
            for c in args.concurrency:
                sweep_s = asyncio.run(
                    through_sweep(c, args.rollouts, args, proxy, Path(root) / f"sweep{c}")
                )
                service_s, cpu_s = asyncio.run(
                    through_service(c, args.rollouts, args, proxy, Path(root) / f"online{c}")
                )
                results.append((c, sweep_s, service_s, cpu_s))
                print(
                    f"c={c}: sweep {sweep_s:.1f} s, service {service_s:.1f} s, "
                    f"controller CPU {cpu_s:.1f} s",
                    flush=True,
                )
    finally:
        if proxy is not None:
            stop_capture_proxy(proxy)
        engine.terminate()
        ray.shutdown()
    print(
        f"\n{args.rollouts} rollouts per run (groups of {args.group}), {args.calls} calls "
        f"{args.think:g} s apart, stub engine {args.delay_ms:g} ms, "
        f"{args.rollouts_per_host} per host"
    )
    print(
        "| concurrency | sweep rollouts/min | service rollouts/min | ratio (target >= 0.9) "
        "| controller CPU ms per rollout |"
    )
    print("|---|---|---|---|---|")
    for c, sweep_s, service_s, cpu_s in results:
        n = args.rollouts
        print(
            f"| {c} | {60 * n / sweep_s:.0f} | {60 * n / service_s:.0f} | "
            f"{sweep_s / service_s:.2f} | {1e3 * cpu_s / n:.1f} |"
        )


if __name__ == "__main__":
    main()
